// The collectives of a model split over ranks (docs/parallel.md). Expert parallelism: every rank
// holds the whole model but a contiguous share of each layer's routed experts, computes the
// attention and the router redundantly, its own experts' part of the MoE output (rank 0 adds
// the shared expert), and one sum over the ranks per layer makes the output whole again. Every
// rank runs the same steps, so every rank calls the same collectives in the same order.
#pragma once

#include <cstdint>

namespace dsv4::ops {

class Collective {
  public:
    virtual ~Collective() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    // x[0, n) := the sum over the ranks of their x[0, n) (host memory), added in rank order so
    // that every rank gets the same bits.
    virtual void all_reduce_sum(float* x, int64_t n) = 0;
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
