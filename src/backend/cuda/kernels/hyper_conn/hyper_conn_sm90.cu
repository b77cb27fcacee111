// mHC kernels (hyper_conn.h). The mixing dots and the RMS accumulate in double like the
// reference (backend/cpu/ref/hyper_conn.cc); the gates, Sinkhorn and the collapse run in float
// in the reference's order with explicit round-to-nearest intrinsics (no FMA contraction), so
// the only differences from the CPU are the summation order of the double dots and expf
// (CUDA's is within 2 ulp, not correctly rounded). Tolerances: docs/numerics-cuda.md.
//
// hc_pre and hc_head are one launch each, grid (S splits of the n*D width, T tokens; decode hc_pre
// launches of V4's shapes take the cluster kernel of hc_pre_cluster_sm90.cu instead):
//  1. every block multiplies its slice of each token's streams by the same slice of every mixing
//     row and sums the squares, in double, and leaves one partial per row (and the sum of
//     squares) in the scratch. At batch 1 the 1.5 MB mixing matrix of V4-Flash (24 x 16384 f32)
//     is then read by ~64 SMs instead of one (one block per token took 145 us a call,
//     latency-bound on one SM);
//  2. the last block of a token to finish (a per-token arrival counter, the threadfence-reduction
//     pattern; the counter is left at zero for the next launch) finishes it: the partials summed
//     in a fixed order (so the result does not depend on which block came last), the RMS factor,
//     the gates, Sinkhorn and the collapse, with the collapsed row kept in registers for the
//     fused RMSNorm. For V4's 4 streams, in grids of one block an SM (one decode token), warp 0
//     runs the Sinkhorn while warps 1-7 collapse and norm on a barrier of their own (the norm's
//     block reduction waited for the Sinkhorn's ~2.3 us when the whole block took part:
//     docs/perf.md, session 15). (A separate finish kernel cost a launch; its 17.5 us a call
//     at batch 1 were mostly chains of dependent loads, now issued together: finish_mix,
//     collapse.)
// With a fused hc_post (HcPreArgs::post_in) each block first computes its slice of the streams
// (and writes it), so the streams make one trip through memory instead of two, in one launch.
// Products of two floats are exact in double, so fma(a, b, s) is bitwise dadd(dmul(a, b), s):
// the dots use one DFMA per term.
#include <algorithm>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/ptx_sm90.cuh"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/hyper_conn/hyper_conn.h"
#include "backend/cuda/kernels/hyper_conn/hyper_conn_math_sm90.cuh"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

using hc::add_scaled;
using hc::pre_gate;
using hc::sigmoidf_ref;
using hc::sinkhorn_warp_upto;
using hc::Team;

constexpr int kThreads = 256;
constexpr int kMaxN = kHcMaxStreams;          // residual streams (V4: 4)
constexpr int kMaxMix = (2 + kMaxN) * kMaxN;  // mixing rows
constexpr int kRowChunk = 24;                 // rows summed per pass (V4's (2 + 4) * 4)
static_assert(kRowChunk < 32, "the rows and the squares reduce-scatter over one warp");
constexpr int kMinSliceWidth = 256;  // elements per split, at least
// Float4s of the collapsed row a thread holds: D <= 10240 on a whole block, 8960 on hc_pre's
// 224 collapsing threads (Team::after_warp0; V4-Pro: 7168).
constexpr int kMaxVec = 10;

// Element i = k D + d of token t's streams after hc_post (pa), written to pa.out and returned:
// post[k] f[d] + sum_j C[j][k] x[j][d] in j order, rounded as the reference's loop (hc_post_kernel
// and the fused hc_pre both use it). N > 0: the stream count at compile time (the loads issued
// together); 0: at run time.
template <int N>
__device__ __forceinline__ float post_element(const ops::HcPostArgs& pa, int64_t t, int64_t i) {
    const int n = N > 0 ? N : pa.n;
    const int64_t k = i / pa.D, d = i - k * pa.D;
    const float* x = pa.x + t * n * pa.D + d;
    const float* C = pa.comb + t * n * n + k;
    float s = __fmul_rn(pa.post[t * n + k], pa.f[t * pa.D + d]);
    if constexpr (N > 0) {
        float xv[N], cv[N];
#pragma unroll
        for (int j = 0; j < N; ++j) {
            xv[j] = x[j * pa.D];
            cv[j] = C[j * N];
        }
#pragma unroll
        for (int j = 0; j < N; ++j) s = __fadd_rn(s, __fmul_rn(cv[j], xv[j]));
    } else {
        for (int j = 0; j < n; ++j) s = __fadd_rn(s, __fmul_rn(C[j * n], x[j * pa.D]));
    }
    pa.out[t * n * pa.D + i] = s;
    return s;
}

