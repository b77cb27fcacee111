// The weight GEMV kernel for sm_90: one template for all four weight formats (operands in
// gemv_operands_sm90.cuh, outputs in gemv_epilogue_sm90.cuh, the launcher that picks an
// instantiation in gemv_dispatch_sm90.cuh).
//
// Each warp streams a contiguous range of units (a row-block quad x a k-tile: four 512-byte tiles,
// gemv_layout.h) through its own ring of `kStages` shared-memory stages filled by cp.async,
// decodes each tile to bf16 A-fragments in registers and multiplies them with the activations
// by mma.m16n8k16 (tokens are the MMA's n columns, so M = 1..8 costs the same MMAs as M = 1).
// docs/kernels/gemv.md has the design and the measurements behind the choices.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common/ptx_sm90.cuh"
#include "backend/cuda/kernels/gemv/gemv.h"
#include "backend/cuda/kernels/gemv/gemv_epilogue_sm90.cuh"
#include "backend/cuda/kernels/gemv/gemv_layout.h"
#include "backend/cuda/kernels/gemv/gemv_operands_sm90.cuh"
#include "backend/cuda/kernels/gemv/gemv_split.h"

namespace dsv4::cuda::gemv_sm90 {

inline constexpr int kWarpsPerCta = 4;
inline constexpr int kThreads = kWarpsPerCta * 32;
inline constexpr int kMaxWarpsPerSm = 32;  // grid cap (SMs x 32 warps)
// FP32 accumulator of one split quad: [token < 16][64 rows] (only tokens < m are used).
inline constexpr int kPartialFloats = kGemvMaxM * kGemvQuad * kGemvRowBlock;

// The warp-to-unit split (gemv_split.h).
using Split = GemvSplit;

// Register budget: the common variant (bf16 activations, M <= 8) and the split-column f32
// variant of M <= 4 run 16 warps per SM (up to 128 registers a thread); the other f32 / M > 8
// variants carry twice the activation registers and run 8 (at least).
template <bool kXF32, int kNT>
inline constexpr int kMinCtasPerSm = (kXF32 || kNT == 2) ? 2 : 4;

// One pipeline stage of a warp: a unit of work (4 tiles, 2 KB) and its scale bytes.
inline constexpr int kUnitBytes = kGemvQuad * kGemvTileBytes;
inline constexpr int kStageBytes = kUnitBytes + kGemvQuad * 64;

// The split-column mode (GemvArgs::x_split, f32 x, kSplit): lane (g, c)'s accumulators hold, for
// rows g and g + 8, token 4 nt + c's hi-part sums (columns 2c) and lo-part sums (columns 2c + 1).
// Joined here into the epilogues' layout (acc[r][nt][i] = rows g, g + 8 x token 8 nt + 2c + i;
// the tokens are < 8, so n-tile 1 ends up unused): token t = 2c + i sits in lane (g, t % 4) of
// split n-tile t / 4.
template <int kNT>
__device__ __forceinline__ void join_split_columns(float (&acc)[kGemvQuad][kNT][4], int lane) {
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int r = 0; r < kGemvQuad; ++r) {
        float top[kNT], bot[kNT];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
            top[nt] = acc[r][nt][0] + acc[r][nt][1];
            bot[nt] = acc[r][nt][2] + acc[r][nt][3];
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int t = 2 * c + i;
            const int src = (g << 2) | (t & 3);
            float tv = __shfl_sync(0xffffffffu, top[0], src);
            float bv = __shfl_sync(0xffffffffu, bot[0], src);
            if constexpr (kNT == 2) {
                const float t1 = __shfl_sync(0xffffffffu, top[1], src);
                const float b1 = __shfl_sync(0xffffffffu, bot[1], src);
                if (t >= 4) {
                    tv = t1;
                    bv = b1;
                }
            }
            acc[r][0][i] = tv;
            acc[r][0][2 + i] = bv;
        }
#pragma unroll
        for (int nt = 1; nt < kNT; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[r][nt][i] = 0.0f;
        }
    }
}

