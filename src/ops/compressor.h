// Op contract: the KV compressor of CSA (overlapping, coff = 2) and HCA (coff = 1) layers.
// Consumes each row's tokens in order into its slot's open block (`state`); a token at
// position p with p % m == m - 1 completes entry p / m, which is pooled, RMS-normed with
// `norm` and roped at the position of its block's first token (entry * m). Which tokens
// complete a block is decided inside the op from the step descriptor. A finished entry is
// encoded in `entry_format` (formats/cache_row.h).
//
// State rows: HCA keeps the open block in rows [0, m). CSA keeps the last two blocks by
// parity (compress_state_row): entry e pools block e - 1's rows (their first-half channels)
// then block e's (the second half), and a completion moves no state, so only the completing
// token's own row differs after a wrong token there (speculative drafts, docs/engine.md).
#pragma once

#include <cstdint>

#include "base/host_device.h"
#include "formats/cache_row.h"
#include "ops/quant.h"
#include "ops/step.h"

namespace dsv4::ops {

// CSA's state row of position j of block `block` (block -1: the rows a sequence starts with,
// empty).
DSV4_HD int compress_state_row(int64_t block, int j, int m) {
    return static_cast<int>(block & 1) * m + j;
}

struct CompressArgs {
    const float* kv = nullptr;        // [T, coff*hd] value candidates C_j
    const float* gate = nullptr;      // [T, coff*hd] gate logits without the position bias
    const float* ape = nullptr;       // [m, coff*hd] position-in-block bias
    const float* norm = nullptr;      // [hd] entry RMSNorm weight; nullptr: pooled only
    const float* inv_freq = nullptr;  // [rope_dim / 2] rope of the entries (with norm)
    float* state_kv = nullptr;        // [S, coff*m, coff*hd] persistent per slot (rows above)
    float* state_gate = nullptr;      // [S, coff*m, coff*hd] persistent; -inf = empty slot
    float* entries = nullptr;         // [S, n_entries, hd] in entry_format (see AttentionArgs)
    StepDesc step;
    int64_t n_entries = 0;  // entries per slot
    int m = 0, hd = 0, coff = 1, rope_dim = 0;
    float eps = 1e-6f, rope_scale = 1.0f;
    // Reference numerics: a completed entry's round trip after its rope (the main compressor's
    // NoPE dims to FP8 per 64, the indexer's keys Hadamard + FP4 per 32).
    RoundTrip entry_round_trip = RoundTrip::kNone;
    // How a finished entry is stored (after the round trip, if any); the pooling state stays
    // float32. kFp4 rotates the entry itself, so it never comes with kHadamardFp4.
    CacheRowFormat entry_format{};
    // The bf16 reference mode: the pooled entry (fp32) rounded to bf16 before its norm, the
    // norm's output and the rope's output rounded to bf16 too (then the entry round trip, which
    // should be the bf16 kind: kHadamardBf16Fp4).
    bool round_bf16 = false;
};

}  // namespace dsv4::ops
