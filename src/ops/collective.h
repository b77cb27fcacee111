// The collectives of a model split over ranks (docs/parallel.md). Expert parallelism: every rank
// holds the whole model but a contiguous share of each layer's routed experts, computes the
// attention and the router redundantly, its own experts' part of the MoE output (rank 0 adds
// the shared expert), and one sum over the ranks per layer makes the output whole again. Every
// rank runs the same steps, so every rank calls the same collectives in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"

namespace dsv4::ops {

class Collective {
  public:
    virtual ~Collective() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // x[0, n) := the sum over the ranks of their x[0, n) (host memory), added in rank order so
    // that every rank gets the same bits.
    virtual void all_reduce_sum(float* x, int64_t n) = 0;
    // The value `make` returns, made once for the whole group by one rank; every rank gets the
    // same bytes (a device backend's communicator bootstrap: NCCL's unique id). Every rank calls
    // it, in the same order as the other collectives.
    virtual std::string shared_once(const std::function<std::string()>& make) = 0;
    // Ok, or why the collectives stopped (ranks in other processes: a rank went away). After a
    // failure the sums leave x as it was; the engine fails the step with this error.
    virtual Status status() const { return Status::ok(); }
};

// The routed experts rank `rank` of `size` owns: [first, first + count), contiguous, counts
// differing by at most one.
struct ExpertShard {
    int first = 0, count = 0;
};
inline ExpertShard expert_shard(int E, int rank, int size) {
    const int first = static_cast<int>(int64_t{E} * rank / size);
    const int end = static_cast<int>(int64_t{E} * (rank + 1) / size);
    return {first, end - first};
}

}  // namespace dsv4::ops
