// The weight GEMV kernel for sm_90 (one template for all four weight formats) and its typed
// launcher. Included by the per-format instantiation files gemv_<format>_sm90.cu (and by the
// probes of bench/gemv_bench.cu, which use Decode only).
//
// Each warp streams a contiguous range of units (a row-block quad x a k-tile: four 512-byte tiles,
// gemv_layout.h) through its own ring of `kStages` shared-memory stages filled by cp.async,
// decodes each tile to bf16 A-fragments in registers and multiplies them with the activations
// by mma.m16n8k16 (tokens are the MMA's n columns, so M = 1..8 costs the same MMAs as M = 1).
// docs/kernels/gemv.md has the design and the measurements behind the choices.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/ptx_sm90.cuh"
#include "backend/cuda/kernels/gemv/gemv.h"
#include "backend/cuda/kernels/gemv/gemv_layout.h"
#include "base/check.h"

namespace dsv4::cuda::gemv_sm90 {

inline constexpr int kWarpsPerCta = 4;
inline constexpr int kThreads = kWarpsPerCta * 32;
inline constexpr int kMaxWarpsPerSm = 32;  // grid cap (SMs x 32 warps)
// FP32 accumulator of one split quad: [token < 16][64 rows] (only tokens < m are used).
inline constexpr int kPartialFloats = kGemvMaxM * kGemvQuad * kGemvRowBlock;

// One tile's worth of a lane's weight stream: 16 bytes of codes and its scale word.
struct Slot {
    uint4 w;
    uint32_t s;
};

// ---- Per-format decode of one lane's 16 bytes into the A fragments of its k-steps.
template <GemvFormat F>
struct Decode;

template <>
struct Decode<GemvFormat::kNvfp4> {
    static __device__ __forceinline__ void run(const Slot& slot, uint32_t (&a)[4][4]) {
        // Scale codes of rows g and g+8, each broadcast to both halves of a bf16x2 multiplier.
        const uint32_t sg = ptx::prmt(slot.s, 0u, 0x4040u) * 16u + (kNvfp4CodeBase * 0x10001u);
        const uint32_t sg8 = ptx::prmt(slot.s, 0u, 0x4141u) * 16u + (kNvfp4CodeBase * 0x10001u);
        apply(slot.w, sg, sg8, a);
    }
    static __device__ __forceinline__ void apply(const uint4& w, uint32_t sg, uint32_t sg8,
                                                 uint32_t (&a)[4][4]) {
        const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            uint32_t o[4];
            e2m1x8_to_bf16x2(words[j], o);
            a[j][0] = ptx::mul_bf16x2(o[0], sg);
            a[j][1] = ptx::mul_bf16x2(o[1], sg8);
            a[j][2] = ptx::mul_bf16x2(o[2], sg);
            a[j][3] = ptx::mul_bf16x2(o[3], sg8);
        }
    }
};

template <>
struct Decode<GemvFormat::kMxfp4> {
    static __device__ __forceinline__ void run(const Slot& slot, uint32_t (&a)[4][4]) {
        const uint32_t sg = ptx::prmt(slot.s, 0u, 0x4040u) << 7;
        const uint32_t sg8 = ptx::prmt(slot.s, 0u, 0x4141u) << 7;
        Decode<GemvFormat::kNvfp4>::apply(slot.w, sg, sg8, a);
    }
};

__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t v16) {
    // E4M3 -> f16 is one instruction on sm_89+; f16 -> f32 -> bf16 is exact for E4M3 values.
    const __half2_raw h =
        __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v16), __NV_E4M3);
    const float2 f = __half22float2(__half2(h));
    const __nv_bfloat162 b = __float22bfloat162_rn(f);
    return *reinterpret_cast<const uint32_t*>(&b);
}

