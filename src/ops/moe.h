// Op contracts: the router (gate projection + sqrt-softplus scores + bias for selection only +
// top-k + normalisation, or hash routing) and the MoE (routed experts w1|w3 + clipped SwiGLU +
// w2, weighted and combined, plus the shared expert).
#pragma once

#include <cstdint>

#include "ops/weight.h"

namespace dsv4::ops {

// Top-k ties: the lower expert index wins. The CPU reference: linear, then the scoring.
struct RouterArgs {
    const float* x = nullptr;          // [T, D]
    const Weight* gate = nullptr;      // [E, D]
    const float* bias = nullptr;       // [E] selection bias; nullptr when hash-routed
    const int32_t* tid2eid = nullptr;  // [V, k] hash table; nullptr when score-routed
    const int32_t* ids = nullptr;      // [T] token ids (hash routing)
    float* logits = nullptr;           // [T, E] scratch: gate outputs
    int32_t* sel = nullptr;            // [T, k] chosen experts
    float* weight = nullptr;           // [T, k] normalised scores * routed_scaling_factor
    int64_t T = 0;
    int E = 0, k = 0;
    float scale = 1.0f;
    // logits is zero already (cleared earlier in the step: LinearGroupArgs::clear), so a backend
    // whose gate product adds into its output needs no clearing of its own.
    bool logits_cleared = false;
};

// The scoring half of the router on given logits (the reference's building block).
struct RouteArgs {
    const float* logits = nullptr;     // [T, E] gate outputs
    const float* bias = nullptr;       // [E]; nullptr when hash-routed
    const int32_t* tid2eid = nullptr;  // [V, k]; nullptr when score-routed
    const int32_t* ids = nullptr;      // [T]
    int32_t* sel = nullptr;            // [T, k]
    float* weight = nullptr;           // [T, k]
    int64_t T = 0;
    int E = 0, k = 0;
    float scale = 1.0f;
};

// out[t] = sum_j weight[t,j] * expert_sel[t,j](x[t]) + shared(x[t]) (when the shared expert is
// given), summed in j order then the shared expert: independent of the other tokens.
struct MoeArgs {
    const float* x = nullptr;                // [T, D] f32
    const int32_t* sel = nullptr;            // [T, k] expert ids, backend memory
    const float* weight = nullptr;           // [T, k]
    const ExpertWeights* experts = nullptr;  // E experts of [I, D] / [D, I]
    const Weight* shared_w1 = nullptr;       // [I, D] or nullptr (no shared expert)
    const Weight* shared_w3 = nullptr;       // [I, D]
    const Weight* shared_w2 = nullptr;       // [D, I]
    float* shared_scratch = nullptr;         // [T, 2*I + D] for the shared expert
    float* routed_scratch = nullptr;         // moe_routed_scratch_floats(T, k, E, D, I) floats
                                             // of backend scratch (CUDA); the CPU ignores it
    float* out = nullptr;                    // [T, D] overwritten
    int64_t T = 0;
    int D = 0, I = 0, E = 0, k = 0;
    float swiglu_limit = 0.0f;
    // Reference numerics: every expert input rounded to FP8 per 128, and the routing weight
    // applied to the SwiGLU output before w2 (as DeepSeek's reference orders it).
    bool act_fp8 = false;
    // The bf16 reference mode (x holds bf16 values): every expert's w1 and w3 outputs rounded to
    // bf16, the routing weight applied to the SwiGLU output before w2 (as with act_fp8) and the
    // product rounded to bf16 (then to FP8 with act_fp8), each w2 output rounded to bf16 and
    // summed in fp32 in expert-id order (DeepSeek's loop over experts), the shared expert's
    // outputs rounded the same way and added, and the sum rounded to bf16.
    bool round_bf16 = false;
    // Routing first (optional; host memory): exactly router(*route), whose sel and weight are
    // this op's, then the experts. (CUDA: a one-token step's routing kernel also prepares the
    // experts' launches, one launch fewer a layer.)
    const RouterArgs* route = nullptr;
};

// A backend may group the (token, slot) pairs by expert when they outnumber the experts 4 to 1
// (prefill): each expert's weights are then read once per 16 of its rows, not once per row.
inline bool moe_grouped_by_expert(int64_t T, int k, int E) {
    return T * k >= 4 * int64_t{E};
}
// Fewer pairs (decode batches): a backend may gather one expert's pairs into groups of up to
// this many rows, at most one group a pair.
inline constexpr int kMoeDecodeGroupRows = 4;
// Scratch for MoeArgs::routed_scratch: per row (a pair, or a slot of an expert's groups of 16 or
// of kMoeDecodeGroupRows) its input, w1|w3 output, SwiGLU output, routing weight and group id,
// plus an int32 per pair and one more (the groups formed).
inline int64_t moe_routed_scratch_floats(int64_t T, int k, int E, int D, int I) {
    const int64_t P = T * k;
    const int64_t rows = moe_grouped_by_expert(T, k, E) ? (P + 15) / 16 * 16 + 16 * int64_t{E}
                                                        : P * kMoeDecodeGroupRows;
    return rows * (D + 3 * int64_t{I} + 2) + P + 1;
}

// Expert-use counting (benchmarks' routing histogram): counts[sel[i]] += 1 for i < n.
struct CountExpertsArgs {
    const int32_t* sel = nullptr;  // [n] expert ids (the router's [T, k] selection)
    int32_t* counts = nullptr;     // [E]
    int64_t n = 0;
    int E = 0;
};

}  // namespace dsv4::ops
