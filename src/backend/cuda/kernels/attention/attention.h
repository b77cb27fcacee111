// Launchers of sink attention over the window ring + compressed entries (one launch for every
// decode row and prefill chunk of a step) and of the ring write. Shapes in ops/attention.h.
#pragma once

#include <cuda_runtime.h>

#include "ops/attention.h"

namespace dsv4::cuda {

// Limits of the kernel: head_dim <= 512 (V4: 512); heads are processed 64 per block.
inline constexpr int kAttnMaxHeadDim = 512;
void launch_attention(const ops::AttentionArgs& a, cudaStream_t stream);
void launch_ring_write(const ops::RingWriteArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