template <>
struct Decode<GemvFormat::kFp8> {
    static __device__ __forceinline__ void run(const Slot& slot, uint32_t (&a)[2][4]) {
        const uint32_t words[4] = {slot.w.x, slot.w.y, slot.w.z, slot.w.w};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            a[j][0] = e4m3x2_to_bf16x2(words[2 * j] & 0xffffu);
            a[j][2] = e4m3x2_to_bf16x2(words[2 * j] >> 16);
            a[j][1] = e4m3x2_to_bf16x2(words[2 * j + 1] & 0xffffu);
            a[j][3] = e4m3x2_to_bf16x2(words[2 * j + 1] >> 16);
        }
    }
};

template <>
struct Decode<GemvFormat::kBf16> {
    static __device__ __forceinline__ void run(const Slot& slot, uint32_t (&a)[1][4]) {
        a[0][0] = slot.w.x;
        a[0][1] = slot.w.y;
        a[0][2] = slot.w.z;
        a[0][3] = slot.w.w;
    }
};

// ---- Activations: one lane's lane_k values of one token row for one tile.
template <GemvFormat F, bool kXF32>
struct XChunk {
    static constexpr int kLaneK = gemv_lane_k(F);
    static constexpr int kRawWords = kXF32 ? kLaneK : kLaneK / 2;  // 32-bit words loaded
    static constexpr int kFragWords = kLaneK / 2;                  // bf16x2 B-fragment words
};

// Loads one lane's activation chunk (lane_k values) from `p` when `pred` holds; otherwise the
// registers keep their (finite) values: they then multiply zero-padded weights (k past the end)
// or feed MMA columns that are never stored (tokens >= m).
template <GemvFormat F, bool kXF32>
__device__ __forceinline__ void load_x(bool pred, const char* p,
                                       uint32_t (&raw)[XChunk<F, kXF32>::kRawWords]) {
    using X = XChunk<F, kXF32>;
    if constexpr (X::kRawWords % 4 == 0) {
#pragma unroll
        for (int v = 0; v < X::kRawWords / 4; ++v) {
            uint4 q = make_uint4(raw[4 * v], raw[4 * v + 1], raw[4 * v + 2], raw[4 * v + 3]);
            ptx::ldg_v4_if(pred, p + 16 * v, q);
            raw[4 * v + 0] = q.x;
            raw[4 * v + 1] = q.y;
            raw[4 * v + 2] = q.z;
            raw[4 * v + 3] = q.w;
        }
    } else {
        static_assert(X::kRawWords == 2, "bf16 weights with bf16 activations: 8 bytes");
        uint2 q = make_uint2(raw[0], raw[1]);
        ptx::ldg_v2_if(pred, p, q);
        raw[0] = q.x;
        raw[1] = q.y;
    }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&b);
}

// B fragments from the raw chunk: bf16 passes through; f32 becomes hi = bf16(x) and
// lo = bf16(x - hi), two MMAs that together carry ~16 mantissa bits of x.
template <GemvFormat F, bool kXF32>
__device__ __forceinline__ void x_fragments(const uint32_t (&raw)[XChunk<F, kXF32>::kRawWords],
                                            uint32_t (&hi)[XChunk<F, kXF32>::kFragWords],
                                            uint32_t (&lo)[XChunk<F, kXF32>::kFragWords]) {
    using X = XChunk<F, kXF32>;
#pragma unroll
    for (int p = 0; p < X::kFragWords; ++p) {
        if constexpr (kXF32) {
            const float x0 = __uint_as_float(raw[2 * p]);
            const float x1 = __uint_as_float(raw[2 * p + 1]);
            hi[p] = pack_bf16x2(x0, x1);
            const float h0 = __uint_as_float(hi[p] << 16);
            const float h1 = __uint_as_float(hi[p] & 0xffff0000u);
            lo[p] = pack_bf16x2(x0 - h0, x1 - h1);
        } else {
            hi[p] = raw[p];
            lo[p] = 0u;
        }
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
                const int64_t off =
                    static_cast<int64_t>(group) * a.y_group_stride + token * a.ldy + row;
                const float out = v[nt][r] * scale;
                if constexpr (kYBf16) {
                    static_cast<__nv_bfloat16*>(a.y)[off] = __float2bfloat16_rn(out);
                } else {
                    static_cast<float*>(a.y)[off] = out;
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
    const float gs = a.group_scale != nullptr ? __ldg(a.group_scale + group) : 1.0f;
    float* y = static_cast<float*>(a.y) + static_cast<int64_t>(group) * a.y_group_stride;
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
                    ptx::red_add_f32(y + static_cast<int64_t>(token) * a.ldy + row,
                                     acc[r][nt][i] * scale);
            }
        }
    }
}

