// Cache rows on the device (the layouts of formats/cache_row.h): readers decode one value or
// four, writers encode a whole row with a block. Bitwise formats/cache_row.cc's encode and
// decode: the same float operations per value (base/fp_codes.h; the CUDA target is built
// without fast math), the block amax a max (any order), the Hadamard butterflies in its stage
// order (round_trip_sm90.cuh).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/quant/round_trip_sm90.cuh"
#include "base/fp_codes.h"
#include "formats/cache_row.h"

namespace dsv4::cuda {

// A row format with the offsets a kernel needs (row_codec, on the host).
struct RowCodec {
    CacheType type = CacheType::kF32;
    int width = 0;      // values a row
    int nope = 0;       // kFp8: the E4M3 values before the bf16 RoPE dims
    int block = 1;      // kFp8 / kFp4: values a UE8M0 scale
    int scales = 0;     // kFp8 / kFp4: byte offset of the scales
    int64_t bytes = 0;  // a row (cache_row_bytes: a multiple of 4)
    // Values d .. d + 3 (d % 4 == 0) decode with one or two aligned loads: width (and for the
    // scaled types nope and block) multiples of 4 (rows and their bases 16-byte aligned for
    // kF32, 8 for kBf16).
    bool vec4 = false;
};

inline RowCodec row_codec(const CacheRowFormat& f, int width) {
    RowCodec c;
    c.type = f.type;
    c.width = width;
    c.nope = width - f.rope_dim;
    c.block = f.block > 0 ? f.block : 1;
    c.scales = f.type == CacheType::kFp8   ? c.nope + 2 * f.rope_dim
               : f.type == CacheType::kFp4 ? (width + 1) / 2
                                           : 0;
    c.bytes = cache_row_bytes(f, width);
    const bool scaled = f.type == CacheType::kFp8 || f.type == CacheType::kFp4;
    c.vec4 = width % 4 == 0 && (!scaled || (c.nope % 4 == 0 && c.block % 4 == 0));
    return c;
}

namespace dev {

__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) {
    return static_cast<uint16_t>(p[0] | (p[1] << 8));  // (any alignment; little-endian)
}

// Value i of a stored row.
__device__ __forceinline__ float decode_value(const RowCodec& c, const uint8_t* row, int i) {
    switch (c.type) {
        case CacheType::kF32:
            return reinterpret_cast<const float*>(row)[i];
        case CacheType::kBf16:
            return bf16_to_f32(load_u16(row + 2 * i));
        case CacheType::kFp8:
            if (i < c.nope) return e4m3_to_f32(row[i]) * e8m0_to_f32(row[c.scales + i / c.block]);
            return bf16_to_f32(load_u16(row + c.nope + 2 * (i - c.nope)));
        case CacheType::kFp4:
            return e2m1_to_f32((row[i / 2] >> (4 * (i & 1))) & 0xf) *
                   e8m0_to_f32(row[c.scales + i / c.block]);
    }
    return 0.0f;
}

__device__ __forceinline__ float4 bf16x4(uint32_t lo, uint32_t hi) {
    return make_float4(bf16_to_f32(static_cast<uint16_t>(lo)), bf16_to_f32(lo >> 16),
                       bf16_to_f32(static_cast<uint16_t>(hi)), bf16_to_f32(hi >> 16));
}

// Values d .. d + 3 of a stored row (c.vec4, d % 4 == 0, d + 3 < width).
__device__ __forceinline__ float4 decode4(const RowCodec& c, const uint8_t* row, int d) {
    switch (c.type) {
        case CacheType::kF32:
            return *reinterpret_cast<const float4*>(row + 4 * d);
        case CacheType::kBf16: {
            const uint2 v = *reinterpret_cast<const uint2*>(row + 2 * d);
            return bf16x4(v.x, v.y);
        }
        case CacheType::kFp8: {
            if (d >= c.nope) {  // 4-byte aligned (nope % 4 == 0), not always 8
                const uint32_t* p =
                    reinterpret_cast<const uint32_t*>(row + c.nope + 2 * (d - c.nope));
                return bf16x4(p[0], p[1]);
            }
            // E4M3 -> f16 is one instruction a pair (exact, as is f16 -> f32): e4m3_to_f32's
            // values.
            const uint32_t v = *reinterpret_cast<const uint32_t*>(row + d);
            const float s = e8m0_to_f32(row[c.scales + d / c.block]);
            const float2 lo = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(
                static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3)));
            const float2 hi = __half22float2(__half2(
                __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v >> 16), __NV_E4M3)));
            return make_float4(lo.x * s, lo.y * s, hi.x * s, hi.y * s);
        }
        case CacheType::kFp4: {
            const uint32_t v = load_u16(row + d / 2);
            const float s = e8m0_to_f32(row[c.scales + d / c.block]);
            return make_float4(e2m1_to_f32(v & 0xf) * s, e2m1_to_f32((v >> 4) & 0xf) * s,
                               e2m1_to_f32((v >> 8) & 0xf) * s, e2m1_to_f32(v >> 12) * s);
        }
    }
    return make_float4(0.f, 0.f, 0.f, 0.f);
}

