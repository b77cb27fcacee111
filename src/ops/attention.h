// Op contracts: sink attention over window + compressed keys, and the sliding-window ring.
// Batched over the rows of a step (ops/step.h); every position comes from the descriptor.
#pragma once

#include <cstdint>

#include "formats/cache_row.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/step.h"

namespace dsv4::ops {

// For token t of row b (position p, the row starting at pos0 in slot s) the keys are: slot s's
// ring positions in [p-W+1, pos0) (written before this step), the row's own step tokens at
// positions [max(pos0, p-W+1), p], and slot s's compressed entries: all e < floor((p+1)/m)
// when topk is nullptr (HCA), else the topk[t] entries >= 0 (CSA). One softmax over all keys,
// with exp(sink[h]) added to the denominator only.
//
// Cache rows (`ring`, `entries`) are stored in `kv_format` (formats/cache_row.h) and decoded on
// read; the step's own keys are read as the cache would give them back (encoded and decoded),
// so a key is the same value whether it comes from the step or, later, from the ring.
// NOTE: rows of a type other than f32 are passed as the byte address of their storage through
// the float* fields (row stride cache_row_bytes); the CUDA backend implements f32 rows only.
struct AttentionArgs {
    const float* q = nullptr;        // [T, H, hd]
    const float* kv = nullptr;       // [T, hd] this step's window K=V
    const float* ring = nullptr;     // [S, R, hd] per slot, slot row = pos % R (R: ring_rows)
    const float* entries = nullptr;  // [S, n_entries, hd] compressed K=V; nullptr = sliding only
    const int32_t* topk = nullptr;   // [T, K] selected entries, -1 = none; nullptr = all valid
    const float* sink = nullptr;     // [H]
    float* out = nullptr;            // [T, H, hd]
    StepDesc step;
    int H = 0, hd = 0, W = 0, K = 0, compress_rate = 0;
    int64_t n_entries = 0;  // entries per slot
    float softmax_scale = 1.0f;
    CacheRowFormat kv_format{};  // ring and entry rows
    // The bf16 reference mode (DeepSeek's sparse_attn on bf16 q and K=V): fp32 scores, a running
    // softmax over the keys in blocks of 64 (running max without the sink, fp32 sum), each
    // block's probabilities rounded to bf16 before P·V, the sink added to the denominator at the
    // end, and the output rounded to bf16.
    bool round_bf16 = false;
    // A rope on the output rows (optional; the model's inverse rope at the query position):
    // exactly attention, then rope on out (head_dim hd, the same round_bf16). Host memory.
    const FusedRope* out_rope = nullptr;
    // Rows of a slot's ring, >= W (0: W). A step that feeds k speculative drafts needs
    // W + k - 1: the rows its rejected drafts write must not be ones the corrected token, one
    // position on, still reads.
    int ring_rows = 0;
    // The ring to write this step's rows into afterwards (optional; the same ring as `ring`):
    // exactly attention, then ring_write{kv, ring_out, step, W, hd, kv_format, ring_rows}. (CUDA:
    // a step of one token a row writes from inside the attention launch, since no token of the
    // step reads the ring row its own row overwrites: one launch fewer a layer.)
    float* ring_out = nullptr;
    // The queries' per-head norm (and its rope) to run first (optional; host memory): exactly
    // rms_norm(*q_norm), then attention. It norms q's rows in place (x == out == q); afterwards
    // q holds the normed rows, or still the raw ones where the backend norms them as it reads
    // them (CUDA's decode kernel: one launch fewer a layer).
    const RmsNormArgs* q_norm = nullptr;
};

// Writes each row's last min(len, W) tokens into its slot's ring (after attention has read it),
// encoded in `kv_format`.
struct RingWriteArgs {
    const float* kv = nullptr;  // [T, hd]
    float* ring = nullptr;      // [S, R, hd], slot row = pos % R (typed rows: see AttentionArgs)
    StepDesc step;
    int W = 0, hd = 0;
    CacheRowFormat kv_format{};
    int ring_rows = 0;  // R >= W (0: W), as AttentionArgs::ring_rows
};

}  // namespace dsv4::ops
