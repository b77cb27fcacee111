// Launcher of the fused KV compressor (state update, pooling, RMSNorm and RoPE of completed
// entries), the block completion decided on the device from the step descriptor. Shapes in
// ops/compressor.h.
#pragma once

#include <cuda_runtime.h>

#include "ops/compressor.h"

namespace dsv4::cuda {

// The widest typed entry the compressor encodes (V4: head_dim 512, index_head_dim 128).
inline constexpr int kCompressMaxTypedWidth = 512;

void launch_compress(const ops::CompressArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
