// Op contract: the lightning indexer's scores and top-k entry selection (CSA layers).
#pragma once

#include <cstdint>

namespace dsv4::ops {

// I(t, b) = sum_h w[t,h] * relu(q[t,h] . keys[b]) for b < floor((p+1)/m); selects the
// min(K, valid) best. Ties: the lower entry index wins. Output sorted by entry index,
// padded with -1.
struct IndexerTopkArgs {
    const float* q = nullptr;     // [T, Hi, hi]
    const float* w = nullptr;     // [T, Hi]
    const float* keys = nullptr;  // [capacity, hi]
    int32_t* topk = nullptr;      // [T, K]
    int64_t pos0 = 0;
    int T = 0, Hi = 0, hi = 0, K = 0, m = 0;
};

}  // namespace dsv4::ops
