// Backend glue for the weight GEMV: device-resident weights (uploaded once, repacked, kept
// packed), the per-stream workspace, and the op that checks TensorViews and launches.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common/device_arena.h"
#include "backend/cuda/kernels/gemv/gemv.h"
#include "backend/cuda/kernels/gemv/gemv_repack.h"
#include "base/status.h"
#include "base/tensor_view.h"

namespace dsv4::cuda {

// A weight (or a stack of experts) on the device in the GEMV tile layout.
struct GemvWeight {
    GemvShape shape;
    const void* tiles = nullptr;
    const void* scales = nullptr;
    const float* out_scale = nullptr;
};

// Copies a repacked weight into `arena` (shape.device_bytes() bytes). Load time only: the copy
// is synchronous.
GemvWeight upload_gemv_weight(const GemvPacked& packed, DeviceArena& arena);

// Repack + upload in one step (parts as in gemv_repack).
Expected<GemvWeight> upload_gemv_weight(const QuantWeight* const* parts, int n_experts,
                                        int parts_per_expert, DeviceArena& arena);

// Scratch for split row-block quads. Sized for the largest n_groups * row_blocks it will serve;
// zeroed once here and left zero by every launch.
struct GemvWorkspace {
    void* base = nullptr;
    int64_t max_row_blocks_total = 0;
    int sm_count = 0;

    static size_t bytes(int64_t max_row_blocks_total) {
        return gemv_workspace_bytes(max_row_blocks_total);
    }
    static GemvWorkspace create(DeviceArena& arena, int64_t max_row_blocks_total, int sm_count,
                                cudaStream_t stream);
};

struct GemvOptions {
    const int32_t* expert_ids = nullptr;  // [n_groups] device; nullptr: groups are experts 0..
    bool pdl = false;
    bool ids_ready = false;  // GemvArgs::ids_ready
    // y += instead of y = (f32 y; GemvArgs::y_accumulate). sum_groups: every group adds into
    // one y [m, n], scaled by group_scale[g] ([n_groups] device) when given.
    bool accumulate = false;
    bool sum_groups = false;
    const float* group_scale = nullptr;
    bool zero = false;  // with accumulate: the launch clears y first (GemvArgs::y_zero)
    const int32_t* n_groups_dev = nullptr;  // [1] device: the groups to run (GemvArgs)
    GemvLaunchConfig launch;                // sm_count is taken from the workspace when 0
};

// y[g] = x[g] * W[expert(g)]^T for g < n_groups (or y[g] +=, or y += sum_g s_g x[g] W^T).
//   x: [m, k] (one input shared by every group) or [n_groups, m, k]; bf16 or f32; rows contiguous.
//   y: [m, n] when n_groups == 1 or sum_groups, else [n_groups, m, n]; f32 or bf16 (f32 when
//      accumulating).
void gemv(const GemvWeight& w, const TensorView& x, const TensorView& y, int n_groups,
          const GemvWorkspace& ws, const GemvOptions& options, cudaStream_t stream);

// gemv's checked launch arguments, not launched (options.launch is not part of them).
GemvArgs gemv_args(const GemvWeight& w, const TensorView& x, const TensorView& y, int n_groups,
                   const GemvWorkspace& ws, const GemvOptions& options);

}  // namespace dsv4::cuda
