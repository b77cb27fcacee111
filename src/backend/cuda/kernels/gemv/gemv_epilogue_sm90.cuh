// Outputs of the sm_90 weight GEMV: a warp's FP32 sums of a row-block quad written to y (plain
// mode, unsplit quads), added into y (accumulate mode), or added into the quad's split-K
// accumulator and finished by the last warp in (plain mode, split quads).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common/ptx_sm90.cuh"
#include "backend/cuda/kernels/gemv/gemv.h"
#include "backend/cuda/kernels/gemv/gemv_layout.h"

namespace dsv4::cuda::gemv_sm90 {

// The f32 output of (group, token, row): y[group][token][row], or with row segments the
// segment's own matrix.
__device__ __forceinline__ float* y_f32_at(const GemvArgs& a, int group, int token, int row) {
    if (a.n_segments > 0) {
        int s = 0;
#pragma unroll
        for (int i = 1; i < kGemvMaxSegments; ++i)
            if (i < a.n_segments && row >= a.segments[i].first_row) s = i;
        const GemvYSegment& g = a.segments[s];
        return g.y + static_cast<int64_t>(token) * g.ldy + (row - g.first_row);
    }
    return static_cast<float*>(a.y) + static_cast<int64_t>(group) * a.y_group_stride +
           static_cast<int64_t>(token) * a.ldy + row;
}

// GemvArgs::clears: warp w of W sets its share of each buffer to zero (elements w * 32 + lane,
// then W * 32 apart: coalesced stores of any alignment, at most a few a lane at decode sizes).
__device__ __forceinline__ void clear_share(const GemvArgs& a, int64_t warp, int64_t warps,
                                            int lane) {
    for (int c = 0; c < a.n_clears && c < kGemvMaxClears; ++c) {
        float* const p = a.clears[c].p;
        for (int64_t i = warp * 32 + lane; i < a.clears[c].n; i += warps * 32) p[i] = 0.0f;
    }
}

// y_zero, before a warp's first add: clears elements [w Z / W, (w + 1) Z / W) of the Z outputs
// this launch adds into (warp w of W), then counts the warp in on zero_barrier[0].
// n_groups: the groups this launch runs (GemvArgs::n_groups_dev).
__device__ __forceinline__ void zero_y_share(const GemvArgs& a, int n_groups, int64_t warp,
                                             int64_t warps, int lane) {
    const bool one_y = a.y_group_stride == 0 || a.n_segments > 0;
    const int64_t per_group = static_cast<int64_t>(a.m) * a.n;
    const int64_t total = (one_y ? 1 : n_groups) * per_group;
    const int64_t end = (warp + 1) * total / warps;
    for (int64_t i = warp * total / warps + lane; i < end; i += 32) {
        const int group = static_cast<int>(i / per_group);
        const int64_t in_group = i - group * per_group;
        const int token = static_cast<int>(in_group / a.n);
        *y_f32_at(a, group, token, static_cast<int>(in_group - static_cast<int64_t>(token) * a.n)) =
            0.0f;
    }
    __threadfence();
    __syncwarp();
    if (lane == 0) atomicAdd(a.zero_barrier, 1u);
}

// y_zero: waits until every warp of the launch has cleared its share (lane 0 acquires the
// count; the warp barrier orders the other lanes' adds after it).
__device__ __forceinline__ void wait_y_zeroed(const GemvArgs& a, int64_t warps, int lane) {
    if (lane == 0) {
        while (ptx::ld_acquire_u32(a.zero_barrier) < static_cast<uint32_t>(warps)) {
        }
    }
    __syncwarp();
}

// y_zero, after a warp's last add: the last warp to leave resets both counters for the next
// launch (every warp has passed its wait by then).
__device__ __forceinline__ void leave_y_zero(const GemvArgs& a, int64_t warps, int lane) {
    __syncwarp();
    if (lane == 0 && atomicAdd(a.zero_barrier + 1, 1u) == static_cast<uint32_t>(warps - 1)) {
        atomicExch(a.zero_barrier, 0u);
        atomicExch(a.zero_barrier + 1, 0u);
    }
}

template <bool kYBf16, int kNT>
__device__ __forceinline__ void store_y(const GemvArgs& a, int group, int rb, int lane,
                                        const float (&v)[kNT][4], float scale) {
    const int g = lane >> 2;
    const int c = lane & 3;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int row = rb * kGemvRowBlock + g + 8 * (r >> 1);
            const int token = 8 * nt + 2 * c + (r & 1);
            if (row < a.n && token < a.m) {
                const float out = v[nt][r] * scale;
                if constexpr (kYBf16) {
                    const int64_t off =
                        static_cast<int64_t>(group) * a.y_group_stride + token * a.ldy + row;
                    static_cast<__nv_bfloat16*>(a.y)[off] = __float2bfloat16_rn(out);
                } else {
                    *y_f32_at(a, group, token, row) = out;
                }
            }
        }
    }
}

