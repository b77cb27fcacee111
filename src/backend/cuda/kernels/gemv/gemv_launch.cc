// Argument checks, grid sizing and format dispatch for launch_gemv (gemv.h).
#include <algorithm>

#include "backend/cuda/kernels/gemv/gemv.h"
#include "backend/cuda/kernels/gemv/gemv_sm90.h"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

constexpr int kWarpsPerCta = 4;       // gemv_sm90::kWarpsPerCta
constexpr int kMaxWarpsPerSm = 32;    // gemv_sm90::kMaxWarpsPerSm
constexpr int kQuadFloats = 16 * 64;  // gemv_sm90::kPartialFloats: [16 tokens][64 rows]
constexpr int kDefaultMinUnits = 2;   // units (2 KB) per warp
constexpr int kDefaultDepth = 2;

size_t accum_bytes(int64_t max_row_blocks_total) {
    const int64_t quads = (max_row_blocks_total + kGemvQuad - 1) / kGemvQuad;
    return (static_cast<size_t>(quads) * kQuadFloats * sizeof(float) + 255) / 256 * 256;
}

int ctas_per_sm(const GemvArgs& a, int depth) {
    switch (a.format) {
        case GemvFormat::kNvfp4:
            return gemv_sm90::format_ctas_per_sm<GemvFormat::kNvfp4>(a, depth);
        case GemvFormat::kMxfp4:
            return gemv_sm90::format_ctas_per_sm<GemvFormat::kMxfp4>(a, depth);
        case GemvFormat::kFp8:
            return gemv_sm90::format_ctas_per_sm<GemvFormat::kFp8>(a, depth);
        case GemvFormat::kBf16:
            return gemv_sm90::format_ctas_per_sm<GemvFormat::kBf16>(a, depth);
    }
    DSV4_UNREACHABLE("gemv format ", static_cast<int>(a.format));
}

int64_t grid_ctas(const GemvArgs& a, const GemvLaunchConfig& c) {
    const int depth = c.depth > 0 ? c.depth : kDefaultDepth;
    int per_sm = ctas_per_sm(a, depth);
    if (c.ctas_per_sm > 0) per_sm = std::min(per_sm, c.ctas_per_sm);
    per_sm = std::max(1, std::min(per_sm, kMaxWarpsPerSm / kWarpsPerCta));
    const int64_t max_warps = static_cast<int64_t>(c.sm_count) * per_sm * kWarpsPerCta;
    const int64_t units = static_cast<int64_t>(a.n_groups) * (a.row_blocks / kGemvQuad) * a.k_tiles;
    const int64_t min_units = c.min_tiles_per_warp > 0 ? c.min_tiles_per_warp : kDefaultMinUnits;
    const int64_t warps =
        std::max<int64_t>(1, std::min(max_warps, (units + min_units - 1) / min_units));
    return (warps + kWarpsPerCta - 1) / kWarpsPerCta;
}

}  // namespace

