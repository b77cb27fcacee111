// mHC kernels (hyper_conn.h). The mixing dots and the RMS accumulate in double like the
// reference (backend/cpu/ref/hyper_conn.cc); the gates, Sinkhorn and the collapse run in float
// in the reference's order with explicit round-to-nearest intrinsics (no FMA contraction), so
// the only differences from the CPU are the summation order of the double dots and expf
// (CUDA's is within 2 ulp, not correctly rounded). Tolerances: docs/numerics-cuda.md.
//
// hc_pre and hc_head run in two kernels:
//  1. hc_mix_partial: grid (S splits of the n*D width, T tokens). Block s multiplies its slice
//     of each token's streams by the same slice of every mixing row and sums the squares, in
//     double, and leaves one partial per row (and the sum of squares) in the scratch. At batch 1
//     the 1.5 MB mixing matrix of V4-Flash (24 x 16384 f32) is then read by ~64 SMs instead of
//     one (one block per token took 145 us a call, latency-bound on one SM).
//  2. the finish, one block per token: the partials summed in split order (deterministic),
//     the RMS factor, the gates, Sinkhorn (one thread per matrix element) and the collapse.
// Products of two floats are exact in double, so fma(a, b, s) is bitwise dadd(dmul(a, b), s):
// the dots use one DFMA per term.
#include <algorithm>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/hyper_conn/hyper_conn.h"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

constexpr int kMixThreads = 256;
constexpr int kFinishThreads = 512;
constexpr int kMaxN = 8;                      // residual streams (V4: 4)
constexpr int kMaxMix = (2 + kMaxN) * kMaxN;  // mixing rows
constexpr int kRowChunk = 24;                 // rows summed per pass (V4's (2 + 4) * 4)
constexpr int kMinSliceWidth = 256;           // elements per split, at least

__device__ __forceinline__ float sigmoidf_ref(float x) {
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}

// part[(t * S + s) * (rows + 1) + r] = fn_r . x_t over slice s; [.. + rows] = x_t . x_t there.
__global__ void __launch_bounds__(kMixThreads)
    hc_mix_partial_kernel(const float* x, const float* fn, int rows, int64_t width, int S,
                          double* part) {
    __shared__ double red[kRowChunk + 1][kMixThreads / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int s = blockIdx.x;
    const int64_t t = blockIdx.y;
    const int64_t per = (width + S - 1) / S;
    const int64_t begin = s * per, end = min(width, begin + per);
    const float* xt = x + t * width;
    double* out = part + (t * S + s) * (rows + 1);
    for (int k0 = 0; k0 < rows; k0 += kRowChunk) {
        const int nk = min(kRowChunk, rows - k0);
        double acc[kRowChunk];
#pragma unroll
        for (int r = 0; r < kRowChunk; ++r) acc[r] = 0;
        double ss = 0;
        for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
            const double v = xt[i];
            if (k0 == 0) ss = __fma_rn(v, v, ss);
#pragma unroll
            for (int r = 0; r < kRowChunk; ++r)
                if (r < nk)
                    acc[r] = __fma_rn(static_cast<double>(fn[(k0 + r) * width + i]), v, acc[r]);
        }
#pragma unroll
        for (int r = 0; r < kRowChunk; ++r) {
            const double w = dev::warp_sum(acc[r]);
            if (lane == 0) red[r][warp] = w;
        }
        ss = dev::warp_sum(ss);
        if (lane == 0) red[kRowChunk][warp] = ss;
        __syncthreads();
        if (threadIdx.x < nk || (k0 == 0 && threadIdx.x == kRowChunk)) {
            double sum = 0;
            for (int w = 0; w < nw; ++w) sum = __dadd_rn(sum, red[threadIdx.x][w]);
            out[threadIdx.x == kRowChunk ? rows : k0 + threadIdx.x] = sum;
        }
        __syncthreads();
    }
}

