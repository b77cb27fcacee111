// Reference-numerics round trips (round_trip.h): in place one block per row; the activation
// copy one warp per 128-value block.
#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/quant/round_trip.h"
#include "backend/cuda/kernels/quant/round_trip_sm90.cuh"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

constexpr int kRowThreads = 128;
constexpr int kCopyThreads = 256;

__global__ void __launch_bounds__(kRowThreads) round_trip_kernel(ops::RoundTripArgs a) {
    dev::pdl_enter();
    dev::block_round_trip_row(a.x + static_cast<int64_t>(blockIdx.x) * a.width, a.width, a.dims,
                              a.block, a.kind);
}

__global__ void __launch_bounds__(kCopyThreads)
    act_fp8_copy_kernel(const float* x, int64_t ldx, float* out, int64_t M, int64_t K) {
    dev::pdl_enter();
    const int64_t blocks_per_row = (K + 127) / 128;
    const int64_t w = static_cast<int64_t>(blockIdx.x) * (kCopyThreads / 32) + (threadIdx.x >> 5);
    if (w >= M * blocks_per_row) return;  // warp-uniform
    const int64_t m = w / blocks_per_row, k0 = (w % blocks_per_row) * 128;
    const int n = static_cast<int>(K - k0 < 128 ? K - k0 : 128);
    dev::warp_round_block<ops::RoundTrip::kFp8>(x + m * ldx + k0, out + m * K + k0, n);
}

}  // namespace

void launch_round_trip(const ops::RoundTripArgs& a, cudaStream_t stream) {
    if (a.kind == ops::RoundTrip::kNone || a.rows == 0) return;
    DSV4_ASSERT(a.block > 0 && a.dims % a.block == 0 && a.dims <= a.width, "round trip of ", a.dims,
                " dims in blocks of ", a.block);
    const bool hadamard =
        a.kind == ops::RoundTrip::kHadamardFp4 || a.kind == ops::RoundTrip::kHadamardBf16Fp4;
    DSV4_ASSERT(!hadamard || (a.dims == a.width && (a.width & (a.width - 1)) == 0),
                "Hadamard of width ", a.width);
    DSV4_ASSERT(a.rows <= 0x7fffffff, "round trip of ", a.rows, " rows");
    launch_pdl(round_trip_kernel, static_cast<unsigned>(a.rows), kRowThreads, 0, stream, 1, a);
}

void launch_act_fp8_copy(const float* x, int64_t ldx, float* out, int64_t M, int64_t K,
                         cudaStream_t stream) {
    DSV4_ASSERT(ldx >= K, "act_fp8 copy: ldx ", ldx, " < K ", K);
    if (M == 0 || K == 0) return;
    const int64_t warps = M * ((K + 127) / 128), per_cta = kCopyThreads / 32;
    launch_pdl(act_fp8_copy_kernel, static_cast<unsigned>((warps + per_cta - 1) / per_cta),
               kCopyThreads, 0, stream, 1, x, ldx, out, M, K);
}

}  // namespace dsv4::cuda
