// Launcher of the router's scoring half (ops::RouteArgs): sqrt-softplus scores, selection by
// score + bias (top-k, ties to the lower expert) or by the hash table, normalised weights. The
// router op is the gate linear followed by this, or (a dense gate: RouterGate) both in one
// kernel, whose gate sums are the dense linear kernel's, bit for bit.
#pragma once

#include <cuda_runtime.h>

#include "ops/moe.h"

namespace dsv4::cuda {

inline constexpr int kRouteMaxK = 32;
// The most routed experts a layer may have: the routing and the expert grouping keep two values
// an expert in the default 48 KB of shared memory.
inline constexpr int kRouteMaxExperts = 48 * 1024 / 8;

// The gate product done inside the routing kernel: logits[t, e] = x[t] . w[e] (f32 sums, lanes
// striding over D, a warp reduction: the dense linear kernel's order).
struct RouterGate {
    const float* x = nullptr;  // [T, D]
    const void* w = nullptr;   // [E, D] f32 or bf16
    bool w_bf16 = false;
    int64_t D = 0;
    float* logits = nullptr;  // [T, E] written (the RouteArgs logits)
};

// The one-token MoE's launches prepared by the routing kernel (moe_ids_with_shared's work, one
// launch fewer): the k + 1 groups' expert ids and scales (the routed experts with their weights,
// then the shared expert stacked as expert shared_id with scale 1), and h and out cleared for
// the GEMVs that add into them.
struct MoePrep {
    int32_t* ids = nullptr;  // [k + 1]
    float* scale = nullptr;  // [k + 1]
    int32_t shared_id = 0;
    float* h = nullptr;  // [n_h] zeroed
    int64_t n_h = 0;
    float* out = nullptr;  // [n_out] zeroed
    int64_t n_out = 0;
};

// gate == nullptr: a.logits hold the gate outputs already (the two-kernel path). prep: a
// one-token step only (a.T == 1).
void launch_route(const ops::RouteArgs& a, cudaStream_t stream, const RouterGate* gate = nullptr,
                  const MoePrep* prep = nullptr);

}  // namespace dsv4::cuda
