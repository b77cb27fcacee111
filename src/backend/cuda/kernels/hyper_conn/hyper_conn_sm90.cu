// mHC kernels (hyper_conn.h). The mixing dots and the RMS accumulate in double like the
// reference (backend/cpu/ref/hyper_conn.cc); the gates, Sinkhorn and the collapse run in float
// in the reference's order with explicit round-to-nearest intrinsics (no FMA contraction), so
// the only differences from the CPU are the summation order of the double dots and expf
// (CUDA's is within 2 ulp, not correctly rounded). Tolerances: docs/numerics-cuda.md.
#include "backend/cuda/common/check.cuh"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/hyper_conn/hyper_conn.h"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxN = 8;                      // residual streams (V4: 4)
constexpr int kMaxMix = (2 + kMaxN) * kMaxN;  // mixing rows

__device__ __forceinline__ float sigmoidf_ref(float x) {
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}

// mix[k] = (fn_k . x) / rms(x) for k < rows (x: one token's n*D streams). Every thread takes
// a strided slice of the width and keeps kRowChunk row sums (and the sum of squares) in
// registers, so the block streams fn with all its threads and many loads in flight (one warp
// per row was latency-bound: 250 us a call at V4-Flash's 24 x 16384); then the partial sums
// are reduced across the block. Double sums, in a different order than the reference's.
constexpr int kRowChunk = 8;

__device__ void hc_mix(const float* x, const float* fn, int rows, int64_t width, float eps,
                       float* mix, double* red) {
    __shared__ double part[kRowChunk][kThreads / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double inv = 0;
    for (int k0 = 0; k0 < rows; k0 += kRowChunk) {
        const int nk = min(kRowChunk, rows - k0);
        double acc[kRowChunk];
#pragma unroll
        for (int r = 0; r < kRowChunk; ++r) acc[r] = 0;
        double ss = 0;
        for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
            const double v = x[i];
            if (k0 == 0) ss = __dadd_rn(ss, __dmul_rn(v, v));
#pragma unroll
            for (int r = 0; r < kRowChunk; ++r)
                if (r < nk)
                    acc[r] = __dadd_rn(acc[r],
                                       __dmul_rn(static_cast<double>(fn[(k0 + r) * width + i]), v));
        }
        if (k0 == 0) {
            ss = dev::block_sum(ss, red);
            inv = 1.0 / sqrt(ss / static_cast<double>(width) + eps);
        }
#pragma unroll
        for (int r = 0; r < kRowChunk; ++r) {
            const double w = dev::warp_sum(acc[r]);
            if (lane == 0) part[r][warp] = w;
        }
        __syncthreads();
        if (threadIdx.x < nk) {
            double s = 0;
            for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w)
                s = __dadd_rn(s, part[threadIdx.x][w]);
            mix[k0 + threadIdx.x] = static_cast<float>(s * inv);
        }
        __syncthreads();
    }
}

// The reference's Sinkhorn on one n x n matrix, by the first n threads of the block (all
// threads call it): thread j normalises row j, then thread k column k, each sum in the
// reference's order, so the result is bitwise the one-thread loop's. (One thread alone spent
// ~100 us on V4's 20 iterations of IEEE divisions.)
__device__ void sinkhorn(float* C, int n, int iters, float eps) {
    const int j = threadIdx.x;
    auto col_norm = [&] {
        __syncthreads();
        if (j < n) {
            float s = 0;
            for (int r = 0; r < n; ++r) s = __fadd_rn(s, C[r * n + j]);
            for (int r = 0; r < n; ++r) C[r * n + j] = __fdiv_rn(C[r * n + j], __fadd_rn(s, eps));
        }
        __syncthreads();
    };
    if (j < n) {
        float* row = C + j * n;
        float mx = row[0];
        for (int k = 1; k < n; ++k) mx = row[k] > mx ? row[k] : mx;
        float s = 0;
        for (int k = 0; k < n; ++k) s = __fadd_rn(s, (row[k] = expf(__fsub_rn(row[k], mx))));
        for (int k = 0; k < n; ++k) row[k] = __fadd_rn(__fdiv_rn(row[k], s), eps);
    }
    col_norm();
    for (int it = 1; it < iters; ++it) {
        if (j < n) {
            float s = 0;
            for (int k = 0; k < n; ++k) s = __fadd_rn(s, C[j * n + k]);
            for (int k = 0; k < n; ++k) C[j * n + k] = __fdiv_rn(C[j * n + k], __fadd_rn(s, eps));
        }
        col_norm();
    }
}

