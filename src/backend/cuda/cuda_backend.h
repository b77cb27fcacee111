// The CUDA backend: the engine-v2 op table (ops/backend.h) on one H200 (sm_90a), device memory
// from cudaMalloc, everything ordered on one non-blocking stream. Weights: FP8, MXFP4, NVFP4 and
// BF16 linears and routed experts are repacked once into the weight GEMV's tile layout and stay
// packed (f32 activations split into bf16 hi + lo: f32-accurate products); dense F32 weights
// (transformers-saved checkpoints) stay f32 for a plain f32 kernel; the embedding table stays
// dense. Linears take up to 16 tokens a GEMV launch; longer steps (prefill) run on tensor cores
// (gemm_op.h: the weight decoded to bf16, cuBLAS) where that reproduces the weight exactly, else
// in GEMV slices; the MoE groups prefill rows by expert. The reference numerics' rounding points
// run here too (FP8 activation copies in a buffer sized by prepare_steps, round trips).
// docs/numerics-cuda.md states each op's tolerance against the CPU reference.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <utility>

#include "backend/cuda/kernels/gemv/gemv_repack.h"
#include "base/status.h"
#include "ops/backend.h"

namespace dsv4 {

// An error (not an abort) when there is no usable Hopper GPU.
Expected<std::unique_ptr<Backend>> make_cuda_backend(int device = 0);

// How many CUDA devices this process sees (0 without a usable one).
int cuda_device_count();

// The stream every op of `b` (a CUDA backend) is enqueued on: for capturing a step into a CUDA
// graph. Aborts when `b` is another backend.
cudaStream_t cuda_backend_stream(Backend& b);

// Tests: the GEMV-layout weights of an expert stack of `b` (w1|w3, then w2) copied back to the
// host in gemv_repack's form, to check weights made on the device (synth_experts) against the
// host model of the kernel (gemv_unpack_row). An error for dense experts.
Expected<std::pair<cuda::GemvPacked, cuda::GemvPacked>> cuda_download_experts(
    Backend& b, const ops::ExpertWeights& w);

// Tests: how many linears (or parts of a packed group) have run on the tensor-core path
// (gemm_op.h) so far. Aborts when `b` is another backend.
int64_t cuda_gemm_runs(const Backend& b);

// Tests and comparisons: how many attention launches took the split kernel (decode steps,
// attention_split_sm90.cu) so far, and whether steps may take it (on by default; off: every
// step takes the cluster kernel, as DSV4_CUDA_ATTN_SPLIT=0). Abort when `b` is another backend.
int64_t cuda_attention_split_runs(const Backend& b);
void cuda_set_attention_split(Backend& b, bool on);
// Tests and comparisons: whether the split kernel's blocks merge as a thread-block cluster (on by
// default; off: through global memory, as DSV4_CUDA_ATTN_MERGE_CLUSTER=0).
void cuda_set_attention_merge_cluster(Backend& b, bool on);

// Tests and comparisons: whether decode batches of at least E / 3 expert pairs run their pairs
// in groups by expert (on by default; off: one row a pair, as DSV4_CUDA_MOE_COMPACT=0). Aborts
// when `b` is another backend.
void cuda_set_moe_compact(Backend& b, bool on);

// Tests and comparisons: whether a one-token MoE runs w1|w3, the SwiGLU and w2 as one launch,
// and whether a linear pair (LinearArgs::then) runs as one launch (gemv_chain.h; both off by
// default, as DSV4_CUDA_MOE_CHAIN=0 and DSV4_CUDA_LINEAR_CHAIN=0), and how many MoE ops and
// pairs have run that way so far. Abort when `b` is another backend.
void cuda_set_moe_chain(Backend& b, bool on);
int64_t cuda_moe_chain_runs(const Backend& b);
void cuda_set_linear_chain(Backend& b, bool on);
int64_t cuda_linear_chain_runs(const Backend& b);

// Tests and comparisons: whether decode hc_pre launches (up to 32 tokens, 4 streams) take the
// kernel of one thread-block cluster a token (on by default; off: the split kernel, as
// DSV4_CUDA_HC_CLUSTER=0). Aborts when `b` is another backend.
void cuda_set_hc_cluster(Backend& b, bool on);

}  // namespace dsv4