// mix[r] = (sum over splits of the row's partials) / rms, by threads r < rows (block-wide call).
// The partials are staged through shared memory by the whole block first (kStage at a time), so
// the loads are in flight together instead of a chain of S per summing thread.
constexpr int kStage = 2048;  // doubles
__device__ void finish_mix(const double* part, int S, int rows, int64_t width, float eps,
                           float* mix, double* tot) {
    __shared__ double stage[kStage];
    const int w = rows + 1, per = kStage / w;  // splits a round
    if (threadIdx.x <= rows) tot[threadIdx.x] = 0;
    for (int s0 = 0; s0 < S; s0 += per) {
        const int ns = min(per, S - s0);
        __syncthreads();  // the previous round is summed
        for (int i = threadIdx.x; i < ns * w; i += blockDim.x) stage[i] = part[s0 * w + i];
        __syncthreads();
        if (threadIdx.x <= rows) {
            double s = tot[threadIdx.x];
            for (int i = 0; i < ns; ++i) s = __dadd_rn(s, stage[i * w + threadIdx.x]);
            tot[threadIdx.x] = s;
        }
    }
    __syncthreads();
    const double inv = 1.0 / sqrt(tot[rows] / static_cast<double>(width) + eps);
    if (threadIdx.x < rows) mix[threadIdx.x] = static_cast<float>(tot[threadIdx.x] * inv);
    __syncthreads();
}

// The reference's Sinkhorn on one n x n matrix held in buf[0], one thread per element (all
// threads of the block call it; returns the buffer holding the result). Every sum is taken in
// the reference's order by each thread that needs it, and each element gets the reference's
// operations, so the result is bitwise the one-thread loop's.
//  - n*n <= 32 (V4: 16): warp 0 alone, each lane holding its element in a register and reading
//    its row's or column's elements by shuffles: no barriers (the other warps return at once).
//  - larger: each phase reads one shared buffer and writes the other, one block barrier a phase.
__device__ int sinkhorn(float (*buf)[kMaxN * kMaxN], int n, int iters, float eps) {
    const int e = threadIdx.x, j = e / n, k = e % n;
    const bool active = e < n * n;
    if (n * n <= 32) {
        if (threadIdx.x >= 32) return 0;  // (these threads hold no element)
        constexpr unsigned kAll = 0xffffffffu;
        const int src = active ? e : 0;
        float v = buf[0][src];
        __syncwarp();  // every lane has read before lane e writes buf[0][e] at the end
        auto row_sum = [&](float x) {  // sum of this lane's row, in column order
            float s = 0;
            for (int c = 0; c < n; ++c) s = __fadd_rn(s, __shfl_sync(kAll, x, j * n + c));
            return s;
        };
        auto col_sum = [&](float x) {  // sum of this lane's column, in row order
            float s = 0;
            for (int r = 0; r < n; ++r) s = __fadd_rn(s, __shfl_sync(kAll, x, r * n + k));
            return s;
        };
        float mx = 0;  // column 0 first
        for (int c = 0; c < n; ++c) {
            const float x = __shfl_sync(kAll, v, j * n + c);
            mx = c == 0 ? x : (x > mx ? x : mx);
        }
        v = expf(__fsub_rn(v, mx));
        v = __fadd_rn(__fdiv_rn(v, row_sum(v)), eps);
        v = __fdiv_rn(v, __fadd_rn(col_sum(v), eps));
        for (int it = 1; it < iters; ++it) {
            v = __fdiv_rn(v, __fadd_rn(row_sum(v), eps));
            v = __fdiv_rn(v, __fadd_rn(col_sum(v), eps));
        }
        if (active) buf[0][e] = v;
        __syncwarp();
        return 0;
    }
    int b = 0;
    if (active) {
        const float* row = buf[0] + j * n;
        float mx = row[0];
        for (int c = 1; c < n; ++c) mx = row[c] > mx ? row[c] : mx;
        float s = 0;
        for (int c = 0; c < n; ++c) s = __fadd_rn(s, expf(__fsub_rn(row[c], mx)));
        buf[1][e] = __fadd_rn(__fdiv_rn(expf(__fsub_rn(row[k], mx)), s), eps);
    }
    __syncthreads();
    b = 1;
    // Divides each element by (its row's or column's sum + eps), the sum in index order.
    auto norm = [&](bool rows) {
        if (active) {
            float s = 0;
            for (int c = 0; c < n; ++c) s = __fadd_rn(s, buf[b][rows ? j * n + c : c * n + k]);
            buf[b ^ 1][e] = __fdiv_rn(buf[b][e], __fadd_rn(s, eps));
        }
        __syncthreads();
        b ^= 1;
    };
    norm(false);
    for (int it = 1; it < iters; ++it) {
        norm(true);
        norm(false);
    }
    return b;
}

