// Op contracts: router (sqrt-softplus scores, bias for selection only, or hash routing) and
// the routed experts (clipped SwiGLU, weighted sum).
#pragma once

#include <cstdint>

#include "formats/quant_weight.h"

namespace dsv4::ops {

// Top-k ties: the lower expert index wins.
struct RouteArgs {
    const float* logits = nullptr;     // [T, E] gate outputs
    const float* bias = nullptr;       // [E] selection bias; nullptr when hash-routed
    const int32_t* tid2eid = nullptr;  // [V, k] hash table; nullptr when score-routed
    const int32_t* ids = nullptr;      // [T] token ids (hash routing)
    int32_t* sel = nullptr;            // [T, k] chosen experts
    float* weight = nullptr;           // [T, k] normalised scores * routed_scaling_factor
    int64_t T = 0;
    int E = 0, k = 0;
    float scale = 1.0f;
};

struct MoeArgs {
    const float* x = nullptr;         // [T, D]
    const int32_t* sel = nullptr;     // [T, k]
    const float* weight = nullptr;    // [T, k]
    const QuantWeight* w1 = nullptr;  // [E] each [I, D] (gate)
    const QuantWeight* w3 = nullptr;  // [E] each [I, D] (up)
    const QuantWeight* w2 = nullptr;  // [E] each [D, I] (down)
    float* out = nullptr;             // [T, D] overwritten with the routed sum
    int64_t T = 0;
    int D = 0, I = 0, E = 0, k = 0;
    float swiglu_limit = 0.0f;
};

}  // namespace dsv4::ops