void gemv_check_args(const GemvArgs& a, const GemvLaunchConfig& c) {
    const int tile_k = gemv_tile_k(a.format);
    const int lane_k = gemv_lane_k(a.format);
    DSV4_ASSERT(c.sm_count > 0, "gemv: GemvLaunchConfig.sm_count is required");
    DSV4_ASSERT(a.w_tiles != nullptr && a.out_scale != nullptr, "gemv: weights not set");
    DSV4_ASSERT(a.format == GemvFormat::kBf16 || a.w_scales != nullptr, "gemv: scales not set");
    DSV4_ASSERT(a.m >= 1 && a.m <= kGemvMaxM, "gemv: m = ", a.m, " (supported 1..", kGemvMaxM, ")");
    DSV4_ASSERT(a.n_groups >= 1, "gemv: n_groups = ", a.n_groups);
    DSV4_ASSERT(a.row_blocks >= kGemvQuad && a.row_blocks % kGemvQuad == 0 && a.n >= 1 &&
                    a.n <= a.row_blocks * kGemvRowBlock,
                "gemv: n = ", a.n, " with ", a.row_blocks, " row blocks (a multiple of 4)");
    DSV4_ASSERT(a.k_tiles >= 1 && a.k >= 1 && a.k <= static_cast<int64_t>(a.k_tiles) * tile_k &&
                    a.k % lane_k == 0,
                "gemv: k = ", a.k, " with ", a.k_tiles, " tiles of ", tile_k);
    const int64_t esize = a.x_f32 ? 4 : 2;
    const int64_t x_align = (a.format == GemvFormat::kBf16 && !a.x_f32) ? 8 : 16;
    DSV4_ASSERT(a.x != nullptr && reinterpret_cast<uintptr_t>(a.x) % x_align == 0,
                "gemv: x must be ", x_align, "-byte aligned");
    DSV4_ASSERT((a.ldx * esize) % x_align == 0 && (a.x_group_stride * esize) % x_align == 0,
                "gemv: x strides (", a.ldx, ", ", a.x_group_stride, " elements) break ", x_align,
                "-byte alignment");
    DSV4_ASSERT(a.ldx >= a.k || a.m == 1, "gemv: ldx ", a.ldx, " < k ", a.k);
    if (a.n_segments > 0) {
        DSV4_ASSERT(a.n_segments <= kGemvMaxSegments && a.n_groups == 1 && !a.y_bf16 &&
                        a.segments[0].first_row == 0,
                    "gemv: ", a.n_segments, " row segments over ", a.n_groups, " groups");
        for (int i = 0; i < a.n_segments; ++i) {
            const GemvYSegment& g = a.segments[i];
            const int64_t end = i + 1 < a.n_segments ? a.segments[i + 1].first_row : a.n;
            DSV4_ASSERT(g.y != nullptr && g.first_row % kGemvRowBlock == 0 && end > g.first_row &&
                            (g.ldy >= end - g.first_row || a.m == 1),
                        "gemv: row segment ", i, " [", g.first_row, ", ", end, ") ldy ", g.ldy);
        }
    } else {
        DSV4_ASSERT(a.y != nullptr && (a.ldy >= a.n || a.m == 1), "gemv: y / ldy");
    }
    DSV4_ASSERT(a.y_accumulate || (a.partials != nullptr && a.counters != nullptr),
                "gemv: workspace not bound");
    DSV4_ASSERT(!a.y_accumulate || !a.y_bf16, "gemv: accumulation needs an f32 y");
    DSV4_ASSERT(!a.y_zero || (a.y_accumulate && a.zero_barrier != nullptr),
                "gemv: y_zero needs accumulate mode and the workspace");
    DSV4_ASSERT(a.group_scale == nullptr || a.y_accumulate, "gemv: group_scale needs y_accumulate");
    DSV4_ASSERT(a.n_clears >= 0 && a.n_clears <= kGemvMaxClears, "gemv: ", a.n_clears, " clears");
    for (int i = 0; i < a.n_clears; ++i)
        DSV4_ASSERT(a.clears[i].p != nullptr && a.clears[i].n >= 0, "gemv: clear ", i);
}

size_t gemv_workspace_bytes(int64_t max_row_blocks_total) {
    return accum_bytes(max_row_blocks_total) +
           static_cast<size_t>(max_row_blocks_total + 2) * sizeof(uint32_t);
}

void gemv_workspace_bind(void* base, int64_t max_row_blocks_total, GemvArgs* args) {
    DSV4_ASSERT(reinterpret_cast<uintptr_t>(base) % 256 == 0, "gemv workspace alignment");
    args->partials = static_cast<float*>(base);
    args->counters = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(base) +
                                                 accum_bytes(max_row_blocks_total));
    args->zero_barrier = args->counters + max_row_blocks_total;
}

int64_t gemv_grid_warps(const GemvArgs& args, const GemvLaunchConfig& config) {
    return grid_ctas(args, config) * kWarpsPerCta;
}

void launch_gemv(const GemvArgs& a, const GemvLaunchConfig& c, cudaStream_t stream) {
    gemv_check_args(a, c);
    const int depth = c.depth > 0 ? c.depth : kDefaultDepth;
    const int ctas = static_cast<int>(grid_ctas(a, c));
    switch (a.format) {
        case GemvFormat::kNvfp4:
            return gemv_sm90::format_launch<GemvFormat::kNvfp4>(a, depth, ctas, stream);
        case GemvFormat::kMxfp4:
            return gemv_sm90::format_launch<GemvFormat::kMxfp4>(a, depth, ctas, stream);
        case GemvFormat::kFp8:
            return gemv_sm90::format_launch<GemvFormat::kFp8>(a, depth, ctas, stream);
        case GemvFormat::kBf16:
            return gemv_sm90::format_launch<GemvFormat::kBf16>(a, depth, ctas, stream);
    }
    DSV4_UNREACHABLE("gemv format ", static_cast<int>(a.format));
}

}  // namespace dsv4::cuda