// The expert of `group` (identity without ids). The ids are written by the router, a kernel
// before this one: read after the launch's wait, never by __ldg.
__device__ __forceinline__ int expert_of(const GemvArgs& a, int group) {
    return a.expert_ids != nullptr ? static_cast<int>(ptx::ld_cg_u32(a.expert_ids + group)) : group;
}

// The issue side of a warp: copies the warp's units, in order, into its ring of kStages
// shared-memory stages, kStages - 1 ahead of the math. Within a group the units (tiles and scale
// chunks) are contiguous: pointers jump only at a group boundary. kTwoRanges: after the first
// launch's range, the warp's range of a second one (the chains of gemv_chain_sm90.cu),
// so the second's weights stream in while the first's last units are multiplied.
template <GemvFormat F, int kStages, bool kTwoRanges = false>
struct UnitStream {
    static constexpr int kUnitScale = kGemvQuad * gemv_tile_scale_bytes(F);

    const GemvArgs* a;
    uint32_t ring;  // shared address of the warp's stage 0
    int lane;
    int per_group;  // units a group
    int group;      // of the next unit
    int unit;       // inside its group
    int issued = 0;
    int end;  // units of the ranges started so far
    const uint8_t* tiles = nullptr;
    const uint8_t* scales = nullptr;
    const GemvArgs* second = nullptr;  // kTwoRanges: not started yet
    int second_u0 = 0;
    int second_n = 0;

    __device__ __forceinline__ UnitStream(const GemvArgs& first, uint32_t ring_, int lane_, int u0,
                                          int u1)
        : a(&first), ring(ring_), lane(lane_), end(u1 - u0) {
        start(u0);
    }
    __device__ __forceinline__ void start(int u0) {
        per_group = (a->row_blocks / kGemvQuad) * a->k_tiles;
        group = u0 / per_group;
        unit = u0 - group * per_group;
    }
    // Stage of the warp's i-th unit (counted over both ranges).
    __device__ __forceinline__ uint32_t stage(int i) const {
        return ring + static_cast<uint32_t>(i & (kStages - 1)) * kStageBytes;
    }
    // The current group's weights (its expert's ids read here).
    __device__ __forceinline__ void set() {
        const int64_t e = expert_of(*a, group);
        tiles = static_cast<const uint8_t*>(a->w_tiles) + e * a->w_tiles_expert_stride +
                lane * kGemvLaneBytes;
        scales =
            static_cast<const uint8_t*>(a->w_scales) + e * a->w_scales_expert_stride + lane * 16;
    }
    __device__ __forceinline__ void issue() {
        if (issued < end) {
            const uint32_t dst = stage(issued) + lane * kGemvLaneBytes;
            const uint8_t* src = tiles + static_cast<int64_t>(unit) * kUnitBytes;
#pragma unroll
            for (int r = 0; r < kGemvQuad; ++r)
                ptx::cp_async_16(dst + r * kGemvTileBytes, src + r * kGemvTileBytes);
            if constexpr (kUnitScale > 0) {
                // Lanes that copy the unit's scale chunk, 16 bytes each.
                ptx::cp_async_16_if(lane < kUnitScale / 16, stage(issued) + kUnitBytes + lane * 16,
                                    scales + static_cast<int64_t>(unit) * kUnitScale);
            }
            ++issued;
            if (++unit == per_group && issued < end) {
                ++group;
                unit = 0;
                set();
            }
            if constexpr (kTwoRanges) {
                if (issued == end && second != nullptr) switch_range();
            }
        }
        // Always commit (an empty group past the end) so the group count stays uniform.
        ptx::cp_async_commit();
    }
    // kTwoRanges: the second range, units [u0, u0 + n) of `next`, issued after the first's.
    __device__ __forceinline__ void then(const GemvArgs& next, int u0, int n) {
        static_assert(kTwoRanges, "a stream of one range");
        second = &next;
        second_u0 = u0;
        second_n = n;
        if (issued == end) switch_range();
    }
    __device__ __forceinline__ void switch_range() {
        a = second;
        second = nullptr;
        end += second_n;
        start(second_u0);
        if (second_n > 0) set();
    }
};