// The warp-to-unit split: warp w of W owns units [w * total / W, (w + 1) * total / W), W <= total.
struct Split {
    int64_t warps;
    int64_t total;
    __device__ __forceinline__ int first(int64_t w) const {
        return static_cast<int>(w * total / warps);
    }
    __device__ __forceinline__ int owner(int u) const {
        return static_cast<int>(((static_cast<int64_t>(u) + 1) * warps - 1) / total);
    }
};

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
            const int64_t off = static_cast<int64_t>(group) * a.y_group_stride +
                                static_cast<int64_t>(token) * a.ldy + row;
            if constexpr (kYBf16) {
                static_cast<__nv_bfloat16*>(a.y)[off] = __float2bfloat16_rn(v * scale);
            } else {
                static_cast<float*>(a.y)[off] = v * scale;
            }
        }
    }
    if (lane == 0) a.counters[group * (a.row_blocks / kGemvQuad) + quad] = 0u;
}

// Register budget: the common variant (bf16 activations, M <= 8) runs 16 warps per SM (up to
// 128 registers a thread); the f32 / M > 8 variants carry twice the activation registers and
// run 8.
template <bool kXF32, int kNT>
inline constexpr int kMinCtasPerSm = (kXF32 || kNT == 2) ? 2 : 4;

// One pipeline stage of a warp: a unit of work (4 tiles, 2 KB) and its scale bytes.
inline constexpr int kUnitBytes = kGemvQuad * kGemvTileBytes;
inline constexpr int kStageBytes = kUnitBytes + kGemvQuad * 64;