// The whole block encodes the row x [c.width] (shared memory; kFp4 rotates it in place) into
// out [c.bytes] (the padding bytes untouched). Called by every thread of the block (blockDim.x
// a multiple of 32); begins and ends with a barrier.
__device__ __forceinline__ void block_encode_row(const RowCodec& c, float* x, uint8_t* out) {
    __syncthreads();
    const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5, lane = threadIdx.x & 31;
    switch (c.type) {
        case CacheType::kF32:
            for (int i = threadIdx.x; i < c.width; i += blockDim.x)
                reinterpret_cast<float*>(out)[i] = x[i];
            break;
        case CacheType::kBf16:
            for (int i = threadIdx.x; i < c.width; i += blockDim.x) {
                const uint16_t h = f32_to_bf16(x[i]);
                out[2 * i] = static_cast<uint8_t>(h);
                out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
            }
            break;
        case CacheType::kFp8: {
            // A warp per scale block (amax over the warp), then the bf16 RoPE dims.
            for (int b = warp * c.block; b < c.nope; b += warps * c.block) {
                const int n = c.nope - b < c.block ? c.nope - b : c.block;
                const float s = fp8_block_scale(warp_amax(x + b, n));
                for (int i = lane; i < n; i += 32) out[b + i] = fp8_code(x[b + i], s);
                if (lane == 0) out[c.scales + b / c.block] = ue8m0_of(s);
            }
            for (int i = c.nope + threadIdx.x; i < c.width; i += blockDim.x) {
                const uint16_t h = f32_to_bf16(x[i]);
                uint8_t* o = out + c.nope + 2 * (i - c.nope);
                o[0] = static_cast<uint8_t>(h);
                o[1] = static_cast<uint8_t>(h >> 8);
            }
            break;
        }
        case CacheType::kFp4: {
            block_hadamard(x, c.width);
            // A warp per scale block; byte k of the block packs values 2k (low) and 2k + 1.
            for (int b = warp * c.block; b < c.width; b += warps * c.block) {
                const int n = c.width - b < c.block ? c.width - b : c.block;
                const float s = fp4_block_scale(warp_amax(x + b, n));
                for (int k = lane; 2 * k < n; k += 32) {
                    const int i = b + 2 * k;
                    const uint8_t hi = i + 1 < b + n ? fp4_code(x[i + 1], s) : 0;
                    out[i / 2] = static_cast<uint8_t>(fp4_code(x[i], s) | (hi << 4));
                }
                if (lane == 0) out[c.scales + b / c.block] = ue8m0_of(s);
            }
            break;
        }
    }
    __syncthreads();
}

}  // namespace dev
}  // namespace dsv4::cuda