// part[(t * S + s) * (rows + 1) + r] = fn_r . x_t over slice s; [.. + rows] = x_t . x_t there
// (block s = blockIdx.x of token t = blockIdx.y). kPost != kNoPost: x_t's elements are computed
// (and written) as hc_post(pa), whose out is x, by post_element<kPost> in the first pass and
// used from registers (later passes, n > 4 streams only, read back what this thread wrote).
// Every weight of a pass is loaded before the first multiply-add: with a predicated load per
// row the compiler interleaved loads and uses, ~10 dependent DRAM round trips an element (the
// decode's hc_pre took ~20 us by Nsight Compute, mostly those waits).
constexpr int kNoPost = -1;

// Block blockIdx.x's slice [begin, end) of a token's width elements (S splits).
struct MixSlice {
    int64_t begin, end;
};
__device__ __forceinline__ MixSlice mix_slice(int64_t width, int S) {
    const int64_t per = (width + S - 1) / S;
    const int64_t begin = blockIdx.x * per;
    return {begin, min(width, begin + per)};
}

template <int kPost>
__device__ void mix_partial(const float* x, const float* fn, int rows, int64_t width, int S,
                            double* part, const ops::HcPostArgs& pa) {
    __shared__ double red[kRowChunk + 1][kThreads / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int s = blockIdx.x;
    const int64_t t = blockIdx.y;
    const auto [begin, end] = mix_slice(width, S);
    const float* xt = x + t * width;
    double* out = part + (t * S + s) * (rows + 1);
    for (int k0 = 0; k0 < rows; k0 += kRowChunk) {
        const int nk = min(kRowChunk, rows - k0);
        double acc[kRowChunk];
#pragma unroll
        for (int r = 0; r < kRowChunk; ++r) acc[r] = 0;
        double ss = 0;
        for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
            // Rows past nk load row nk - 1 again (unconditional loads, issued together).
            float w[kRowChunk];
#pragma unroll
            for (int r = 0; r < kRowChunk; ++r)
                w[r] = __ldg(fn + static_cast<int64_t>(k0 + min(r, nk - 1)) * width + i);
            float xf;
            if constexpr (kPost != kNoPost)
                xf = k0 == 0 ? post_element<kPost>(pa, t, i) : xt[i];
            else
                xf = xt[i];
            const double v = xf;
            if (k0 == 0) ss = __fma_rn(v, v, ss);
#pragma unroll
            for (int r = 0; r < kRowChunk; ++r)
                if (r < nk) acc[r] = __fma_rn(static_cast<double>(w[r]), v, acc[r]);
        }
        // The warp's 25 sums by a reduce-scatter (31 exchanges, not 25 x 5): lane r ends with
        // row r's (lane kRowChunk: the squares').
        double v[32];
#pragma unroll
        for (int r = 0; r < 32; ++r) v[r] = r < kRowChunk ? acc[r] : r == kRowChunk ? ss : 0.0;
        dev::warp_reduce_scatter(v, lane);
        if (lane <= kRowChunk) red[lane][warp] = v[0];
        __syncthreads();
        if (threadIdx.x < nk || (k0 == 0 && threadIdx.x == kRowChunk)) {
            double sum = 0;
            for (int w = 0; w < nw; ++w) sum = __dadd_rn(sum, red[threadIdx.x][w]);
            out[threadIdx.x == kRowChunk ? rows : k0 + threadIdx.x] = sum;
        }
        __syncthreads();
    }
}