// Where the compute side's activation chunks come from: straight from x in global memory (an
// earlier kernel's output). A chain's second GEMV has its own (gemv_chain_sm90.cu).
struct XFromGlobal {
    // Before a warp's segment (a run of k-tiles [t0, t_end) of one quad of `group`).
    __device__ __forceinline__ void segment(int /*group*/, int /*t0*/, int /*t_end*/) {}
    // Before the chunk of tile t is loaded (every lane, uniformly).
    __device__ __forceinline__ void before(int /*t*/) {}
    template <GemvFormat F, bool kXF32>
    __device__ __forceinline__ void load(bool pred, const char* p, int /*t*/,
                                         uint32_t (&raw)[XChunk<F, kXF32>::kRawWords]) {
        load_x<F, kXF32>(pred, p, raw);
    }
};

// The compute side of a warp's range of units [u0, u1) of `a`: one segment per row-block quad
// touched, each unit's stage consumed in order (`c_i`, counted over the stream's ranges) while
// `s` issues the units kStages - 1 ahead, and each quad's sums written, added or finished.
// u0 < u1.
template <GemvFormat F, bool kXF32, int kNT, bool kYBf16, int kStages, bool kSplit, class Stream,
          class XSource>
__device__ __forceinline__ void compute_units(const GemvArgs& a, XSource& xs, Stream& s, int u0,
                                              int u1, int n_groups, const Split& split, int lane,
                                              bool& y_cleared, int& c_i) {
    constexpr int kSteps = gemv_ksteps(F);
    constexpr int kTileScale = gemv_tile_scale_bytes(F);
    constexpr bool kPostScale = F == GemvFormat::kFp8;
    constexpr int kXTileBytes = gemv_tile_k(F) * (kXF32 ? 4 : 2);
    using X = XChunk<F, kXF32>;
    const int T = a.k_tiles;
    const int Q = a.row_blocks / kGemvQuad;
    const int per_group = Q * T;
    const int g = lane >> 2;
    const int c = lane & 3;
    // Tiles whose activation chunk for this lane lies inside k.
    const int x_valid_tiles = (a.k - c * gemv_lane_k(F) + gemv_tile_k(F) - 1) / gemv_tile_k(F);
    int c_group = u0 / per_group;
    int c_quad = (u0 - c_group * per_group) / T;
    int c_t = u0 - c_group * per_group - c_quad * T;
    int c_expert = expert_of(a, c_group);
    uint32_t x_cur[kNT][X::kRawWords] = {};
    for (int u = u0; u < u1;) {
        const int seg = min(T - c_t, u1 - u);
        const int t_end = c_t + seg;
        float out_scale[kGemvQuad];
#pragma unroll
        for (int r = 0; r < kGemvQuad; ++r)
            out_scale[r] = __ldg(a.out_scale + static_cast<int64_t>(c_expert) * a.row_blocks +
                                 c_quad * kGemvQuad + r);
        // Per n-tile: this lane's activation row (k offset included) and the tiles it loads.
        const char* x_row[kNT];
        int x_lim[kNT];
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
            // (Split columns: column g is token g / 2's hi or lo part, 4 tokens an n-tile.)
            const int token = kSplit ? (g >> 1) + 4 * nt : g + 8 * nt;
            x_row[nt] =
                static_cast<const char*>(a.x) +
                (static_cast<int64_t>(c_group) * a.x_group_stride +
                 static_cast<int64_t>(token < a.m ? token : 0) * a.ldx + c * gemv_lane_k(F)) *
                    (kXF32 ? 4 : 2);
            x_lim[nt] = token < a.m ? min(t_end, x_valid_tiles) : 0;
        }
        float acc[kGemvQuad][kNT][4];
#pragma unroll
        for (int r = 0; r < kGemvQuad; ++r) {
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[r][nt][i] = 0.0f;
            }
        }
        xs.segment(c_group, c_t, t_end);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
            xs.template load<F, kXF32>(c_t < x_lim[nt],
                                       x_row[nt] + static_cast<int64_t>(c_t) * kXTileBytes, c_t,
                                       x_cur[nt]);
        }

        for (int t = c_t; t < t_end; ++t) {
            // This unit's copies have landed (this lane's; after the warp sync, the scale
            // lanes' too), and every lane is done with the stage the next issue overwrites.
            ptx::cp_async_wait<kStages - 2>();
            __syncwarp();
            s.issue();
            xs.before(t + 1);
            uint32_t x_next[kNT][X::kRawWords];
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
                for (int v = 0; v < X::kRawWords; ++v) x_next[nt][v] = x_cur[nt][v];
                xs.template load<F, kXF32>(t + 1 < x_lim[nt],
                                           x_row[nt] + static_cast<int64_t>(t + 1) * kXTileBytes,
                                           t + 1, x_next[nt]);
            }
            // B fragments once per unit, shared by the four tiles.
            uint32_t xh[kNT][X::kFragWords];
            uint32_t xl[kNT][X::kFragWords];
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
                if constexpr (kSplit)
                    x_fragments_split<F>(x_cur[nt], (g & 1) != 0, xh[nt]);
                else
                    x_fragments<F, kXF32>(x_cur[nt], xh[nt], xl[nt]);
            }

            const uint32_t src = s.stage(c_i++);