template <GemvFormat F, bool kXF32, int kNT, bool kYBf16, int kStages>
__global__ void __launch_bounds__(kThreads, (kMinCtasPerSm<kXF32, kNT>))
    gemv_kernel(const __grid_constant__ GemvArgs a) {
    constexpr int kSteps = gemv_ksteps(F);
    constexpr int kTileScale = gemv_tile_scale_bytes(F);
    constexpr int kUnitScale = kGemvQuad * kTileScale;  // 256 / 128 / 16 / 0 bytes
    constexpr bool kPostScale = F == GemvFormat::kFp8;
    constexpr int kXTileBytes = gemv_tile_k(F) * (kXF32 ? 4 : 2);
    using X = XChunk<F, kXF32>;
    static_assert((kStages & (kStages - 1)) == 0 && kStages >= 2, "power-of-two stage ring");
    static_assert(kWarpsPerCta * kStages * kStageBytes <= 48 * 1024, "static shared memory");
    __shared__ __align__(128) uint8_t stages[kWarpsPerCta][kStages][kStageBytes];

    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int warp_in_cta = static_cast<int>(threadIdx.x) >> 5;
    const int warp = static_cast<int>(blockIdx.x) * kWarpsPerCta + warp_in_cta;
    const int T = a.k_tiles;
    const int Q = a.row_blocks / kGemvQuad;
    const int per_group = Q * T;  // units (quad x k-tile) per group
    // At most one warp per unit, so every warp of the split has work and the warps sharing a
    // quad are consecutive (the partial-sum count below relies on it).
    const int64_t total = static_cast<int64_t>(per_group) * a.n_groups;
    const int64_t grid_warps = static_cast<int64_t>(gridDim.x) * kWarpsPerCta;
    const Split split{grid_warps < total ? grid_warps : total, total};

    if (warp >= split.warps) return;
    const int u0 = split.first(warp);
    const int u1 = split.first(warp + 1);

    auto expert_of = [&](int group) -> int {
        return a.expert_ids != nullptr ? __ldg(a.expert_ids + group) : group;
    };
    // Stage of the warp's i-th unit (i counted from u0).
    const uint32_t ring = ptx::smem_addr(&stages[warp_in_cta][0][0]);
    auto stage = [&](int i) {
        return ring + static_cast<uint32_t>(i & (kStages - 1)) * kStageBytes;
    };

    // ---- Issue side: copies the warp's units, in order, kStages - 1 ahead of the math. Within
    // a group the units (tiles and scale chunks) are contiguous: pointers jump only at a group
    // boundary.
    int l_group = u0 / per_group;
    int l_unit = u0 - l_group * per_group;  // unit index inside the group
    int l_i = 0;                            // units issued
    const uint8_t* l_tiles = nullptr;
    const uint8_t* l_scales = nullptr;
    auto l_set = [&]() {
        const int64_t e = expert_of(l_group);
        l_tiles = static_cast<const uint8_t*>(a.w_tiles) + e * a.w_tiles_expert_stride +
                  lane * kGemvLaneBytes;
        l_scales =
            static_cast<const uint8_t*>(a.w_scales) + e * a.w_scales_expert_stride + lane * 16;
    };
    // Lanes that copy the unit's scale chunk, 16 bytes each.
    [[maybe_unused]] const bool scale_lane = lane < kUnitScale / 16;
    const int n_units = u1 - u0;
    auto issue = [&]() {
        if (l_i < n_units) {
            const uint32_t dst = stage(l_i) + lane * kGemvLaneBytes;
            const uint8_t* src = l_tiles + static_cast<int64_t>(l_unit) * kUnitBytes;
#pragma unroll
            for (int r = 0; r < kGemvQuad; ++r)
                ptx::cp_async_16(dst + r * kGemvTileBytes, src + r * kGemvTileBytes);
            if constexpr (kUnitScale > 0) {
                ptx::cp_async_16_if(scale_lane, stage(l_i) + kUnitBytes + lane * 16,
                                    l_scales + static_cast<int64_t>(l_unit) * kUnitScale);
            }
            ++l_i;
            if (++l_unit == per_group && l_i < n_units) {
                ++l_group;
                l_unit = 0;
                l_set();
            }
        }
        // Always commit (an empty group past the end) so the group count stays uniform.
        ptx::cp_async_commit();
    };

    // Expert ids from the previous kernel (the router): wait for it before the first address.
    // Fixed weights and ids written earlier (ids_ready) are prefetched before the wait.
    const bool ids_from_device = a.expert_ids != nullptr && !a.ids_ready;
    if (ids_from_device) ptx::griddep_wait();
    l_set();
#pragma unroll 1
    for (int i = 0; i < kStages - 1; ++i) issue();
    if (!ids_from_device) ptx::griddep_wait();
    // Dependents may start their weight prefetch as soon as SMs free up. Not before the wait:
    // a dependent with ids_ready relies on this grid's predecessor being complete.
    ptx::griddep_launch_dependents();

    // ---- Compute side: one segment per row-block quad touched by this warp's range.
    const int g = lane >> 2;
    const int c = lane & 3;
    // Tiles whose activation chunk for this lane lies inside k.
    const int x_valid_tiles = (a.k - c * gemv_lane_k(F) + gemv_tile_k(F) - 1) / gemv_tile_k(F);
    int c_group = u0 / per_group;
    int c_quad = (u0 - c_group * per_group) / T;
    int c_t = u0 - c_group * per_group - c_quad * T;
    int c_expert = expert_of(c_group);
    int c_i = 0;  // units consumed
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
            const int token = g + 8 * nt;
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
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
            load_x<F, kXF32>(c_t < x_lim[nt], x_row[nt] + static_cast<int64_t>(c_t) * kXTileBytes,
                             x_cur[nt]);
        }

        for (int t = c_t; t < t_end; ++t) {
            // This unit's copies have landed (this lane's; after the warp sync, the scale
            // lanes' too), and every lane is done with the stage the next issue overwrites.
            ptx::cp_async_wait<kStages - 2>();
            __syncwarp();
            issue();
            uint32_t x_next[kNT][X::kRawWords];
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
                for (int v = 0; v < X::kRawWords; ++v) x_next[nt][v] = x_cur[nt][v];
                load_x<F, kXF32>(t + 1 < x_lim[nt],
                                 x_row[nt] + static_cast<int64_t>(t + 1) * kXTileBytes, x_next[nt]);
            }
            // B fragments once per unit, shared by the four tiles.
            uint32_t xh[kNT][X::kFragWords];
            uint32_t xl[kNT][X::kFragWords];
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) x_fragments<F, kXF32>(x_cur[nt], xh[nt], xl[nt]);

            const uint32_t src = stage(c_i++);
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
                        if constexpr (kXF32) {
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
        if (a.y_accumulate) {
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
                if (++c_group < a.n_groups) c_expert = expert_of(c_group);
            }
        }
    }
    // Only empty groups can be pending here; drain them before the stages go away.
    ptx::cp_async_wait<0>();
}

