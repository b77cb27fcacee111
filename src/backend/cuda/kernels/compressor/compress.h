// Launcher of the fused KV compressor (state update, pooling, RMSNorm and RoPE of completed
// entries), the block completion decided on the device from the step descriptor. Shapes in
// ops/compressor.h.
#pragma once

#include <cuda_runtime.h>

#include "ops/compressor.h"

namespace dsv4::cuda {

// The widest typed entry the compressor encodes (V4: head_dim 512, index_head_dim 128).
inline constexpr int kCompressMaxTypedWidth = 512;

// A programmatic launch: a one-token row completing its block reads the state rows of earlier
// tokens, the ape, norm and rope weights and the step descriptor before its wait, so the kernel
// launched just before it on the stream must not write those (the model's compressors follow
// a projection; pdl.cuh: every grid before that one is complete).
void launch_compress(const ops::CompressArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
