// Operands of the sm_90 weight GEMV: the per-format decode of a lane's 16 weight bytes into
// bf16 MMA A-fragments, and the activation chunks that become its B-fragments (gemv_layout.h
// has the tile layout; docs/kernels/gemv.md the decode). Also used by the probes of
// bench/gemv_bench.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common/ptx_sm90.cuh"
#include "backend/cuda/kernels/gemv/gemv_layout.h"

namespace dsv4::cuda::gemv_sm90 {

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
// or feed MMA columns that are never stored (tokens >= m). kThroughL2: x written by other warps
// of the same launch (a GEMV chain's second GEMV), loaded through L2 rather than the read-only
// path.
template <GemvFormat F, bool kXF32, bool kThroughL2 = false>
__device__ __forceinline__ void load_x(bool pred, const char* p,
                                       uint32_t (&raw)[XChunk<F, kXF32>::kRawWords]) {
    using X = XChunk<F, kXF32>;
    if constexpr (X::kRawWords % 4 == 0) {
#pragma unroll
        for (int v = 0; v < X::kRawWords / 4; ++v) {
            uint4 q = make_uint4(raw[4 * v], raw[4 * v + 1], raw[4 * v + 2], raw[4 * v + 3]);
            if constexpr (kThroughL2)
                ptx::ldcg_v4_if(pred, p + 16 * v, q);
            else
                ptx::ldg_v4_if(pred, p + 16 * v, q);
            raw[4 * v + 0] = q.x;
            raw[4 * v + 1] = q.y;
            raw[4 * v + 2] = q.z;
            raw[4 * v + 3] = q.w;
        }
    } else {
        static_assert(X::kRawWords == 2 && !kThroughL2,
                      "bf16 weights with bf16 activations: 8 bytes");
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

// B fragments of the split-column mode (GemvArgs::x_split): MMA column n = lane / 4 holds token
// n / 2's hi part (n even) or lo part (n odd), so this lane's fragment is the one part of its
// f32 chunk.
template <GemvFormat F>
__device__ __forceinline__ void x_fragments_split(const uint32_t (&raw)[XChunk<F, true>::kRawWords],
                                                  bool lo_part,
                                                  uint32_t (&b)[XChunk<F, true>::kFragWords]) {
    using X = XChunk<F, true>;
#pragma unroll
    for (int p = 0; p < X::kFragWords; ++p) {
        const float x0 = __uint_as_float(raw[2 * p]);
        const float x1 = __uint_as_float(raw[2 * p + 1]);
        const uint32_t hi = pack_bf16x2(x0, x1);
        const float h0 = __uint_as_float(hi << 16);
        const float h1 = __uint_as_float(hi & 0xffff0000u);
        b[p] = lo_part ? pack_bf16x2(x0 - h0, x1 - h1) : hi;
    }
}

}  // namespace dsv4::cuda::gemv_sm90