// ---- Typed launcher for one format: picks the instantiation and launches it.
using KernelFn = void (*)(GemvArgs);

struct Variant {
    KernelFn kernel;
    int index;  // into the per-format occupancy cache
};

// The instantiation for (args, depth = pipeline stages of one unit each). Depth 4 exists for
// tuning the NVFP4 path.
template <GemvFormat F>
Variant select_variant(const GemvArgs& a, int depth) {
    const bool two = a.m > 8;
    if constexpr (F == GemvFormat::kNvfp4) {
        if (depth == 4 && !a.x_f32 && !two && !a.y_bf16)
            return {gemv_kernel<F, false, 1, false, 4>, 8};
    }
    DSV4_ASSERT(depth == 2, "gemv: depth ", depth, " is not instantiated for this variant");
    const int index = (a.x_f32 ? 4 : 0) + (two ? 2 : 0) + (a.y_bf16 ? 1 : 0);
    switch (index) {
        case 0:
            return {gemv_kernel<F, false, 1, false, 2>, index};
        case 1:
            return {gemv_kernel<F, false, 1, true, 2>, index};
        case 2:
            return {gemv_kernel<F, false, 2, false, 2>, index};
        case 3:
            return {gemv_kernel<F, false, 2, true, 2>, index};
        case 4:
            return {gemv_kernel<F, true, 1, false, 2>, index};
        case 5:
            return {gemv_kernel<F, true, 1, true, 2>, index};
        case 6:
            return {gemv_kernel<F, true, 2, false, 2>, index};
        default:
            return {gemv_kernel<F, true, 2, true, 2>, index};
    }
}

template <GemvFormat F>
int format_ctas_per_sm(const GemvArgs& a, int depth) {
    // Occupancy per instantiation, queried once (host-side only, capture-safe).
    static std::atomic<int> cache[9] = {};
    const Variant v = select_variant<F>(a, depth);
    int n = cache[v.index].load(std::memory_order_relaxed);
    if (n == 0) {
        DSV4_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, v.kernel, kThreads, 0));
        DSV4_ASSERT(n > 0, "gemv: kernel does not fit on an SM");
        cache[v.index].store(n, std::memory_order_relaxed);
    }
    return n;
}

template <GemvFormat F>
void format_launch(const GemvArgs& a, int depth, int ctas, cudaStream_t stream) {
    const Variant v = select_variant<F>(a, depth);
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(ctas));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = a.pdl ? 1 : 0;
    DSV4_CHECK_CUDA(cudaLaunchKernelEx(&cfg, v.kernel, a));
    DSV4_CHECK_LAUNCH(stream);
}

}  // namespace dsv4::cuda::gemv_sm90