#pragma unroll
            for (int r = 0; r < kGemvQuad; ++r) {
                Slot cur;
                asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                             : "=r"(cur.w.x), "=r"(cur.w.y), "=r"(cur.w.z), "=r"(cur.w.w)
                             : "r"(src + r * kGemvTileBytes + lane * kGemvLaneBytes));
                if constexpr (F == GemvFormat::kNvfp4 || F == GemvFormat::kMxfp4) {
                    unsigned short s16;
                    asm volatile(
                        "ld.shared.u16 %0, [%1];"
                        : "=h"(s16)
                        : "r"(src + kUnitBytes + r * kTileScale + gemv_lane_scale_offset(F, lane)));
                    cur.s = s16;
                } else if constexpr (F == GemvFormat::kFp8) {
                    asm volatile("ld.shared.u32 %0, [%1];"
                                 : "=r"(cur.s)
                                 : "r"(src + kUnitBytes + r * kTileScale));
                } else {
                    cur.s = 0u;
                }
                uint32_t wa[kSteps][4];
                Decode<F>::run(cur, wa);
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt) {
                    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    float(&d)[4] = kPostScale ? part : acc[r][nt];
#pragma unroll
                    for (int j = 0; j < kSteps; ++j) {
                        ptx::mma_bf16_16816(d, wa[j], xh[nt][2 * j], xh[nt][2 * j + 1]);
                        if constexpr (kXF32 && !kSplit) {
                            ptx::mma_bf16_16816(d, wa[j], xl[nt][2 * j], xl[nt][2 * j + 1]);
                        }
                    }
                    if constexpr (kPostScale) {
                        const float sc = __uint_as_float(cur.s);
#pragma unroll
                        for (int i = 0; i < 4; ++i)
                            acc[r][nt][i] = fmaf(sc, part[i], acc[r][nt][i]);
                    }
                }
            }
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
                for (int v = 0; v < X::kRawWords; ++v) x_cur[nt][v] = x_next[nt][v];
            }
        }

        // ---- Quad done (for this warp).
        if constexpr (kSplit) join_split_columns<kNT>(acc, lane);
        if (a.y_accumulate) {
            if (!y_cleared) {
                wait_y_zeroed(a, split.warps, lane);
                y_cleared = true;
            }
            accumulate_y<kNT>(a, c_group, c_quad, lane, acc, out_scale);
        } else if (c_t == 0 && seg == T) {
#pragma unroll
            for (int r = 0; r < kGemvQuad; ++r)
                store_y<kYBf16, kNT>(a, c_group, c_quad * kGemvQuad + r, lane, acc[r],
                                     out_scale[r]);
        } else {
            // Split quad: add this warp's share; the last warp in writes the outputs.
            const int q = c_group * Q + c_quad;
            float* p = a.partials + static_cast<int64_t>(q) * kPartialFloats;
            add_partial<kNT>(a, p, lane, acc);
            __threadfence();
            __syncwarp();
            uint32_t arrived = 0;
            if (lane == 0) arrived = atomicAdd(a.counters + q, 1u);
            arrived = __shfl_sync(0xffffffffu, arrived, 0);
            const int q_u0 = q * T;
            if (static_cast<int>(arrived) == split.owner(q_u0 + T - 1) - split.owner(q_u0)) {
                finish_quad<kYBf16>(a, p, c_group, c_expert, c_quad, lane);
            }
        }
        u += seg;
        c_t = t_end;
        if (c_t == T) {
            c_t = 0;
            if (++c_quad == Q) {
                c_quad = 0;
                if (++c_group < n_groups) c_expert = expert_of(a, c_group);
            }
        }
    }
}

