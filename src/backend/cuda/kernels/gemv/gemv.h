// Launcher tier of the weight GEMV family: y = x * W^T for M = 1..16 tokens against weights in
// the repacked layout of gemv_layout.h (NVFP4, MXFP4, FP8 128x128 blocks, BF16), FP32 sums,
// BF16 or F32 activations, F32 or BF16 outputs, one launch for a group of matrices (the selected
// experts; wo_a's groups). Raw device pointers and a stream only; no model or framework types.
//
// Work split: the (group, row-block quad, k-tile) space is cut into equal contiguous ranges, one
// per warp of a persistent grid (stream-K). The warps sharing a quad add their sums into an FP32
// accumulator (`partials`) and the last one writes y: a quad split between warps can differ in
// the last bits from run to run (the order of the adds); an unsplit quad is bitwise stable.
// Accumulate mode (y_accumulate) skips that finish: every warp adds its sums straight into an
// f32 y, which is what a decode step should use (docs/perf.md: 1.1-1.4x faster at M = 1).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels/gemv/gemv_layout.h"

namespace dsv4::cuda {

inline constexpr int kGemvMaxM = 16;
inline constexpr int kGemvMaxSegments = 8;
inline constexpr int kGemvMaxClears = 5;

// Where rows [first_row, next segment's first_row) of y go: a matrix of its own, row r of the
// weight being column r - first_row of y_seg (GemvArgs::segments).
struct GemvYSegment {
    int32_t first_row = 0;  // a multiple of 16 (a row block never spans two segments)
    float* y = nullptr;     // [m][ldy] f32
    int64_t ldy = 0;
};

// A buffer the launch sets to zero (GemvArgs::clears).
struct GemvClear {
    float* p = nullptr;  // [n] f32, any alignment
    int64_t n = 0;
};

struct GemvArgs {
    GemvFormat format = GemvFormat::kNvfp4;

    // Weights (gemv_layout.h). Per expert: `row_blocks` x `k_tiles` tiles.
    const void* w_tiles = nullptr;       // [n_experts][row_blocks * k_tiles][32 lanes][16 B]
                                         // (gemv_tile_index order)
    const void* w_scales = nullptr;      // [n_experts][row_blocks * k_tiles][tile scale bytes]
                                         // (NVFP4 64, MXFP4 32, FP8 4 = f32); BF16: nullptr
    const float* out_scale = nullptr;    // [n_experts][row_blocks]
    int64_t w_tiles_expert_stride = 0;   // bytes between experts in w_tiles
    int64_t w_scales_expert_stride = 0;  // bytes between experts in w_scales
    int32_t n = 0;                       // output rows per group (<= 16 * row_blocks)
    int32_t k = 0;                       // reduction length (<= k_tiles * tile_k)
    int32_t row_blocks = 0;              // a multiple of 4 (n padded to 64 rows)
    int32_t k_tiles = 0;

    // Groups: group g multiplies its activations by expert expert_ids[g] (identity when null).
    int32_t n_groups = 1;
    const int32_t* expert_ids = nullptr;  // [n_groups] device, may be nullptr

    // Activations, 16-byte aligned rows.
    const void* x = nullptr;  // [n_groups][m][k] (x_group_stride may be 0: one shared input)
    bool x_f32 = false;       // false: bf16; true: f32 (split into bf16 hi + lo, f32-accurate)
    // f32 x at m <= 8: a token's hi and lo parts are two columns of the same MMA (tokens 4 to
    // an n-tile), so a k-step costs the MMAs of bf16 x; false: hi and lo as two MMAs into the
    // same columns (kept for measurements, DSV4_CUDA_GEMV_SPLIT_X=0).
    bool x_split = true;
    int32_t m = 1;               // tokens, 1..16
    int64_t ldx = 0;             // elements between token rows
    int64_t x_group_stride = 0;  // elements between groups

