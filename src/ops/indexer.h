// Op contract: the lightning indexer's scores and top-k entry selection (CSA layers).
#pragma once

#include <cstdint>

#include "ops/step.h"

namespace dsv4::ops {

// For token t at position p in slot s: I(t, e) = sum_h w[t,h] * relu(q[t,h] . keys[s][e]) for
// e < floor((p+1)/m); selects the min(K, valid) best. Ties: the lower entry index wins.
// Output sorted by entry index, padded with -1.
struct IndexerTopkArgs {
    const float* q = nullptr;     // [T, Hi, hi]
    const float* w = nullptr;     // [T, Hi]
    const float* keys = nullptr;  // [S, n_entries, hi]
    int32_t* topk = nullptr;      // [T, K]
    StepDesc step;
    int64_t n_entries = 0;
    int Hi = 0, hi = 0, K = 0, m = 0;
};

}  // namespace dsv4::ops
