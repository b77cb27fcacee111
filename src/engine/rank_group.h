// RankGroup's state (include/dsv4/parallel.h): one ops::Collective per rank this process runs.
// In process (RankGroup::in_process): every rank, over shared host memory, for engines driven by
// threads of one process. Over TCP (RankGroup::connect, tcp_rank_group.cc): this process's rank
// only, the others in other processes (on this host or others).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dsv4/parallel.h"
#include "ops/collective.h"

namespace dsv4 {

struct RankGroup::Impl {
    virtual ~Impl() = default;
    // The collective rank `rank` calls (owned by the group); nullptr for a rank another process
    // runs.
    virtual ops::Collective* collective(int rank) = 0;
    virtual int size() const = 0;
    virtual void leave(int rank) = 0;  // RankGroup::leave
    // RankGroup::on_lost (nothing in process).
    virtual void on_lost(std::function<void(const std::string& why)> /*lost*/,
                         RankGroupWatch /*what*/) {}
    // A step of this process's engine begins / ends (the watch's step timeout; nothing in
    // process).
    virtual void step_begin() {}
    virtual void step_end() {}
    // Whether every rank runs in this process (threads), none in another.
    bool all_here() {
        for (int r = 0; r < size(); ++r)
            if (collective(r) == nullptr) return false;
        return true;
    }
};

class LocalRankGroup final : public RankGroup::Impl {
  public:
    explicit LocalRankGroup(int ranks);
    ops::Collective* collective(int rank) override {
        return views_[static_cast<size_t>(rank)].get();
    }
    int size() const override { return n_; }
    void leave(int rank) override;

    // All ranks meet here (a generation count, so the barrier can be reused at once); false,
    // without waiting, once a rank has left (it will never arrive).
    bool barrier();
    // x := the sum over the ranks, added in rank order (the same bits on every rank); false,
    // x as it was, once a rank has left (why_failed() says which).
    bool all_reduce_sum(int rank, float* x, int64_t n);
    // make()'s value, made by the first rank to ask, the same bytes to every rank.
    std::string shared_once(const std::function<std::string()>& make);
    // The error of a sum that failed: which rank left.
    Status why_failed() const;

  private:
    int n_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    int arrived_ = 0;
    uint64_t generation_ = 0;
    int left_ = -1;                   // the first rank that left, -1: none
    std::vector<const float*> data_;  // [rank] the buffer a rank offers to the current sum
    std::vector<int64_t> lengths_;
    std::vector<std::vector<float>> scratch_;  // [rank] its sum
    std::vector<std::unique_ptr<ops::Collective>> views_;
    bool shared_made_ = false;
    std::string shared_;
};

// Rank `rank` of `ranks` over TCP: rank 0 listens at `address` (host:port) and the others
// connect, each within `timeout_s`; then every sum goes through rank 0 (tcp_rank_group.cc).
Expected<std::unique_ptr<RankGroup::Impl>> connect_tcp_rank_group(int rank, int ranks,
                                                                  const std::string& address,
                                                                  double timeout_s);

}  // namespace dsv4
