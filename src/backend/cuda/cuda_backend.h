// The CUDA backend: the engine-v2 op table (ops/backend.h) on one H200 (sm_90a), device memory
// from cudaMalloc, everything ordered on one non-blocking stream. Weights: dense F32/BF16
// tensors are kept on the device in their stored format (embedding, dense linears, the router
// gate); FP8/FP4 weights and the routed experts are not wired yet (upload_weight /
// upload_experts return an error naming the format), so `moe` is absent: calling it aborts.
// docs/numerics-cuda.md states each op's tolerance against the CPU reference.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "base/status.h"
#include "ops/backend.h"

namespace dsv4 {

// An error (not an abort) when there is no usable Hopper GPU.
Expected<std::unique_ptr<Backend>> make_cuda_backend(int device = 0);

// The stream every op of `b` (a CUDA backend) is enqueued on: for capturing a step into a CUDA
// graph. Aborts when `b` is another backend.
cudaStream_t cuda_backend_stream(Backend& b);

}  // namespace dsv4
