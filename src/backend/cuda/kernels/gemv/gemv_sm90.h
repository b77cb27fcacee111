// Per-format entry points of the sm_90 GEMV kernels, defined in gemv_dispatch_sm90.cuh and
// instantiated once per format in gemv_<format>_sm90.cu (parallel compilation).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/kernels/gemv/gemv.h"

namespace dsv4::cuda::gemv_sm90 {

// CTAs of the variant selected by (args, depth) that fit on one SM.
template <GemvFormat F>
int format_ctas_per_sm(const GemvArgs& args, int depth);

template <GemvFormat F>
void format_launch(const GemvArgs& args, int depth, int ctas, cudaStream_t stream);

}  // namespace dsv4::cuda::gemv_sm90