// mix[r] = (sum over splits of the row's partials) / rms for r < rows (block-wide call). The
// partials (written by other blocks: read through L2, __ldcg, never a stale L1 line) are staged
// into shared memory by the whole block kStage at a time, every thread's loads in flight
// together; then warp w sums rows w, w + 8, ...: lane l the splits l, l + 32, ... in order, then
// the warp's tree: a fixed order for a given S, whichever block finishes (not a chain of
// dependent L2 loads per summing thread).
constexpr int kStage = 2048;  // doubles
__device__ void finish_mix(const double* part, int S, int rows, int64_t width, float eps,
                           float* mix, double* tot) {
    __shared__ double stage[kStage];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int w = rows + 1, per = kStage / w;  // splits a round
    for (int s0 = 0; s0 < S; s0 += per) {
        const int ns = min(per, S - s0);
        __syncthreads();  // the previous round is summed
#pragma unroll 4
        for (int i = threadIdx.x; i < ns * w; i += blockDim.x) stage[i] = __ldcg(part + s0 * w + i);
        __syncthreads();
        for (int r = warp; r <= rows; r += nw) {
            double s = 0;
            for (int i = lane; i < ns; i += 32) s = __dadd_rn(s, stage[i * w + r]);
            s = dev::warp_sum(s);
            if (lane == 0) tot[r] = s0 == 0 ? s : __dadd_rn(tot[r], s);
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
//  - n*n <= 32 (V4: 16): warp 0 alone (sinkhorn_warp; the other warps return at once).
//  - larger: each phase reads one shared buffer and writes the other, one block barrier a phase.
__device__ int sinkhorn(float (*buf)[kMaxN * kMaxN], int n, int iters, float eps) {
    if (n * n <= 32) {
        if (threadIdx.x >= 32) return 0;  // (these threads hold no element)
        sinkhorn_warp_upto<5>(n, buf[0], iters, eps);
        return 0;
    }
    const int e = threadIdx.x, j = e / n, k = e % n;
    const bool active = e < n * n;
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

// y[d] = sum_i pre[i] * x[i*D + d], in i order (four dims a thread step when D allows). x is
// read through L2 (__ldcg) in the collapses: with a fused hc_post other blocks wrote it.
__device__ void collapse(const float* x, const float* pre, int n, int D, float* y) {
    if ((D & 3) == 0) {
        for (int d = threadIdx.x * 4; d < D; d += blockDim.x * 4) {
            float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
            for (int i = 0; i < n; ++i)
                add_scaled(s, pre[i],
                           __ldcg(reinterpret_cast<const float4*>(x + int64_t{i} * D + d)));
            *reinterpret_cast<float4*>(y + d) = s;
        }
        return;
    }
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float s = 0;
        for (int i = 0; i < n; ++i)
            s = __fadd_rn(s, __fmul_rn(pre[i], __ldcg(x + static_cast<int64_t>(i) * D + d)));
        y[d] = s;
    }
}

__device__ bool fits_regs(int D, int threads) {
    return (D & 3) == 0 && D / 4 <= kMaxVec * threads;
}
// The collapse and the fused RMSNorm with the row in registers, by the team: its thread r holds
// float4s r, r + size, ... (D % 4 == 0 and D <= 4 kMaxVec size: fits_regs). y as collapse(); the
// norm (when y_norm) is block_rms_norm_row's arithmetic on the same values, without reading y
// back. N > 0: the stream count at compile time (V4's 4), so the loads of a group of positions
// are issued together (a runtime loop of load, multiply, add waited on each load in turn); 0: n
// at run time. `red` is 32 doubles of shared memory.
template <int N>
__device__ void collapse_norm_regs(const Team& tm, const float* x, const float* pre, int n_rt,
                                   int D, float* y, const float* w, float* y_norm, float eps,
                                   double* red) {
    const int n = N > 0 ? N : n_rt;
    const unsigned rank = static_cast<unsigned>(tm.rank), size = static_cast<unsigned>(tm.size);
    const int nv = D / 4;
    float4 v[kMaxVec];
    // Four float4 positions at a time with all their stream loads issued before the arithmetic
    // (V4-Flash's D = 4096 on 224 or 256 threads is one such group: up to 20 loads in flight).
    constexpr int kGroup = 5;
    static_assert(kMaxVec % kGroup == 0, "whole groups");
#pragma unroll
    for (int c0 = 0; c0 < kMaxVec; c0 += kGroup) {
        if constexpr (N > 0) {
            if (static_cast<int>(rank + c0 * size) >= nv) {  // none in this group
#pragma unroll
                for (int c = c0; c < c0 + kGroup; ++c) v[c] = make_float4(0.f, 0.f, 0.f, 0.f);
                continue;
            }
            float4 xv[kGroup][N];
#pragma unroll
            for (int c = 0; c < kGroup; ++c) {
                const int q = rank + (c0 + c) * size;
                const float4* xq = reinterpret_cast<const float4*>(x) + (q < nv ? q : 0);
#pragma unroll
                for (int i = 0; i < N; ++i) xv[c][i] = __ldcg(xq + int64_t{i} * nv);
            }
#pragma unroll
            for (int c = 0; c < kGroup; ++c) {
                const int q = rank + (c0 + c) * size;
                float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
                if (q < nv) {
#pragma unroll
                    for (int i = 0; i < N; ++i) add_scaled(s, pre[i], xv[c][i]);
                    reinterpret_cast<float4*>(y)[q] = s;
                }
                v[c0 + c] = s;
            }
        } else {
#pragma unroll
            for (int c = c0; c < c0 + kGroup; ++c) {
                const int q = rank + c * size;
                float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
                if (q < nv) {
                    const float4* xq = reinterpret_cast<const float4*>(x) + q;
                    for (int i = 0; i < n; ++i) add_scaled(s, pre[i], __ldcg(xq + int64_t{i} * nv));
                    reinterpret_cast<float4*>(y)[q] = s;
                }
                v[c] = s;
            }
        }
    }
    if (y_norm == nullptr) return;
    double ss = 0;
#pragma unroll
    for (int c = 0; c < kMaxVec; ++c) ss = dev::add_squares(ss, v[c]);  // (zeros past the row)
    const float inv =
        dev::rms_inv(dev::group_sum(ss, red, tm.rank, tm.size, [&] { tm.sync(); }), D, eps);
#pragma unroll
    for (int c = 0; c < kMaxVec; ++c) {
        const int q = rank + c * size;
        if (q >= nv) continue;
        reinterpret_cast<float4*>(y_norm)[q] = dev::rms_scale(
            v[c], inv, w != nullptr ? reinterpret_cast<const float4*>(w) + q : nullptr);
    }
}

// collapse_norm_regs by the team, N = 4 (V4) at compile time.
__device__ void collapse_regs(const Team& tm, const float* x, const float* pre, int n, int D,
                              float* y, const float* w, float* y_norm, float eps, double* red) {
    if (n == 4)
        collapse_norm_regs<4>(tm, x, pre, n, D, y, w, y_norm, eps, red);
    else
        collapse_norm_regs<0>(tm, x, pre, n, D, y, w, y_norm, eps, red);
}

// The collapse (+ norm) by the fastest path that applies.
__device__ void collapse_any(const float* x, const float* pre, int n, int D, float* y,
                             const float* w, float* y_norm, float eps, double* red) {
    if (fits_regs(D, blockDim.x)) {
        collapse_regs(Team::block(), x, pre, n, D, y, w, y_norm, eps, red);
        return;
    }
    collapse(x, pre, n, D, y);
    if (y_norm != nullptr) {
        // The fused RMSNorm (rms_norm_kernel's arithmetic) on y as this block just wrote it
        // (the block barrier makes the writes visible to the block).
        __syncthreads();
        dev::block_rms_norm_row(y, w, y_norm, D, eps, red);
    }
}

// The L2 lines of this block's slice of the mixing rows (mix_slice, as mix_partial reads them),
// one request a thread. The weights depend on no earlier grid: requested before the
// programmatic-launch wait, they arrive while the previous kernel still runs, and the loads
// after the wait hit L2 instead of DRAM.
__device__ void prefetch_mixing(const float* fn, int rows, int64_t width, int S) {
    const auto [begin, end] = mix_slice(width, S);
    constexpr int kLine = 32;  // floats
    const int64_t lines = (end - begin + kLine - 1) / kLine;
    for (int64_t i = threadIdx.x; i < rows * lines; i += blockDim.x) {
        const int64_t r = i / lines;
        ptx::prefetch_l2(fn + r * width + begin + (i - r * lines) * kLine);
    }
}

template <int kPost>
__global__ void __launch_bounds__(kThreads)
    hc_pre_kernel(ops::HcPreArgs a, ops::HcPostArgs pa, double* part, unsigned* arrivals, int S,
                  bool sinkhorn_apart) {
    prefetch_mixing(a.fn, (2 + a.n) * a.n, int64_t{a.n} * a.D, S);
    dev::pdl_enter();
    __shared__ double tot[kMaxMix + 1];
    __shared__ float mix[kMaxMix];
    __shared__ float pre[kMaxN];
    __shared__ float C[2][kMaxN * kMaxN];
    const int n = a.n, rows = (2 + n) * n;
    const int64_t t = blockIdx.y;
    const int64_t width = static_cast<int64_t>(n) * a.D;
    // (With the fused post, every block reads the old post and comb before its arrival is
    // counted, so the last block may overwrite them.)
    mix_partial<kPost>(a.x, a.fn, rows, width, S, part, pa);
    if (!dev::last_to_arrive(arrivals, S)) return;
    finish_mix(part + t * S * (rows + 1), S, rows, width, a.norm_eps, mix, tot);
    // Gates by thread i, the mixing logits by thread jk, then Sinkhorn.
    if (threadIdx.x < n) {
        const int i = threadIdx.x;
        pre[i] = pre_gate(mix[i], a.scale[0], a.base[i], a.hc_eps);
        a.post[t * n + i] = __fmul_rn(
            2.0f, sigmoidf_ref(__fadd_rn(__fmul_rn(mix[n + i], a.scale[1]), a.base[n + i])));
    }
    if (threadIdx.x < n * n) {
        const int jk = threadIdx.x;
        C[0][jk] = __fadd_rn(__fmul_rn(mix[2 * n + jk], a.scale[2]), a.base[2 * n + jk]);
    }
    __syncthreads();
    float* y_norm = a.y_norm != nullptr ? a.y_norm + t * a.D : nullptr;
    if (sinkhorn_apart && n * n <= 32 && fits_regs(a.D, blockDim.x - 32)) {
        // Warp 0 runs the one-warp Sinkhorn while warps 1.. collapse and norm on their own
        // barrier: neither waits for the other (comb is read by the next hc_post only).
        if (threadIdx.x < 32) {
            sinkhorn_warp_upto<5>(n, C[0], a.sinkhorn_iters, a.hc_eps);
            if (threadIdx.x < n * n) a.comb[t * n * n + threadIdx.x] = C[0][threadIdx.x];
            return;
        }
        collapse_regs(Team::after_warp0(), a.x + t * width, pre, n, a.D, a.y + t * a.D,
                      a.norm_weight, y_norm, a.y_norm_eps, tot);
        return;
    }
    const int b = sinkhorn(C, n, a.sinkhorn_iters, a.hc_eps);
    if (threadIdx.x < n * n) a.comb[t * n * n + threadIdx.x] = C[b][threadIdx.x];
    collapse_any(a.x + t * width, pre, n, a.D, a.y + t * a.D, a.norm_weight, y_norm, a.y_norm_eps,
                 tot);
}

__global__ void __launch_bounds__(kThreads)
    hc_head_kernel(ops::HcHeadArgs a, double* part, unsigned* arrivals, int S) {
    dev::pdl_enter();
    __shared__ double tot[kMaxN + 1];
    __shared__ float mix[kMaxN];
    __shared__ float pre[kMaxN];
    const int n = a.n;
    const int64_t t = blockIdx.y;
    const int64_t width = static_cast<int64_t>(n) * a.D;
    mix_partial<kNoPost>(a.x, a.fn, n, width, S, part, ops::HcPostArgs{});
    if (!dev::last_to_arrive(arrivals, S)) return;
    finish_mix(part + t * S * (n + 1), S, n, width, a.norm_eps, mix, tot);
    if (threadIdx.x < n) {
        const int i = threadIdx.x;
        pre[i] = pre_gate(mix[i], a.scale[0], a.base[i], a.hc_eps);
    }
    __syncthreads();
    collapse_any(a.x + t * width, pre, n, a.D, a.out + t * a.D, nullptr, nullptr, 0.0f, tot);
}

// One thread per (token, d): out[k][d] for every k, by post_element (the fused hc_pre's
// arithmetic, so the two give the same streams bit for bit). N: as post_element's.
template <int N>
__global__ void hc_post_kernel(ops::HcPostArgs a) {
    dev::pdl_enter();
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= a.T * a.D) return;
    const int n = N > 0 ? N : a.n;
    const int64_t t = idx / a.D, d = idx % a.D;
    for (int k = 0; k < n; ++k) post_element<N>(a, t, k * a.D + d);
}

// Splits of the width: ~2 blocks per SM over the step's tokens, each slice >= kMinSliceWidth.
int mix_splits(int64_t T, int64_t width, int sm_count) {
    const int64_t by_width = std::max<int64_t>(1, width / kMinSliceWidth);
    const int64_t by_grid = (2 * int64_t{sm_count} + T - 1) / T;
    return static_cast<int>(std::max<int64_t>(1, std::min(by_width, by_grid)));
}

// The split count S of a launch, checked against the scratch.
int splits_for(int rows, int64_t T, int64_t width, const HcScratch& ws) {
    const int S = mix_splits(T, width, ws.sm_count);
    DSV4_ASSERT(T * S * (rows + 1) <= ws.doubles, "hc scratch of ", ws.doubles, " doubles for ", T,
                " tokens x ", S, " splits x ", rows + 1);
    DSV4_ASSERT(T <= ws.max_tokens && T <= 65535, "hc: ", T, " tokens in one launch (scratch for ",
                ws.max_tokens, ")");
    return S;
}

}  // namespace

int64_t hc_scratch_doubles(int64_t max_tokens, int n, int sm_count) {
    // T * S <= T + 2 * sm_count (mix_splits), times the widest row count plus the squares.
    return (max_tokens + 2 * int64_t{sm_count}) * ((2 + n) * n + 1);
}

void launch_hc_pre(const ops::HcPreArgs& a, const HcScratch& ws, cudaStream_t stream,
                   bool clusters) {
    DSV4_ASSERT(a.n >= 1 && a.n <= kMaxN, "hc_pre: n = ", a.n, " (at most ", kMaxN, ")");
    if (a.T == 0) return;
    const ops::HcPostArgs* p = a.post_in;
    if (p != nullptr)
        DSV4_ASSERT(p->out == a.x && p->n == a.n && p->D == a.D && p->T == a.T && !p->round_bf16,
                    "hc_pre: the fused hc_post must write x, with its shape (no bf16 rounding)");
    if (clusters && hc_pre_cluster_fits(a)) {
        launch_hc_pre_cluster(a, stream);
        return;
    }
    const int rows = (2 + a.n) * a.n;
    const int S = splits_for(rows, a.T, int64_t{a.n} * a.D, ws);
    auto* kernel = p == nullptr ? hc_pre_kernel<kNoPost>
                   : a.n == 4   ? hc_pre_kernel<4>
                                : hc_pre_kernel<0>;
    // The Sinkhorn apart only while the grid is one block an SM (a decode token; measured
    // there: docs/perf.md, session 15).
    const bool sinkhorn_apart = S * a.T <= ws.sm_count;
    launch_pdl(kernel, dim3(static_cast<unsigned>(S), static_cast<unsigned>(a.T)), kThreads, 0,
               stream, 1, a, p != nullptr ? *p : ops::HcPostArgs{}, ws.part, ws.arrivals, S,
               sinkhorn_apart);
}

void launch_hc_head(const ops::HcHeadArgs& a, const HcScratch& ws, cudaStream_t stream) {
    DSV4_ASSERT(a.n >= 1 && a.n <= kMaxN, "hc_head: n = ", a.n, " (at most ", kMaxN, ")");
    if (a.T == 0) return;
    const int S = splits_for(a.n, a.T, int64_t{a.n} * a.D, ws);
    launch_pdl(hc_head_kernel, dim3(static_cast<unsigned>(S), static_cast<unsigned>(a.T)), kThreads,
               0, stream, 1, a, ws.part, ws.arrivals, S);
}

void launch_hc_post(const ops::HcPostArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.n >= 1 && a.n <= kMaxN, "hc_post: n = ", a.n);
    const int64_t n = a.T * a.D;
    if (n == 0) return;
    constexpr int kThreads = 256;
    const unsigned blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
    launch_pdl(a.n == 4 ? hc_post_kernel<4> : hc_post_kernel<0>, blocks, kThreads, 0, stream, 1, a);
}

}  // namespace dsv4::cuda
