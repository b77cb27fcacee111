// Launcher of the router's scoring half (ops::RouteArgs): sqrt-softplus scores, selection by
// score + bias (top-k, ties to the lower expert) or by the hash table, normalised weights. The
// router op is the gate linear followed by this, or (a dense gate: RouterGate) both in one
// kernel, whose gate sums are the dense linear kernel's, bit for bit.
#pragma once

#include <cuda_runtime.h>

#include "ops/moe.h"

namespace dsv4::cuda {

inline constexpr int kRouteMaxK = 32;

// The gate product done inside the routing kernel: logits[t, e] = x[t] . w[e] (f32 sums, lanes
// striding over D, a warp reduction: the dense linear kernel's order).
struct RouterGate {
    const float* x = nullptr;  // [T, D]
    const void* w = nullptr;   // [E, D] f32 or bf16
    bool w_bf16 = false;
    int64_t D = 0;
    float* logits = nullptr;  // [T, E] written (the RouteArgs logits)
};

// gate == nullptr: a.logits hold the gate outputs already (the two-kernel path).
void launch_route(const ops::RouteArgs& a, cudaStream_t stream, const RouterGate* gate = nullptr);

}  // namespace dsv4::cuda
