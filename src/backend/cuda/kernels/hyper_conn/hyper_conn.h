// Launchers of the mHC kernels: hc_pre (RMS + mixing + sigmoid gates + Sinkhorn + collapse, one
// block per token), hc_post (post ⊗ F + Cᵀ X), hc_head. Shapes in ops/hyper_conn.h.
#pragma once

#include <cuda_runtime.h>

#include "ops/hyper_conn.h"

namespace dsv4::cuda {

void launch_hc_pre(const ops::HcPreArgs& a, cudaStream_t stream);
void launch_hc_post(const ops::HcPostArgs& a, cudaStream_t stream);
void launch_hc_head(const ops::HcHeadArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