    // Output.
    void* y = nullptr;           // [n_groups][m][n]
    bool y_bf16 = false;         // false: f32
    int64_t ldy = 0;             // elements between token rows
    int64_t y_group_stride = 0;  // elements between groups
    // Accumulate: y += x * W^T in FP32 by fire-and-forget L2 adds, for every quad, split or not:
    // no split-K workspace, counters or fences (y must hold what to add to, usually zeros
    // cleared by y's consumer). With y_group_stride 0 every group adds into the same y, each
    // scaled by group_scale[g] when given (the MoE combine with the router weights).
    bool y_accumulate = false;
    const float* group_scale = nullptr;  // [n_groups] device, accumulate only; may be nullptr
    // Accumulate into zeros without a memset ahead of the launch (a graph node of its own, which
    // also breaks the programmatic edge that lets the weights stream in early): after its wait
    // for the previous kernel every warp clears its share of the y this launch adds into
    // (n_groups x m x n, or m x n when y_group_stride is 0 or with row segments), and no warp
    // adds before all have cleared (a counter pair in the workspace). The grid never holds more
    // CTAs than fit on the GPU at once (grid_ctas), so every warp gets to clear. Measured 1.6%
    // slower than the memset nodes at batch-1 decode (docs/perf.md, session 11): the engine
    // uses it only under DSV4_CUDA_GEMV_ZERO.
    bool y_zero = false;

    // Workspace from gemv_workspace_bytes(); counters zeroed once, the kernel leaves them zero.
    float* partials = nullptr;         // [n_groups * row_blocks / 4][16 tokens][64 rows], zero
    uint32_t* counters = nullptr;      // [n_groups * row_blocks / 4], zero
    uint32_t* zero_barrier = nullptr;  // [2] (y_zero: cleared, left), zero

    // Row segments (n_segments > 0, one group, an f32 y): the weight's rows are the
    // concatenation of several matrices of the same x (the projections packed at load), each
    // written to its own y; `y`, `ldy` and `y_group_stride` are then unused. Ascending first rows,
    // the first 0.
    int32_t n_segments = 0;
    GemvYSegment segments[kGemvMaxSegments];

    // The groups to run when they are known on the device only ([1], <= n_groups, written by an
    // earlier kernel in the stream and read after the launch's wait; nullptr: n_groups): the
    // work is split over those groups' units, and y_zero clears those groups' outputs.
    const int32_t* n_groups_dev = nullptr;

    // Buffers set to zero by the launch after its wait, each warp of the grid a share: the
    // outputs of later launches that add into them (a memset node of their own would be one
    // more dependent launch and would cut the programmatic edge of the GEMV behind it). None may
    // overlap x, y, the segments' outputs or another; the launch never reads them.
    int32_t n_clears = 0;
    GemvClear clears[kGemvMaxClears];

    // Programmatic dependent launch: start streaming weights while the previous kernel in the
    // stream finishes (weights only; activations, ids and outputs wait for it).
    bool pdl = false;
    // The expert ids were written before the previous kernel in the stream passed its own wait
    // (w2 after w1|w3, which waited for the router), so the weights they select may be
    // requested before this launch waits. False: ids are read only after the wait.
    bool ids_ready = false;
};

// Grid shape. Zeros pick the defaults (occupancy-limited persistent grid).
struct GemvLaunchConfig {
    int sm_count = 0;            // required
    int ctas_per_sm = 0;         // 0: as many as fit
    int min_tiles_per_warp = 0;  // units (4 tiles) per warp; 0: default (2)
    int depth = 0;               // pipeline stages of one unit (0: default 2; 4 for tuning NVFP4)
};

// Workspace for launches of up to `max_row_blocks_total` (= n_groups * row_blocks). Zeroed once;
// every launch leaves it zero. One workspace per stream: overlapping launches must not share one.
size_t gemv_workspace_bytes(int64_t max_row_blocks_total);
// Carves the workspace pointers out of `base` (gemv_workspace_bytes long, 256-byte aligned).
void gemv_workspace_bind(void* base, int64_t max_row_blocks_total, GemvArgs* args);

// Aborts (file:line) on arguments no launch can take: a programmer error.
void gemv_check_args(const GemvArgs& args, const GemvLaunchConfig& config);

// Checks the arguments (abort on programmer error) and launches. No allocation, no host sync:
// safe inside a stream capture.
void launch_gemv(const GemvArgs& args, const GemvLaunchConfig& config, cudaStream_t stream);

// Warps the launch will use (what the partials workspace must hold).
int64_t gemv_grid_warps(const GemvArgs& args, const GemvLaunchConfig& config);

}  // namespace dsv4::cuda
