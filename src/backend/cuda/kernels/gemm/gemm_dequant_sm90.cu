// gemm_dequant.h on sm_90: one warp per weight tile, decoding a lane's 16 bytes with the GEMV's
// own Decode (gemv_operands_sm90.cuh), so both paths read the same values; the fragment
// positions are gemv_layout.h's: lane 4g + c holds rows g and g + 8 of the block and, in k-step
// j, local k {4j, 4j+1} (words 0, 1) and {4j+2, 4j+3} (words 2, 3) of its lane_k-wide range.
#include <cuda_bf16.h>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/kernels/gemm/gemm_dequant.h"
#include "backend/cuda/kernels/gemv/gemv_operands_sm90.cuh"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

constexpr int kWarps = 8;

using gemv_sm90::Decode;
using gemv_sm90::Slot;

// The scale word the GEMV's Decode takes, and the f32 factor applied after it (FP8's block
// scale; 1 otherwise), of tile `idx`.
template <GemvFormat F>
__device__ __forceinline__ uint32_t scale_word(const uint8_t* scales, int64_t idx, int lane) {
    constexpr int kTileScale = gemv_tile_scale_bytes(F);
    if constexpr (F == GemvFormat::kNvfp4 || F == GemvFormat::kMxfp4) {
        const uint8_t* p = scales + idx * kTileScale + gemv_lane_scale_offset(F, lane);
        return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
    } else if constexpr (F == GemvFormat::kFp8) {
        return __ldg(reinterpret_cast<const uint32_t*>(scales + idx * kTileScale));
    } else {
        return 0u;
    }
}

template <GemvFormat F>
__device__ __forceinline__ float post_scale(uint32_t s) {
    return F == GemvFormat::kFp8 ? __uint_as_float(s) : 1.0f;
}

__device__ __forceinline__ uint16_t to_bf16_checked(float v, bool& bad) {
    const __nv_bfloat16 b = __float2bfloat16_rn(v);
    bad |= !(__bfloat162float(b) == v);
    return __bfloat16_as_ushort(b);
}

template <GemvFormat F>
__global__ void __launch_bounds__(kWarps * 32) dequant_kernel(const GemmDequantArgs a) {
    constexpr int kSteps = gemv_ksteps(F);
    constexpr int kTileK = gemv_tile_k(F), kLaneK = gemv_lane_k(F);
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int64_t tile = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    const int64_t rb_first = a.row0 / kGemvRowBlock;
    const int64_t rb_count = (a.rows + kGemvRowBlock - 1) / kGemvRowBlock;
    if (tile >= rb_count * a.k_tiles) return;  // whole warps
    const int64_t rb = rb_first + tile / a.k_tiles, t = tile % a.k_tiles;
    const auto* tiles = static_cast<const uint8_t*>(a.w_tiles);
    const auto* scales = static_cast<const uint8_t*>(a.w_scales);
    const int64_t idx = gemv_tile_index(rb, t, a.k_tiles);

    // alpha: the scale of the weight's first tile, the same whichever rows are decoded.
    const float alpha = __ldg(a.out_scale) * post_scale<F>(scale_word<F>(scales, 0, 0));
    if (a.alpha != nullptr && tile == 0 && lane == 0) *a.alpha = alpha;
    Slot slot;
    slot.w = __ldg(reinterpret_cast<const uint4*>(tiles + idx * kGemvTileBytes) + lane);
    slot.s = scale_word<F>(scales, idx, lane);
    const float ratio = __ldg(a.out_scale + rb) * post_scale<F>(slot.s) / alpha;
    uint32_t frag[kSteps][4];
    Decode<F>::run(slot, frag);

    const int g = lane >> 2, c = lane & 3;
    const int64_t k_lane = t * kTileK + c * kLaneK;
    bool bad = false;
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int64_t row = rb * kGemvRowBlock + g + ((q & 1) ? 8 : 0) - a.row0;
            const int64_t k = k_lane + 4 * j + ((q & 2) ? 2 : 0);
            const uint32_t w = frag[j][q];
            const uint16_t lo = to_bf16_checked(__uint_as_float(w << 16) * ratio, bad);
            const uint16_t hi = to_bf16_checked(__uint_as_float(w & 0xffff0000u) * ratio, bad);
            if (a.out == nullptr || row >= a.rows) continue;
            uint16_t* p = a.out + row * a.k + k;
            if (k + 1 < a.k && (a.k & 1) == 0) {
                *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(lo) | (uint32_t{hi} << 16);
            } else {
                if (k < a.k) p[0] = lo;
                if (k + 1 < a.k) p[1] = hi;
            }
        }
    }
    // Padding (rows past the weight's, k past its columns) decodes to zeros, which are exact.
    if (a.inexact != nullptr && __any_sync(0xffffffffu, bad) && lane == 0) atomicExch(a.inexact, 1);
}

__global__ void split_kernel(const float* x, int64_t ldx, int64_t rows, int64_t cols, uint16_t* hi,
                             uint16_t* lo) {
    const int64_t n = rows * cols;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / cols, col = i - r * cols;
        const float v = x[r * ldx + col];
        const __nv_bfloat16 h = __float2bfloat16_rn(v);
        hi[i] = __bfloat16_as_ushort(h);
        lo[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v - __bfloat162float(h)));
    }
}

}  // namespace

void launch_gemm_dequant(const GemmDequantArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.row0 % kGemvRowBlock == 0 && a.rows >= 0 && a.k > 0 && a.out_scale != nullptr,
                "gemm_dequant: rows from ", a.row0, " (x", a.rows, "), k ", a.k);
    const int64_t tiles = (a.rows + kGemvRowBlock - 1) / kGemvRowBlock * a.k_tiles;
    if (tiles == 0) return;
    const dim3 grid(static_cast<unsigned>((tiles + kWarps - 1) / kWarps));
    auto* kernel = a.format == GemvFormat::kNvfp4   ? dequant_kernel<GemvFormat::kNvfp4>
                   : a.format == GemvFormat::kMxfp4 ? dequant_kernel<GemvFormat::kMxfp4>
                   : a.format == GemvFormat::kFp8   ? dequant_kernel<GemvFormat::kFp8>
                                                    : dequant_kernel<GemvFormat::kBf16>;
    kernel<<<grid, kWarps * 32, 0, stream>>>(a);
    DSV4_CHECK_LAUNCH(stream);
}

void launch_split_bf16(const float* x, int64_t ldx, int64_t rows, int64_t cols, uint16_t* hi,
                       uint16_t* lo, cudaStream_t stream) {
    const int64_t n = rows * cols;
    if (n == 0) return;
    const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
    split_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, ldx, rows, cols, hi, lo);
    DSV4_CHECK_LAUNCH(stream);
}

}  // namespace dsv4::cuda
