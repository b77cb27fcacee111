// The in-process RankGroup's state (include/dsv4/parallel.h): one ops::Collective per rank over
// shared host memory, for engines driven by threads of one process.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "dsv4/parallel.h"
#include "ops/collective.h"

namespace dsv4 {

struct RankGroup::Impl {
    explicit Impl(int ranks);
    // The collective rank `rank` calls (owned by the group).
    ops::Collective* collective(int rank) { return views_[static_cast<size_t>(rank)].get(); }
    int size() const { return n_; }

    // All ranks meet here (a generation count, so the barrier can be reused at once).
    void barrier();
    // x := the sum over the ranks, added in rank order (the same bits on every rank).
    void all_reduce_sum(int rank, float* x, int64_t n);

  private:
    int n_;
    std::mutex m_;
    std::condition_variable cv_;
    int arrived_ = 0;
    uint64_t generation_ = 0;
    std::vector<const float*> data_;  // [rank] the buffer a rank offers to the current sum
    std::vector<int64_t> lengths_;
    std::vector<std::vector<float>> scratch_;  // [rank] its sum
    std::vector<std::unique_ptr<ops::Collective>> views_;
};

}  // namespace dsv4
