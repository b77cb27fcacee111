// Launcher of the sampling op (ops/sample.h): one block per logit row, every top_k up to V, with
// the reference's xoshiro256** draws (speculative verification included). Rows must use
// distinct slots (one generator each). Numerics: docs/numerics-cuda.md ("sample").
#pragma once

#include <cuda_runtime.h>

#include "ops/sample.h"

namespace dsv4::cuda {

// Rows keeping at most this many candidates are sorted in shared memory and walked in the
// reference's order; larger ones go through the radix-select path.
inline constexpr int kSampleMaxTopK = 1024;
void launch_sample(const ops::SampleArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
