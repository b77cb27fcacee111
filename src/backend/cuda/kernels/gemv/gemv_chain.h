// Two dependent GEMVs of a decode step in one launch: the second reads the first's output as
// its activations. Each warp streams its range of the first's units and then its range of the
// second's through one copy ring, so the second's weights are in flight while the first's last
// units are multiplied, and no kernel boundary sits between them (docs/kernels/gemv.md, "GEMV
// chains"). Two links:
//   kRows    the second's x is the first's y as written (wo_a then wo_b: the grouped output
//            projection's groups side by side in one row);
//   kSwiglu  the second's x is the clipped SwiGLU of the first's [gate | up] rows, computed as
//            it is loaded (a one-token MoE's w1|w3 then w2, the routed experts and a stacked
//            shared expert as groups).
//
// The second GEMV's warps wait, before their first unit needing them, until the first's units
// that produce their activations are all added in: the warps count their finished units in
// `ready` (per 64-row quad of the first's output for kRows, per group for kSwiglu) after a
// fence, and the waiting warp acquires the counts. Every warp finishes its range of the first
// GEMV before it waits, and the grid never holds more CTAs than fit on the GPU at once, so the
// waits always end.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels/gemv/gemv.h"

namespace dsv4::cuda {

enum class GemvChainLink : uint8_t { kRows, kSwiglu };

struct GemvChainArgs {
    // Both: m tokens (1..4), f32 x as two MMA columns (x_split), accumulating into f32 outputs
    // cleared before the launch (no y_zero), no row segments, no device group count.
    // kRows: first's groups write adjacent column blocks of a token's row (y_group_stride = n,
    // n a multiple of 64); second: one group, x = first.y, ldx = first.ldy, k = first.n_groups
    // * first.n.
    // kSwiglu: m = 1; first: n = 2 I ([gate | up] rows), y_group_stride = n; second: k = I,
    // x = first.y with x_group_stride = first.n, the same groups and expert ids; NVFP4 or MXFP4.
    GemvArgs first;
    GemvArgs second;
    GemvChainLink link = GemvChainLink::kRows;
    float limit = 0.0f;  // kSwiglu: the clip L (0: none)
    // Workspace of gemv_chain_workspace_bytes(gemv_chain_counts(args)) or more: zeroed once,
    // every launch leaves it zero.
    uint32_t* ready = nullptr;
};

// The counts a launch of these arguments uses (its workspace holds these and one more).
int64_t gemv_chain_counts(const GemvChainArgs& args);
size_t gemv_chain_workspace_bytes(int64_t max_counts);

// Whether one launch takes these two GEMVs (the layout above). False: run them apart.
bool gemv_chain_supports(const GemvChainArgs& args);

// Checks the arguments (abort on programmer error) and launches. No allocation, no host sync:
// safe inside a stream capture. config: sm_count (required), ctas_per_sm (0: as many as fit),
// min_tiles_per_warp (units a warp at least; 0: 2), depth (copy ring stages: 0 or 2, or 4).
void launch_gemv_chain(const GemvChainArgs& args, const GemvLaunchConfig& config,
                       cudaStream_t stream);

}  // namespace dsv4::cuda
