// Two expert GEMVs of a one-token MoE in one launch: w1|w3 (y = h, each group's [gate | up]
// row), then w2 reading the clipped SwiGLU of h as its activations, computed as it loads them.
// Each warp streams its range of w1|w3's units and then its range of w2's through one copy
// ring, so w2's weights are in flight while w1|w3's last units are multiplied, and no SwiGLU
// launch or second GEMV launch sits between them (docs/kernels/gemv.md, "The SwiGLU chain").
//
// A warp's w2 units of group g wait until every w1|w3 unit of g has been added into h: the
// warps count their finished units per group in `ready` (release), the waiting warp acquires
// the count. Every warp finishes its w1|w3 range before it waits, and the grid never holds
// more CTAs than fit on the GPU at once, so the waits always end.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels/gemv/gemv.h"

namespace dsv4::cuda {

struct GemvSwigluChainArgs {
    // w1|w3: n = 2 I rows per group (gate rows first), m = 1, f32 x, accumulating into an h
    // cleared before the launch (no y_zero), y_group_stride = 2 I.
    GemvArgs w13;
    // w2: k = I, x = w13.y with x_group_stride = 2 I (its activations are computed from it),
    // m = 1, accumulating (no y_zero); the same groups and expert ids as w13.
    GemvArgs w2;
    float limit = 0.0f;  // the SwiGLU's clip L (0: none)
    // Workspace from gemv_swiglu_chain_workspace_bytes: zeroed once, every launch leaves it zero.
    uint32_t* ready = nullptr;  // [n_groups] units of w1|w3 done per group, then [1] warps done
};

// The largest group count a workspace of these bytes serves.
size_t gemv_swiglu_chain_workspace_bytes(int max_groups);

// Whether the chain takes these two GEMVs (formats with 64-wide k-tiles: NVFP4 and MXFP4; one
// token; the layout above). False: run them as two launches and a SwiGLU kernel.
bool gemv_swiglu_chain_supports(const GemvArgs& w13, const GemvArgs& w2);

// Checks the arguments (abort on programmer error) and launches. No allocation, no host sync:
// safe inside a stream capture. config: sm_count (required), ctas_per_sm (0: as many as fit),
// min_tiles_per_warp (units a warp at least; 0: 2), depth (copy ring stages: 0 or 2, or 4).
void launch_gemv_swiglu_chain(const GemvSwigluChainArgs& args, const GemvLaunchConfig& config,
                              cudaStream_t stream);

}  // namespace dsv4::cuda