// y[d] = sum_i pre[i] * x[i*D + d], in i order.
__device__ void collapse(const float* x, const float* pre, int n, int D, float* y) {
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float s = 0;
        for (int i = 0; i < n; ++i)
            s = __fadd_rn(s, __fmul_rn(pre[i], x[static_cast<int64_t>(i) * D + d]));
        y[d] = s;
    }
}

__global__ void hc_pre_kernel(ops::HcPreArgs a) {
    __shared__ double red[32];
    __shared__ float mix[kMaxMix];
    __shared__ float pre[kMaxN];
    __shared__ float C[kMaxN * kMaxN];  // shared, not a local array (no local memory)
    const int n = a.n;
    const int64_t t = blockIdx.x;
    const int64_t width = static_cast<int64_t>(n) * a.D;
    const float* x = a.x + t * width;
    hc_mix(x, a.fn, (2 + n) * n, width, a.norm_eps, mix, red);
    // Gates by thread i, the mixing logits by thread jk, then Sinkhorn on n threads.
    if (threadIdx.x < n) {
        const int i = threadIdx.x;
        pre[i] =
            __fadd_rn(sigmoidf_ref(__fadd_rn(__fmul_rn(mix[i], a.scale[0]), a.base[i])), a.hc_eps);
        a.post[t * n + i] = __fmul_rn(
            2.0f, sigmoidf_ref(__fadd_rn(__fmul_rn(mix[n + i], a.scale[1]), a.base[n + i])));
    }
    if (threadIdx.x < n * n) {
        const int jk = threadIdx.x;
        C[jk] = __fadd_rn(__fmul_rn(mix[2 * n + jk], a.scale[2]), a.base[2 * n + jk]);
    }
    __syncthreads();
    sinkhorn(C, n, a.sinkhorn_iters, a.hc_eps);
    if (threadIdx.x < n * n) a.comb[t * n * n + threadIdx.x] = C[threadIdx.x];
    __syncthreads();
    collapse(x, pre, n, a.D, a.y + t * a.D);
}

__global__ void hc_head_kernel(ops::HcHeadArgs a) {
    __shared__ double red[32];
    __shared__ float mix[kMaxN];
    __shared__ float pre[kMaxN];
    const int n = a.n;
    const int64_t t = blockIdx.x;
    const int64_t width = static_cast<int64_t>(n) * a.D;
    const float* x = a.x + t * width;
    hc_mix(x, a.fn, n, width, a.norm_eps, mix, red);
    if (threadIdx.x < n) {
        const int i = threadIdx.x;
        pre[i] =
            __fadd_rn(sigmoidf_ref(__fadd_rn(__fmul_rn(mix[i], a.scale[0]), a.base[i])), a.hc_eps);
    }
    __syncthreads();
    collapse(x, pre, n, a.D, a.out + t * a.D);
}

// One thread per (token, d): out[k][d] = post[k] f[d] + sum_j C[j][k] x[j][d], in j order.
__global__ void hc_post_kernel(ops::HcPostArgs a) {
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= a.T * a.D) return;
    const int n = a.n;
    const int64_t t = idx / a.D, d = idx % a.D;
    const float* x = a.x + t * n * a.D;
    const float* C = a.comb + t * n * n;
    const float fd = a.f[t * a.D + d];
    for (int k = 0; k < n; ++k) {
        float s = __fmul_rn(a.post[t * n + k], fd);
        for (int j = 0; j < n; ++j) s = __fadd_rn(s, __fmul_rn(C[j * n + k], x[j * a.D + d]));
        a.out[(t * n + k) * a.D + d] = s;
    }
}

}  // namespace

void launch_hc_pre(const ops::HcPreArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.n >= 1 && a.n <= kMaxN, "hc_pre: n = ", a.n, " (at most ", kMaxN, ")");
    if (a.T == 0) return;
    hc_pre_kernel<<<static_cast<unsigned>(a.T), kThreads, 0, stream>>>(a);
    DSV4_CHECK_LAUNCH(stream);
}

void launch_hc_head(const ops::HcHeadArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.n >= 1 && a.n <= kMaxN, "hc_head: n = ", a.n, " (at most ", kMaxN, ")");
    if (a.T == 0) return;
    hc_head_kernel<<<static_cast<unsigned>(a.T), kThreads, 0, stream>>>(a);
    DSV4_CHECK_LAUNCH(stream);
}

void launch_hc_post(const ops::HcPostArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.n >= 1 && a.n <= kMaxN, "hc_post: n = ", a.n);
    const int64_t n = a.T * a.D;
    if (n == 0) return;
    hc_post_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        a);
    DSV4_CHECK_LAUNCH(stream);
}

}  // namespace dsv4::cuda