// y[d] = sum_i pre[i] * x[i*D + d], in i order (four dims a thread step when D allows).
__device__ void collapse(const float* x, const float* pre, int n, int D, float* y) {
    if ((D & 3) == 0) {
        for (int d = threadIdx.x * 4; d < D; d += blockDim.x * 4) {
            float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int i = 0; i < n; ++i) {
                const float4 v = *reinterpret_cast<const float4*>(x + int64_t{i} * D + d);
                s.x = __fadd_rn(s.x, __fmul_rn(pre[i], v.x));
                s.y = __fadd_rn(s.y, __fmul_rn(pre[i], v.y));
                s.z = __fadd_rn(s.z, __fmul_rn(pre[i], v.z));
                s.w = __fadd_rn(s.w, __fmul_rn(pre[i], v.w));
            }
            *reinterpret_cast<float4*>(y + d) = s;
        }
        return;
    }
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float s = 0;
        for (int i = 0; i < n; ++i)
            s = __fadd_rn(s, __fmul_rn(pre[i], x[static_cast<int64_t>(i) * D + d]));
        y[d] = s;
    }
}

__global__ void __launch_bounds__(kFinishThreads)
    hc_pre_finish_kernel(ops::HcPreArgs a, const double* part, int S) {
    __shared__ double tot[kMaxMix + 1];
    __shared__ float mix[kMaxMix];
    __shared__ float pre[kMaxN];
    __shared__ float C[2][kMaxN * kMaxN];
    const int n = a.n, rows = (2 + n) * n;
    const int64_t t = blockIdx.x;
    const int64_t width = static_cast<int64_t>(n) * a.D;
    finish_mix(part + t * S * (rows + 1), S, rows, width, a.norm_eps, mix, tot);
    // Gates by thread i, the mixing logits by thread jk, then Sinkhorn.
    if (threadIdx.x < n) {
        const int i = threadIdx.x;
        pre[i] =
            __fadd_rn(sigmoidf_ref(__fadd_rn(__fmul_rn(mix[i], a.scale[0]), a.base[i])), a.hc_eps);
        a.post[t * n + i] = __fmul_rn(
            2.0f, sigmoidf_ref(__fadd_rn(__fmul_rn(mix[n + i], a.scale[1]), a.base[n + i])));
    }
    if (threadIdx.x < n * n) {
        const int jk = threadIdx.x;
        C[0][jk] = __fadd_rn(__fmul_rn(mix[2 * n + jk], a.scale[2]), a.base[2 * n + jk]);
    }
    __syncthreads();
    const int b = sinkhorn(C, n, a.sinkhorn_iters, a.hc_eps);
    if (threadIdx.x < n * n) a.comb[t * n * n + threadIdx.x] = C[b][threadIdx.x];
    // (The other warps are already collapsing while warp 0 runs a one-warp Sinkhorn.)
    float* y = a.y + t * a.D;
    collapse(a.x + t * width, pre, n, a.D, y);
    if (a.y_norm != nullptr) {
        // The fused RMSNorm (rms_norm_kernel's arithmetic) on y as this block just wrote it
        // (the block barrier makes the writes visible to the block).
        __syncthreads();
        dev::block_rms_norm_row(y, a.norm_weight, a.y_norm + t * a.D, a.D, a.y_norm_eps, tot);
    }
}

