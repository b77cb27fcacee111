// Op contract: RMSNorm over the last dimension, weighted or not.
#pragma once

#include <cstdint>

namespace dsv4::ops {

struct RmsNormArgs {
    const float* x = nullptr;       // [rows, dim]
    const float* weight = nullptr;  // [dim]; nullptr = unweighted (the per-head q norm)
    float* out = nullptr;           // [rows, dim]; may alias x
    int64_t rows = 0;
    int dim = 0;
    float eps = 1e-6f;
};

}  // namespace dsv4::ops