// Accumulate mode: adds this warp's sums of one row-block quad into y (scaled by the row
// blocks' output scales and the group's scale) with fire-and-forget L2 adds.
template <int kNT>
__device__ __forceinline__ void accumulate_y(const GemvArgs& a, int group, int quad, int lane,
                                             const float (&acc)[kGemvQuad][kNT][4],
                                             const float (&out_scale)[kGemvQuad]) {
    const int g = lane >> 2;
    const int c = lane & 3;
    // (The router weights, written by an earlier kernel of the step: not by __ldg, which the
    // compiler may hoist above the PDL wait.)
    const float gs =
        a.group_scale != nullptr ? __uint_as_float(ptx::ld_cg_u32(a.group_scale + group)) : 1.0f;
#pragma unroll
    for (int r = 0; r < kGemvQuad; ++r) {
        const float scale = out_scale[r] * gs;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int token = 8 * nt + 2 * c + (i & 1);
                const int row = (quad * kGemvQuad + r) * kGemvRowBlock + g + 8 * (i >> 1);
                if (token < a.m && row < a.n)
                    ptx::red_add_f32(y_f32_at(a, group, token, row), acc[r][nt][i] * scale);
            }
        }
    }
}

// A row-block quad split between warps (split-K): every warp adds its share into the quad's FP32
// accumulator with fire-and-forget `red.add`s; the last warp to arrive reads the sums, writes y
// and zeroes the accumulator and the counter for the next launch. One L2 round trip whatever the
// number of warps or tokens; the order of the adds (hence the last bits of a split quad's
// outputs) varies from run to run.
template <int kNT>
__device__ __forceinline__ void add_partial(const GemvArgs& a, float* p, int lane,
                                            const float (&acc)[kGemvQuad][kNT][4]) {
    const int g = lane >> 2;
    const int c = lane & 3;
#pragma unroll
    for (int r = 0; r < kGemvQuad; ++r) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int token = 8 * nt + 2 * c + (i & 1);
                const int row = kGemvRowBlock * r + g + 8 * (i >> 1);
                if (token < a.m)
                    ptx::red_add_f32(p + token * (kGemvQuad * kGemvRowBlock) + row, acc[r][nt][i]);
            }
        }
    }
}

template <bool kYBf16>
__device__ __forceinline__ void finish_quad(const GemvArgs& a, float* p, int group, int expert,
                                            int quad, int lane) {
    __threadfence();
    const int n_out = a.m * kGemvQuad * kGemvRowBlock;
    for (int o = lane; o < n_out; o += 32) {
        const float v = __ldcg(p + o);
        __stcg(p + o, 0.0f);
        const int token = o / (kGemvQuad * kGemvRowBlock);
        const int row_in_quad = o % (kGemvQuad * kGemvRowBlock);
        const int row = quad * kGemvQuad * kGemvRowBlock + row_in_quad;
        if (row < a.n) {
            const float scale = __ldg(a.out_scale + static_cast<int64_t>(expert) * a.row_blocks +
                                      row / kGemvRowBlock);
            if constexpr (kYBf16) {
                const int64_t off = static_cast<int64_t>(group) * a.y_group_stride +
                                    static_cast<int64_t>(token) * a.ldy + row;
                static_cast<__nv_bfloat16*>(a.y)[off] = __float2bfloat16_rn(v * scale);
            } else {
                *y_f32_at(a, group, token, row) = v * scale;
            }
        }
    }
    if (lane == 0) a.counters[group * (a.row_blocks / kGemvQuad) + quad] = 0u;
}

}  // namespace dsv4::cuda::gemv_sm90
