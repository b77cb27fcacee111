// Op contract: the KV compressor of CSA (overlapping, coff = 2) and HCA (coff = 1) layers.
// Consumes one chunk of projected tokens, keeps the open block in `state`, and writes every
// entry completed in the chunk (entries floor(pos0/m) .. floor((pos0+T)/m) - 1), pooled but
// not yet normalised or roped.
#pragma once

#include <cstdint>

namespace dsv4::ops {

struct CompressArgs {
    const float* kv = nullptr;    // [T, coff*hd] value candidates C_j
    const float* gate = nullptr;  // [T, coff*hd] gate logits without the position bias
    const float* ape = nullptr;   // [m, coff*hd] position-in-block bias
    float* state_kv = nullptr;    // [coff*m, coff*hd] persistent per sequence
    float* state_gate = nullptr;  // [coff*m, coff*hd] persistent; -inf = empty slot
    float* entries = nullptr;     // [capacity, hd]
    int64_t pos0 = 0;
    int T = 0, m = 0, hd = 0, coff = 1;
};

}  // namespace dsv4::ops