__global__ void __launch_bounds__(kFinishThreads)
    hc_head_finish_kernel(ops::HcHeadArgs a, const double* part, int S) {
    __shared__ double tot[kMaxN + 1];
    __shared__ float mix[kMaxN];
    __shared__ float pre[kMaxN];
    const int n = a.n;
    const int64_t t = blockIdx.x;
    const int64_t width = static_cast<int64_t>(n) * a.D;
    finish_mix(part + t * S * (n + 1), S, n, width, a.norm_eps, mix, tot);
    if (threadIdx.x < n) {
        const int i = threadIdx.x;
        pre[i] =
            __fadd_rn(sigmoidf_ref(__fadd_rn(__fmul_rn(mix[i], a.scale[0]), a.base[i])), a.hc_eps);
    }
    __syncthreads();
    collapse(a.x + t * width, pre, n, a.D, a.out + t * a.D);
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

// Splits of the width: ~2 blocks per SM over the step's tokens, each slice >= kMinSliceWidth.
int mix_splits(int64_t T, int64_t width, int sm_count) {
    const int64_t by_width = std::max<int64_t>(1, width / kMinSliceWidth);
    const int64_t by_grid = (2 * int64_t{sm_count} + T - 1) / T;
    return static_cast<int>(std::max<int64_t>(1, std::min(by_width, by_grid)));
}

// Runs the partial kernel; returns the split count S.
int launch_mix_partial(const float* x, const float* fn, int rows, int64_t T, int64_t width,
                       const HcScratch& ws, cudaStream_t stream) {
    const int S = mix_splits(T, width, ws.sm_count);
    DSV4_ASSERT(T * S * (rows + 1) <= ws.doubles, "hc scratch of ", ws.doubles, " doubles for ", T,
                " tokens x ", S, " splits x ", rows + 1);
    DSV4_ASSERT(T <= 65535, "hc: ", T, " tokens in one launch");
    hc_mix_partial_kernel<<<dim3(static_cast<unsigned>(S), static_cast<unsigned>(T)), kMixThreads,
                            0, stream>>>(x, fn, rows, width, S, ws.part);
    DSV4_CHECK_LAUNCH(stream);
    return S;
}

}  // namespace

int64_t hc_scratch_doubles(int64_t max_tokens, int n, int sm_count) {
    // T * S <= T + 2 * sm_count (mix_splits), times the widest row count plus the squares.
    return (max_tokens + 2 * int64_t{sm_count}) * ((2 + n) * n + 1);
}

void launch_hc_pre(const ops::HcPreArgs& a, const HcScratch& ws, cudaStream_t stream) {
    DSV4_ASSERT(a.n >= 1 && a.n <= kMaxN, "hc_pre: n = ", a.n, " (at most ", kMaxN, ")");
    if (a.T == 0) return;
    const int rows = (2 + a.n) * a.n;
    const int S = launch_mix_partial(a.x, a.fn, rows, a.T, int64_t{a.n} * a.D, ws, stream);
    hc_pre_finish_kernel<<<static_cast<unsigned>(a.T), kFinishThreads, 0, stream>>>(a, ws.part, S);
    DSV4_CHECK_LAUNCH(stream);
}

void launch_hc_head(const ops::HcHeadArgs& a, const HcScratch& ws, cudaStream_t stream) {
    DSV4_ASSERT(a.n >= 1 && a.n <= kMaxN, "hc_head: n = ", a.n, " (at most ", kMaxN, ")");
    if (a.T == 0) return;
    const int S = launch_mix_partial(a.x, a.fn, a.n, a.T, int64_t{a.n} * a.D, ws, stream);
    hc_head_finish_kernel<<<static_cast<unsigned>(a.T), kFinishThreads, 0, stream>>>(a, ws.part, S);
    DSV4_CHECK_LAUNCH(stream);
}

void launch_hc_post(const ops::HcPostArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.n >= 1 && a.n <= kMaxN, "hc_post: n = ", a.n);
    const int64_t n = a.T * a.D;
    if (n == 0) return;
    constexpr int kThreads = 256;
    hc_post_kernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        a);
    DSV4_CHECK_LAUNCH(stream);
}

}  // namespace dsv4::cuda
