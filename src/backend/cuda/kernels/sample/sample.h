// Launcher of the sampling op (ops/sample.h): one block per logit row. Greedy rows and
// top-k rows with 1 < top_k <= kSampleMaxTopK run on the device with the reference's
// xoshiro256** draw; temperature sampling over more candidates (top_k 0 or larger) is not
// implemented yet: such a row traps the kernel (a device-side abort naming the limit), never a
// silently different draw. Rows must use distinct slots (one generator each).
#pragma once

#include <cuda_runtime.h>

#include "ops/sample.h"

namespace dsv4::cuda {

inline constexpr int kSampleMaxTopK = 1024;
void launch_sample(const ops::SampleArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
