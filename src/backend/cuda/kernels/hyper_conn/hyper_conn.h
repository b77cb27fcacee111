// Launchers of the mHC kernels: hc_pre (RMS + mixing + sigmoid gates + Sinkhorn + collapse) and
// hc_head, each one launch: the mixing product split over many blocks, the last block of a token
// finishing it; hc_post
// (post ⊗ F + Cᵀ X). Shapes in ops/hyper_conn.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/hyper_conn.h"

namespace dsv4::cuda {

// The most residual streams the mHC kernels take (V4: 4).
inline constexpr int kHcMaxStreams = 8;

// Device scratch for the mixing product's per-split partial sums and the per-token arrival
// counters of the blocks (zeroed once at allocation; every launch leaves them zero).
struct HcScratch {
    double* part = nullptr;        // hc_scratch_doubles(...) doubles
    unsigned* arrivals = nullptr;  // [max_tokens], zero
    int64_t doubles = 0;
    int64_t max_tokens = 0;
    int sm_count = 1;  // the grid is sized for it
};

// Doubles the scratch needs for steps of up to max_tokens tokens with n streams.
int64_t hc_scratch_doubles(int64_t max_tokens, int n, int sm_count);

// clusters: decode launches (up to 32 tokens of V4's 4 streams) take the kernel of one thread-block
// cluster a token (hyper_conn_sm90.cu); false: always the split kernel (measurements).
void launch_hc_pre(const ops::HcPreArgs& a, const HcScratch& ws, cudaStream_t stream,
                   bool clusters = true);
void launch_hc_post(const ops::HcPostArgs& a, cudaStream_t stream);

// launch_hc_pre's decode path (hc_pre_cluster_sm90.cu): whether `a` can take it, and the launch.
bool hc_pre_cluster_fits(const ops::HcPreArgs& a);
void launch_hc_pre_cluster(const ops::HcPreArgs& a, cudaStream_t stream);
void launch_hc_head(const ops::HcHeadArgs& a, const HcScratch& ws, cudaStream_t stream);

}  // namespace dsv4::cuda
