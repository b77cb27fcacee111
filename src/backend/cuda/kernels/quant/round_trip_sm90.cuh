// Device steps of the reference-numerics round trips (round_trip.h), shared by the round-trip
// kernels and the compressor's entry round trip. Each value goes through the same float
// operations as the CPU reference (base/fp_codes.h; the CUDA target is built without fast math),
// the block amax is a max (any order), and the Hadamard butterflies run stage by stage in the
// reference's order, each output one float add or subtract: the results are bitwise the CPU's.
#pragma once

#include <cuda_runtime.h>

#include "base/fp_codes.h"
#include "ops/quant.h"

namespace dsv4::cuda::dev {

// One warp rounds src[0, n) into dst[0, n) (may alias: each lane rewrites only what it read).
// The warp's max |x[i]| over [0, n), on every lane (the block scales' amax).
__device__ __forceinline__ float warp_amax(const float* x, int n) {
    float amax = 0.0f;
    for (int i = threadIdx.x & 31; i < n; i += 32) amax = fmaxf(amax, fabsf(x[i]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    return amax;
}

template <ops::RoundTrip kKind>
__device__ __forceinline__ void warp_round_block(const float* src, float* dst, int n) {
    const int lane = threadIdx.x & 31;
    const float amax = warp_amax(src, n);
    if constexpr (kKind == ops::RoundTrip::kFp8) {
        const float s = fp8_block_scale(amax);
        for (int i = lane; i < n; i += 32) dst[i] = fp8_round_trip(src[i], s);
    } else {
        const float s = fp4_block_scale(amax);
        for (int i = lane; i < n; i += 32) dst[i] = fp4_round_trip(src[i], s);
    }
}

// The whole block rotates `rows` rows of `width` floats (a power of two), `ld` apart, in place:
// the natural-order Walsh-Hadamard butterflies stage by stage (stage h pairs (j, j + h) with
// j % 2h < h), then times width^-1/2, as hadamard_rotate (formats/cache_row.h). Begins and ends
// with a barrier.
__device__ __forceinline__ void block_hadamard(float* row, int width, int rows = 1, int ld = 0) {
    __syncthreads();
    const int half = width / 2;
    for (int h = 1; h < width; h *= 2) {
        for (int q = threadIdx.x; q < rows * half; q += blockDim.x) {
            float* r = row + (q / half) * ld;
            const int k = q % half, j = (k / h) * 2 * h + k % h;
            const float x = r[j], y = r[j + h];
            r[j] = __fadd_rn(x, y);
            r[j + h] = __fsub_rn(x, y);
        }
        __syncthreads();
    }
    const float scale = static_cast<float>(__ddiv_rn(1.0, __dsqrt_rn(width)));
    for (int i = threadIdx.x; i < rows * width; i += blockDim.x)
        row[(i / width) * ld + i % width] = __fmul_rn(row[(i / width) * ld + i % width], scale);
    __syncthreads();
}

// The whole block rounds one row of `width` floats in place (global or shared memory): the
// Hadamard rotation first for the Hadamard kinds (dims == width, a power of two), the first
// `dims` values rounded to bf16 for the bf16 kinds (kBf16 stops there), then those values in
// blocks of `block`, one warp per block. Called by every thread of the block (blockDim.x a
// multiple of 32); begins and ends with a barrier.
__device__ __forceinline__ void block_round_trip_row(float* row, int width, int dims, int block,
                                                     ops::RoundTrip kind) {
    __syncthreads();
    if (kind == ops::RoundTrip::kNone) return;
    if (kind == ops::RoundTrip::kHadamardFp4 || kind == ops::RoundTrip::kHadamardBf16Fp4)
        block_hadamard(row, width);
    if (kind == ops::RoundTrip::kHadamardBf16Fp4 || kind == ops::RoundTrip::kBf16) {
        for (int i = threadIdx.x; i < dims; i += blockDim.x) row[i] = bf16_round(row[i]);
        __syncthreads();
        if (kind == ops::RoundTrip::kBf16) return;
    }
    const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int b = warp; b < dims / block; b += warps) {
        float* p = row + b * block;
        if (kind == ops::RoundTrip::kFp8)
            warp_round_block<ops::RoundTrip::kFp8>(p, p, block);
        else
            warp_round_block<ops::RoundTrip::kHadamardFp4>(p, p, block);
    }
    __syncthreads();
}

}  // namespace dsv4::cuda::dev
