#include "backend/cuda/gemv_op.h"

#include "backend/cuda/common/check.cuh"
#include "base/check.h"

namespace dsv4::cuda {

GemvWeight upload_gemv_weight(const GemvPacked& packed, DeviceArena& arena) {
    GemvWeight w;
    w.shape = packed.shape;
    void* tiles = arena.alloc(packed.tiles.size());
    DSV4_CHECK_CUDA(
        cudaMemcpy(tiles, packed.tiles.data(), packed.tiles.size(), cudaMemcpyHostToDevice));
    w.tiles = tiles;
    if (!packed.scales.empty()) {
        void* scales = arena.alloc(packed.scales.size());
        DSV4_CHECK_CUDA(
            cudaMemcpy(scales, packed.scales.data(), packed.scales.size(), cudaMemcpyHostToDevice));
        w.scales = scales;
    }
    float* os = arena.alloc_array<float>(packed.out_scale.size());
    DSV4_CHECK_CUDA(cudaMemcpy(os, packed.out_scale.data(), packed.out_scale.size() * sizeof(float),
                               cudaMemcpyHostToDevice));
    w.out_scale = os;
    return w;
}

Expected<GemvWeight> upload_gemv_weight(const QuantWeight* const* parts, int n_experts,
                                        int parts_per_expert, DeviceArena& arena) {
    DSV4_ASSIGN_OR_RETURN(GemvPacked packed, gemv_repack(parts, n_experts, parts_per_expert));
    return upload_gemv_weight(packed, arena);
}

GemvWorkspace GemvWorkspace::create(DeviceArena& arena, int64_t max_row_blocks_total, int sm_count,
                                    cudaStream_t stream) {
    GemvWorkspace ws;
    const size_t n = bytes(max_row_blocks_total);
    ws.base = arena.alloc(n);
    ws.max_row_blocks_total = max_row_blocks_total;
    ws.sm_count = sm_count;
    DSV4_CHECK_CUDA(cudaMemsetAsync(ws.base, 0, n, stream));
    return ws;
}

GemvArgs gemv_args(const GemvWeight& w, const TensorView& x, const TensorView& y, int n_groups,
                   const GemvWorkspace& ws, const GemvOptions& options) {
    const GemvShape& s = w.shape;
    DSV4_ASSERT(x.dtype == DType::kBF16 || x.dtype == DType::kF32, "gemv: x dtype ",
                dtype_name(x.dtype));
    DSV4_ASSERT(y.dtype == DType::kBF16 || y.dtype == DType::kF32, "gemv: y dtype ",
                dtype_name(y.dtype));
    DSV4_ASSERT(x.is_contiguous() && y.is_contiguous(), "gemv: x and y must be contiguous");
    DSV4_ASSERT(n_groups >= 1 && (options.expert_ids != nullptr || n_groups <= s.n_experts),
                "gemv: ", n_groups, " groups over ", s.n_experts, " experts");
    const bool shared_x = x.shape.ndim == 2;
    DSV4_ASSERT(shared_x || (x.shape.ndim == 3 && x.shape[0] == n_groups), "gemv: x shape ",
                x.shape.str(), " for ", n_groups, " groups");
    const int64_t m = x.shape[x.shape.ndim - 2];
    DSV4_ASSERT(x.shape[x.shape.ndim - 1] == s.k, "gemv: x shape ", x.shape.str(), " vs k ", s.k);
    DSV4_ASSERT(!options.sum_groups || options.accumulate, "gemv: sum_groups needs accumulate");
    const Shape y_want = (n_groups == 1 && y.shape.ndim == 2) || options.sum_groups
                             ? Shape{m, s.n}
                             : Shape{n_groups, m, s.n};
    DSV4_ASSERT(y.shape == y_want, "gemv: y shape ", y.shape.str(), ", expected ", y_want.str());
    DSV4_ASSERT(n_groups * s.row_blocks() <= ws.max_row_blocks_total, "gemv: workspace sized for ",
                ws.max_row_blocks_total, " row blocks");

    GemvArgs a;
    a.format = s.format;
    a.w_tiles = w.tiles;
    a.w_scales = w.scales;
    a.out_scale = w.out_scale;
    a.w_tiles_expert_stride = s.tiles_expert_bytes();
    a.w_scales_expert_stride = s.scales_expert_bytes();
    a.n = static_cast<int32_t>(s.n);
    a.k = static_cast<int32_t>(s.k);
    a.row_blocks = static_cast<int32_t>(s.row_blocks());
    a.k_tiles = static_cast<int32_t>(s.k_tiles());
    a.n_groups = n_groups;
    a.expert_ids = options.expert_ids;
    a.x = x.data;
    a.x_f32 = x.dtype == DType::kF32;
    a.m = static_cast<int32_t>(m);
    a.ldx = s.k;
    a.x_group_stride = shared_x ? 0 : m * s.k;
    a.y = y.data;
    a.y_bf16 = y.dtype == DType::kBF16;
    a.ldy = s.n;
    a.y_group_stride = options.sum_groups ? 0 : m * s.n;
    a.y_accumulate = options.accumulate;
    a.group_scale = options.group_scale;
    a.y_zero = options.zero;
    a.n_groups_dev = options.n_groups_dev;
    a.pdl = options.pdl;
    a.ids_ready = options.ids_ready;
    gemv_workspace_bind(ws.base, ws.max_row_blocks_total, &a);
    return a;
}

void gemv(const GemvWeight& w, const TensorView& x, const TensorView& y, int n_groups,
          const GemvWorkspace& ws, const GemvOptions& options, cudaStream_t stream) {
    const GemvArgs a = gemv_args(w, x, y, n_groups, ws, options);
    GemvLaunchConfig cfg = options.launch;
    if (cfg.sm_count == 0) cfg.sm_count = ws.sm_count;
    DSV4_ASSERT(cfg.sm_count == ws.sm_count, "gemv: workspace sized for ", ws.sm_count, " SMs");
    launch_gemv(a, cfg, stream);
}

}  // namespace dsv4::cuda
