// Launchers of sink attention over the window ring + compressed entries (one launch for every
// decode row and prefill chunk of a step) and of the ring write. Shapes in ops/attention.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/attention.h"

namespace dsv4::cuda {

// Limits of the kernel: head_dim <= 512 (V4: 512); heads are processed 64 per block.
inline constexpr int kAttnMaxHeadDim = 512;
// Steps of at most this many tokens take the split kernel (attention_split_sm90.cu) when the
// scratch is there and the rows are float4-aligned.
inline constexpr int kAttnSplitMaxTokens = 8;

// Device scratch of the split kernel: each block's partial (m, l, out) per head and an arrival
// counter per (token, head group) (zero; every launch leaves them zero), read only when the
// blocks merge through global memory (merge_in_cluster false). Without it (part == nullptr)
// every step takes the cluster kernel.
struct AttentionScratch {
    float* part = nullptr;         // [max_blocks][8 heads][512 + 2]
    unsigned* arrivals = nullptr;  // [max_blocks], zero
    int max_blocks = 0;
    int sm_count = 1;  // the split grid is at most two blocks an SM
    // How the split kernel's blocks of a (token, head group) merge: as a thread-block cluster
    // through distributed shared memory, or (false) through `part` and the arrival counters.
    bool merge_in_cluster = true;
    // AttentionArgs::q_norm: done by the split kernel as it stages the queries where it can
    // (attn::split_norms_queries); false: always a norm launch first (for comparisons).
    bool norm_in_kernel = true;
    // Either kernel: a step's own K=V rows encoded, when the cache rows are typed
    // (AttentionArgs::kv_format; f32 rows need none).
    uint8_t* rows = nullptr;
    int64_t rows_bytes = 0;
};
// Bytes of the scratch for a GPU of sm_count SMs, and the scratch carved from p (that many
// zeroed bytes).
int64_t attention_scratch_bytes(int sm_count);
AttentionScratch attention_scratch(void* p, int sm_count);

// True when the step took the split kernel. a.q_norm runs first, in a launch of its own unless
// the split kernel takes it (AttentionScratch::norm_in_kernel). a.ring_out's write
// (ops/attention.h) is done by the split kernel itself when ring_in_kernel and every row of the
// step is one token (T == B: rows have at least one token), else by a ring_write launch after the
// attention.
bool launch_attention(const ops::AttentionArgs& a, const AttentionScratch& ws, cudaStream_t stream,
                      bool ring_in_kernel = true);
void launch_ring_write(const ops::RingWriteArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
