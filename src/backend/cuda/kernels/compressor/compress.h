// Launcher of the fused KV compressor (state update, pooling, RMSNorm and RoPE of completed
// entries), the block completion decided on the device from the step descriptor. Shapes in
// ops/compressor.h.
#pragma once

#include <cuda_runtime.h>

#include "ops/compressor.h"

namespace dsv4::cuda {

void launch_compress(const ops::CompressArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
