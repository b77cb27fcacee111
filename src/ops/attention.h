// Op contracts: sink attention over window + compressed keys, and the sliding-window ring.
#pragma once

#include <cstdint>

namespace dsv4::ops {

// For the query at position p = pos0 + t the keys are: ring positions in [p-W+1, pos0)
// (written before this chunk), chunk positions in [max(pos0, p-W+1), p], and compressed
// entries: all b < floor((p+1)/m) when topk is nullptr (HCA), else the topk[t] entries >= 0
// (CSA). One softmax over all keys, with exp(sink[h]) added to the denominator only.
struct AttentionArgs {
    const float* q = nullptr;        // [T, H, hd]
    const float* kv = nullptr;       // [T, hd] this chunk's window K=V
    const float* ring = nullptr;     // [W, hd] window K=V before the chunk, slot = pos % W
    const float* entries = nullptr;  // [capacity, hd] compressed K=V; nullptr = sliding only
    const int32_t* topk = nullptr;   // [T, K] selected entries, -1 = none; nullptr = all valid
    const float* sink = nullptr;     // [H]
    float* out = nullptr;            // [T, H, hd]
    int64_t pos0 = 0;
    int T = 0, H = 0, hd = 0, W = 0, K = 0, compress_rate = 0;
    float softmax_scale = 1.0f;
};

struct RingWriteArgs {
    const float* kv = nullptr;  // [T, hd]
    float* ring = nullptr;      // [W, hd], slot = pos % W
    int64_t pos0 = 0;
    int T = 0, W = 0, hd = 0;
};

}  // namespace dsv4::ops
