// Op contract: token embedding, replicated into the n residual streams.
#pragma once

#include <cstdint>

#include "ops/weight.h"

namespace dsv4::ops {

struct EmbedArgs {
    const int32_t* ids = nullptr;  // [T]
    const Weight* table = nullptr;  // [V, D]
    float* out = nullptr;           // [T, n, D]
    int64_t T = 0;
    int n = 1;
};

}  // namespace dsv4::ops
