// Op contract: the lightning indexer's scores and top-k entry selection (CSA layers).
#pragma once

#include <cstdint>

#include "formats/cache_row.h"
#include "ops/rope.h"
#include "ops/step.h"

namespace dsv4::ops {

// For token t at position p in slot s: I(t, e) = sum_h w[t,h] * relu(q[t,h] . keys[s][e]) for
// e < floor((p+1)/m); selects the min(K, valid) best. Ties: the lower entry index wins.
// Output sorted by entry index, padded with -1. Keys are stored in `key_format` and decoded on
// read; fp4 keys are Hadamard-rotated, so the op rotates q the same way (fp32, unquantized)
// unless `q_rotated` says the caller already did (the reference numerics' round trip).
struct IndexerTopkArgs {
    const float* q = nullptr;     // [T, Hi, hi]
    const float* w = nullptr;     // [T, Hi]
    const float* keys = nullptr;  // [S, n_entries, hi] in key_format (see AttentionArgs)
    int32_t* topk = nullptr;      // [T, K]
    StepDesc step;
    int64_t n_entries = 0;
    int Hi = 0, hi = 0, K = 0, m = 0;
    CacheRowFormat key_format{};
    bool q_rotated = false;
    // The bf16 reference mode (DeepSeek's bf16 einsum and elementwise ops; q, keys and w hold
    // bf16 values): each head's q . k rounded to bf16, ReLU, times w rounded to bf16, and the sum
    // over heads (in fp32) rounded to bf16. Exact ties then happen; the tie rule decides them.
    bool round_bf16 = false;
    // Fused in front (optional; the op then gives what rope on q, scale on w, then this op
    // give): q's trailing q_rope.rope_dim dims of each head rotated as the rope op rotates them
    // (q_rope.heads == Hi; inv_freq nullptr: no rope), and every weight multiplied by w_scale.
    FusedRope q_rope{};
    float w_scale = 1.0f;
};

}  // namespace dsv4::ops
