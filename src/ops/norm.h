// Op contract: RMSNorm over the last dimension, weighted or not, with an optional RoPE after it.
#pragma once

#include <cstdint>

#include "ops/rope.h"

namespace dsv4::ops {

struct RmsNormArgs {
    const float* x = nullptr;       // [rows, dim]
    const float* weight = nullptr;  // [dim]; nullptr = unweighted (the per-head q norm)
    float* out = nullptr;           // [rows, dim]; may alias x
    int64_t rows = 0;
    int dim = 0;
    float eps = 1e-6f;
    // The bf16 reference mode (x holds bf16 values; out is rounded to bf16). Weighted (DeepSeek's
    // RMSNorm module, fp32 inside): the plain norm, then RoundTrip::kBf16 on out. Unweighted (the
    // per-head q norm, written as torch ops on the bf16 tensor, `q *= rsqrt(q.square().mean()
    // + eps)`): every intermediate is rounded to bf16 as well: the squares, their mean (summed in
    // fp32), mean + eps, the rsqrt, and each product.
    bool round_bf16 = false;
    // RoPE on the normed rows (optional): exactly rms_norm, then rope on its output (rope's
    // head_dim = dim, the same round_bf16). Host memory; nullptr: no rope.
    const FusedRope* rope = nullptr;
    // A second, independent norm in the same call (host memory; nullptr: none): exactly
    // rms_norm(*this without also), then rms_norm(*also). Its rows must not overlap this one's
    // (the CUDA backend runs both in one launch: the q and K=V norms of a decode step).
    const RmsNormArgs* also = nullptr;
};

}  // namespace dsv4::ops
