// Instantiations of the sm_90 GEMV kernels for mxfp4 weights (one file per format so the
// variants compile in parallel).
#include "backend/cuda/kernels/gemv/gemv_dispatch_sm90.cuh"
#include "backend/cuda/kernels/gemv/gemv_sm90.h"

namespace dsv4::cuda::gemv_sm90 {

template int format_ctas_per_sm<GemvFormat::kMxfp4>(const GemvArgs&, int);
template void format_launch<GemvFormat::kMxfp4>(const GemvArgs&, int, int, cudaStream_t);

}  // namespace dsv4::cuda::gemv_sm90
