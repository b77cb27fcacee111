// Op contract: y = x · Wᵀ over a row range of a (possibly quantized) weight.
#pragma once

#include <cstdint>

#include "formats/quant_weight.h"

namespace dsv4::ops {

struct LinearArgs {
    const float* x = nullptr;        // [M, K] rows ldx apart (K = w->cols)
    const QuantWeight* w = nullptr;  // [N_total, K]; rows [row0, row0 + N) are used
    float* y = nullptr;              // [M, N] rows ldy apart; overwritten
    int64_t M = 0, N = 0, row0 = 0;
    int64_t ldx = 0, ldy = 0;  // 0 = dense (K and N)
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
