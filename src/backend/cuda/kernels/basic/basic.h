// Launchers of the small op kernels: embedding lookup (dense tables), RMSNorm, RoPE, SwiGLU,
// row gather, scale, fill, and the dense-weight linear. Raw device pointers (inside the ops::
// Args) and a stream; no allocation, no host synchronisation (capturable).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/hyper_conn.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/sample.h"

namespace dsv4::cuda {

// out[t, i, :] = table[ids[t], :] for i < n. table: [V, D] f32 (bf16 == false) or bf16.
void launch_embed_dense(const int32_t* ids, const void* table, bool bf16, int64_t D, float* out,
                        int64_t T, int n, cudaStream_t stream);
// A programmatic launch whose vectorised kernel reads the weights and the fused rope's positions
// and frequencies before its wait (the kernel before it must not write those).
void launch_rms_norm(const ops::RmsNormArgs& a, cudaStream_t stream);
void launch_rope(const ops::RopeArgs& a, cudaStream_t stream);
// How an op with a fused rope (RmsNormArgs::rope, AttentionArgs::out_rope; `r` host memory,
// may be null) applies it to its `rows` output rows of `dim` floats: in its kernel
// (dev::rope_float4) when the kernel writes whole float4s (`vec`) and the rope dims start on
// one, else by the rope kernel after it (`after`). `what` names the op in the shape check.
struct RopeFusion {
    ops::FusedRope in_kernel;  // inv_freq null: none
    ops::FusedRope after;      // inv_freq null: none
    // The rope kernel on out when `after` has one (its rotated dims rounded to bf16 with
    // round_bf16: RopeArgs::round_bf16).
    void launch_after(float* out, int64_t rows, int dim, cudaStream_t stream,
                      bool round_bf16 = false) const;
};
RopeFusion fuse_rope(const ops::FusedRope* r, int64_t rows, int dim, bool vec, const char* what);
void launch_swiglu(const ops::SwigluArgs& a, cudaStream_t stream);
void launch_gather_rows(const ops::GatherRowsArgs& a, cudaStream_t stream);
void launch_count_experts(const ops::CountExpertsArgs& a, cudaStream_t stream);
void launch_add_to_streams(const ops::AddToStreamsArgs& a, cudaStream_t stream);
void launch_scale(float* x, float s, int64_t n, cudaStream_t stream);
void launch_fill(float* x, float v, int64_t n, cudaStream_t stream);
// Pure streaming read of `bytes` (a multiple of 16) at p, 4 independent 16-byte loads in
// flight per thread (the read-bandwidth roofline); sink is written only in the ~never case
// that keeps the loads alive.
void launch_read_sum(const void* p, int64_t bytes, uint32_t* sink, int ctas, cudaStream_t stream);
// Bytes/s of launch_read_sum over `bytes` at p: the median of 10 event-timed launches after 3
// warm-ups (waits for the stream).
double measure_read_bandwidth(const void* p, int64_t bytes, uint32_t* sink, int ctas,
                              cudaStream_t stream);
// Synthetic weights: n bytes of synth_bits(seed, ...) (span 0), or each lo + byte % span.
void launch_synth_bytes(void* dst, int64_t n, uint64_t seed, uint32_t lo, uint32_t span,
                        cudaStream_t stream);

// y[m, n] = x[m / x_div, :] . w[row0 + n, :] for a dense weight w [rows, K] (f32 or bf16), x and
// y f32 or bf16 with row strides ldx / ldy (elements). FP32 accumulation. With w_ids, row m
// reads the stacked matrix w_ids[m] (the routed experts of dense checkpoints).
struct DenseLinearArgs {
    const void* x = nullptr;  // [M / x_div, K], rows ldx apart
    bool x_bf16 = false;
    const void* w = nullptr;  // [rows, K], or [E][rows, K] with w_ids
    bool w_bf16 = false;
    void* y = nullptr;  // [M, N], rows ldy apart
    bool y_bf16 = false;
    int64_t M = 0, N = 0, K = 0, row0 = 0, ldx = 0, ldy = 0;
    const int32_t* w_ids = nullptr;  // [M] device, or nullptr (one matrix)
    int64_t w_stride = 0;            // elements between stacked matrices
    int x_div = 1;                   // output rows per x row
};
void launch_dense_linear(const DenseLinearArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
