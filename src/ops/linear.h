// Op contracts: y = x · Wᵀ over a row range of a weight, the same for several weights that read
// one x (one launch on CUDA), and SwiGLU.
#pragma once

#include <cstdint>

#include "ops/weight.h"

namespace dsv4::ops {

struct LinearArgs {
    const void* x = nullptr;    // [M, K] of x_type, rows ldx apart (K = w->cols)
    const Weight* w = nullptr;  // [N_total, K]; rows [row0, row0 + N) are used
    void* y = nullptr;          // [M, N] of y_type, rows ldy apart; overwritten
    int64_t M = 0, N = 0, row0 = 0;
    int64_t ldx = 0, ldy = 0;  // 0 = dense (K and N)
    ActType x_type = ActType::kF32, y_type = ActType::kF32;
    bool act_fp8 = false;  // x rounded to FP8 per 128 along K first (reference numerics)
    // y rounded to bf16 afterwards (the bf16 reference mode: DeepSeek's linears return torch's
    // default dtype, bf16). The CPU reference: the linear, then RoundTrip::kBf16 on y.
    bool round_bf16 = false;
    // groups > 1: `groups` products in one op, each of N rows; product j reads x columns
    // [j*K, (j+1)*K) (K = w->cols) and weight rows [row0 + j*N, row0 + (j+1)*N), and writes y
    // columns [j*N, (j+1)*N) (V4's grouped output projection wo_a). The plain sequence of
    // linears; one launch on CUDA.
    int groups = 1;
    // y's [M, N * groups] block is zero already (an earlier op of the step cleared it,
    // LinearGroupArgs::clear): a backend that adds the products into a cleared y need not clear it.
    // The product is the same either way.
    bool y_cleared = false;
    // A second linear that reads this one's output (then->x == y), run after it: the plain
    // sequence of the two (wo_a then wo_b). CUDA may run the pair as one launch (gemv_chain.h).
    const LinearArgs* then = nullptr;
};

// Product j of a grouped linear as a plain linear (K = the weight's columns): what `groups`
// means, for the backends that run the groups one by one.
inline LinearArgs linear_group_part(const LinearArgs& a, int64_t K, int j) {
    const int64_t xe = a.x_type == ActType::kBF16 ? 2 : 4, ye = a.y_type == ActType::kBF16 ? 2 : 4;
    LinearArgs g = a;
    g.groups = 1;
    g.then = nullptr;
    g.x = static_cast<const uint8_t*>(a.x) + j * K * xe;
    g.ldx = a.ldx ? a.ldx : K * a.groups;
    g.y = static_cast<uint8_t*>(a.y) + j * a.N * ye;
    g.ldy = a.ldy ? a.ldy : a.N * a.groups;
    g.row0 = a.row0 + j * a.N;
    return g;
}

// A buffer an op sets to zero once its own work is done: the output of an op later in the step
// that adds into it (LinearArgs::y_cleared). A CUDA backend clears it inside the op's launch
// rather than by a memset node before that op, which would be a launch of its own and would cut
// the programmatic edge that lets a GEMV's weights stream in while the kernel before it runs.
struct Clear {
    float* p = nullptr;  // [n]; nullptr: unused
    int64_t n = 0;
};
inline constexpr int kMaxClears = 5;

// Several projections of the same x (e.g. wq_a | wkv | compressor wkv, wgate): one read of x
// for all of them. The CPU reference is the plain sequence of linears.
struct LinearGroupArgs {
    static constexpr int kMaxOutputs = 8;
    const float* x = nullptr;  // [M, K] dense
    struct Output {
        const Weight* w = nullptr;  // [N, K]
        float* y = nullptr;         // [M, N] dense; overwritten
        bool act_fp8 = false;       // as LinearArgs
        bool round_bf16 = false;    // as LinearArgs
    } out[kMaxOutputs];
    int n_out = 0;
    int64_t M = 0;
    // Backend::pack_rows of the outputs' weights in this order (optional): a backend that packed
    // them may read them in one pass. The result is the same sequence of linears.
    const Weight* packed = nullptr;
    // Buffers set to zero by the same call, after the linears (Clear). Each must not overlap x,
    // an output or another.
    Clear clear[kMaxClears] = {};
};

// SwiGLU with DeepSeek-V4's clipping: h = silu(min(g, L)) * clamp(u, -L, L); L = 0: no clip.
struct SwigluArgs {
    const float* gate = nullptr;  // [n]
    const float* up = nullptr;    // [n]
    float* out = nullptr;         // [n] (may alias gate)
    int64_t n = 0;
    float limit = 0.0f;
};

}  // namespace dsv4::ops