// The warp's share of the work: units [first(w), first(w + 1)) of the (group, quad, k-tile)
// space. At most one warp per unit, so every warp of the split has work and the warps sharing a
// quad are consecutive (the split-K count of compute_units relies on it).
__device__ __forceinline__ Split split_units(const GemvArgs& a, int n_groups) {
    const int64_t total = static_cast<int64_t>((a.row_blocks / kGemvQuad) * a.k_tiles) * n_groups;
    const int64_t grid_warps = static_cast<int64_t>(gridDim.x) * kWarpsPerCta;
    return Split{grid_warps < total ? grid_warps : total, total};
}

template <GemvFormat F, bool kXF32, int kNT, bool kYBf16, int kStages, bool kSplit = false>
__global__ void __launch_bounds__(kThreads, (kMinCtasPerSm<kXF32 && !kSplit, kNT>))
    gemv_kernel(const __grid_constant__ GemvArgs a) {
    static_assert(!kSplit || kXF32, "split columns are an f32-activation mode");
    static_assert((kStages & (kStages - 1)) == 0 && kStages >= 2, "power-of-two stage ring");
    static_assert(kWarpsPerCta * kStages * kStageBytes <= 48 * 1024, "static shared memory");
    __shared__ __align__(128) uint8_t stages[kWarpsPerCta][kStages][kStageBytes];

    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int warp_in_cta = static_cast<int>(threadIdx.x) >> 5;
    const int warp = static_cast<int>(blockIdx.x) * kWarpsPerCta + warp_in_cta;
    // A group count from the device (the previous kernel's): waited for before the split.
    int n_groups = a.n_groups;
    if (a.n_groups_dev != nullptr) {
        ptx::griddep_wait();
        n_groups = static_cast<int>(ptx::ld_cg_u32(a.n_groups_dev));
    }
    const Split split = split_units(a, n_groups);
    if (warp >= split.warps) return;
    const int u0 = split.first(warp);
    const int u1 = split.first(warp + 1);
    UnitStream<F, kStages> s(a, ptx::smem_addr(&stages[warp_in_cta][0][0]), lane, u0, u1);

    // Expert ids from the previous kernel (the router): wait for it before the first address.
    // Fixed weights and ids written earlier (ids_ready) are prefetched before the wait.
    const bool ids_from_device = a.expert_ids != nullptr && !a.ids_ready;
    if (ids_from_device) ptx::griddep_wait();
    s.set();
#pragma unroll 1
    for (int i = 0; i < kStages - 1; ++i) s.issue();
    if (!ids_from_device) ptx::griddep_wait();
    // Dependents may start their weight prefetch as soon as SMs free up. Not before the wait:
    // a dependent with ids_ready relies on this grid's predecessor being complete.
    ptx::griddep_launch_dependents();
    // Buffers of later launches (after the wait: the kernels before may still read them).
    if (a.n_clears > 0) clear_share(a, warp, split.warps, lane);
    // y_zero: clear this warp's share of y now (after the wait: y may be the previous kernels'
    // scratch); the warp checks that all shares are cleared before its first add.
    bool y_cleared = !a.y_zero;
    if (a.y_zero) zero_y_share(a, n_groups, warp, split.warps, lane);

    XFromGlobal xs;
    int c_i = 0;  // units consumed
    compute_units<F, kXF32, kNT, kYBf16, kStages, kSplit>(a, xs, s, u0, u1, n_groups, split, lane,
                                                          y_cleared, c_i);
    // Only empty groups can be pending here; drain them before the stages go away.
    ptx::cp_async_wait<0>();
    if (a.y_zero) leave_y_zero(a, split.warps, lane);
}

}  // namespace dsv4::cuda::gemv_sm90
