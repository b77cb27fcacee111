// hc_pre for decode (hyper_conn.h: launch_hc_pre's decode path): one thread-block cluster a
// token. The numerics are the split kernel's (hyper_conn_sm90.cu; docs/numerics-cuda.md).
//
// The split kernel (hyper_conn_sm90.cu) meets its blocks through global memory: partials written, a
// fence, an arrival counter, the last block reading every partial back and then the new streams
// that the other blocks wrote (three dependent L2 round trips after the product; ~8 of its ~10.6 us
// a call at one token: docs/perf.md, session 15). Here the kCluster blocks of a token form a
// thread-block cluster and meet in distributed shared memory:
//  - before the programmatic-launch wait each block copies its slice of the 24 mixing rows into
//    shared memory (cp.async: they depend on no earlier grid), so the product after the wait
//    reads no global weights;
//  - the gates' base and scale and the fused norm's weights (of the block's columns) are read
//    before the wait too, so nothing after it waits on a global load but the streams;
//  - block b owns float4 columns [b nq, (b + 1) nq) of every stream: it computes those columns
//    of the (fused hc_post's) streams, keeps them in shared memory, and its partial dots and
//    squares go to every block of the cluster (25 remote stores a block); every block then sums
//    the kCluster partials in rank order (the same bits everywhere) and finishes the gates
//    itself;
//  - each block collapses its own columns from shared memory (no re-read of other blocks'
//    streams), warps 1.. of every block, while warp 0 of block 0 runs the Sinkhorn (comb is
//    read by the next hc_post only);
//  - the fused RMSNorm's sum of squares goes round the cluster the same way, and each block
//    scales its own columns.
// The remote stores are st.async, each counted in bytes by an mbarrier of the receiving block,
// which waits for exactly its kCluster contributions. A cluster barrier would do instead, but
// its arrive's release fence waits for every earlier global store of the block (the new
// streams, y) to complete: Nsight Compute put ~14% of the kernel's stall samples on the two
// (docs/perf.md, session 34). The one cluster barrier left, at the start, makes sure every
// block of the cluster runs (and its mbarriers are initialised) before anyone stores into it;
// no block leaves before its own mbarriers have counted every store into it.
// V4's four streams only (n = 4 at compile time), D % 4 == 0, up to kClusterMaxTokens tokens
// (a cluster a token); anything else takes the split kernel.
#include <cooperative_groups.h>

#include <cstdint>
#include <cuda/ptx>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/common/ptx_sm90.cuh"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/hyper_conn/hyper_conn.h"
#include "backend/cuda/kernels/hyper_conn/hyper_conn_math_sm90.cuh"

namespace dsv4::cuda {
namespace {

namespace cg = cooperative_groups;
using hc::add_scaled;
using hc::pre_gate;
using hc::sigmoidf_ref;
using hc::Team;

// 128 threads: the kernel is a chain of round trips, not throughput, and the smaller blocks add
// ~0.8 us less a launch in the decode step than 256 (session 38; V4-Pro's D = 7168 is 112
// columns a block, under kCMaxCols).
constexpr int kThreads = 128;
constexpr int kCluster = 16;             // blocks a token (a non-portable cluster size)
constexpr int kCN = 4;                   // streams
constexpr int kCRows = (2 + kCN) * kCN;  // mixing rows (24)
constexpr int kCTeam = kThreads - 32;    // the collapsing threads (warps 1..)
constexpr int kCMaxCols = 2 * kCTeam;    // float4 columns a block: two a collapsing thread
constexpr int kClusterMaxTokens = 32;
constexpr size_t kClusterMaxSmem = 200 * 1024;  // (the H200 allows 227 KB a block)

// Float4 columns a block owns for a row of D floats.
__host__ __device__ inline int cluster_cols(int D) {
    return (D / 4 + kCluster - 1) / kCluster;
}
// Dynamic shared memory: the block's weights [kCRows][kCN][nq] and streams [kCN][nq], float4s.
inline size_t cluster_smem(int D) {
    return static_cast<size_t>(cluster_cols(D)) * kCN * (kCRows + 1) * sizeof(float4);
}

__device__ __forceinline__ void fma4(double& acc, const float4& w, const float4& x) {
    acc = __fma_rn(static_cast<double>(w.x), static_cast<double>(x.x), acc);
    acc = __fma_rn(static_cast<double>(w.y), static_cast<double>(x.y), acc);
    acc = __fma_rn(static_cast<double>(w.z), static_cast<double>(x.z), acc);
    acc = __fma_rn(static_cast<double>(w.w), static_cast<double>(x.w), acc);
}

// post_element's arithmetic for four consecutive elements (k, 4 q .. 4 q + 3) of token t.
__device__ __forceinline__ float4 post_float4(const ops::HcPostArgs& pa, int64_t t, int k, int q) {
    const int64_t nv = pa.D / 4;
    const float4* x = reinterpret_cast<const float4*>(pa.x) + t * kCN * nv + q;
    float4 xv[kCN];
    float cv[kCN];
#pragma unroll
    for (int j = 0; j < kCN; ++j) {
        xv[j] = x[j * nv];
        cv[j] = pa.comb[t * kCN * kCN + j * kCN + k];
    }
    const float p = pa.post[t * kCN + k];
    const float4 f = reinterpret_cast<const float4*>(pa.f)[t * nv + q];
    float4 s =
        make_float4(__fmul_rn(p, f.x), __fmul_rn(p, f.y), __fmul_rn(p, f.z), __fmul_rn(p, f.w));
#pragma unroll
    for (int j = 0; j < kCN; ++j) add_scaled(s, cv[j], xv[j]);
    return s;
}

__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// Stores v into block b's copy of *dst (this block's shared-memory address of the same
// variable), counted by block b's mbarrier `bar` (likewise).
__device__ __forceinline__ void store_to_block(cg::cluster_group& cluster, double* dst, double v,
                                               uint64_t* bar, int b) {
    ::cuda::ptx::st_async(cluster.map_shared_rank(dst, b), v, cluster.map_shared_rank(bar, b));
}

// Waits until the block's mbarrier has counted every byte it expects (its one phase a launch);
// the stores it counted are then visible to the calling thread.
__device__ __forceinline__ void wait_stores(uint64_t* bar) {
    while (!::cuda::ptx::mbarrier_try_wait_parity(::cuda::ptx::sem_acquire,
                                                  ::cuda::ptx::scope_cluster, bar, 0u)) {
    }
}

template <bool kPost>
__global__ void __launch_bounds__(kThreads)
    hc_pre_cluster_kernel(ops::HcPreArgs a, ops::HcPostArgs pa) {
    extern __shared__ float4 cs4[];
    __shared__ double red[kCRows + 1][kThreads / 32];
    __shared__ double cpart[kCluster][kCRows + 1];  // written by every block of the cluster
    __shared__ double cnorm[kCluster];              // likewise: the norm's sums of squares
    __shared__ double tot[kCRows + 1];
    __shared__ double team_red[32];
    __shared__ uint64_t got_part;  // mbarriers: every block's partials (cpart) have arrived,
    __shared__ uint64_t got_norm;  // and every block's sum of squares (cnorm)
    __shared__ float base[kCRows], scale[3];
    __shared__ float mix[kCRows];
    __shared__ float pre[kCN];
    __shared__ float C[kCN * kCN];
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = static_cast<int>(cluster.block_rank());
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t t = blockIdx.y;
    const int D = a.D, nv = D / 4, nq = cluster_cols(D);
    const int q0 = rank * nq, nqb = max(0, min(nq, nv - q0));  // this block's columns
    const int items = kCN * nqb;                               // (stream, column) float4s
    const int64_t width4 = int64_t{kCN} * nv;
    float4* ws = cs4;                      // [kCRows][kCN * nq]
    float4* xs = cs4 + kCRows * kCN * nq;  // [kCN * nq]

    const bool norm = a.y_norm != nullptr;
    if (threadIdx.x == 0) {
        // One phase a launch: it completes when the bytes of every block's stores have landed.
        ::cuda::ptx::mbarrier_init(&got_part, 1);
        ::cuda::ptx::mbarrier_init(&got_norm, 1);
        ::cuda::ptx::fence_mbarrier_init(::cuda::ptx::sem_release, ::cuda::ptx::scope_cluster);
        ::cuda::ptx::mbarrier_arrive_expect_tx(
            ::cuda::ptx::sem_release, ::cuda::ptx::scope_cta, ::cuda::ptx::space_shared, &got_part,
            static_cast<uint32_t>(kCluster * (kCRows + 1) * sizeof(double)));
        if (norm)
            ::cuda::ptx::mbarrier_arrive_expect_tx(
                ::cuda::ptx::sem_release, ::cuda::ptx::scope_cta, ::cuda::ptx::space_shared,
                &got_norm, static_cast<uint32_t>(kCluster * sizeof(double)));
    }
    // (The blocks of a cluster must all have started, their mbarriers initialised, before one
    // writes another's shared memory: arrive now, wait before the first remote store.)
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    // Weights, which no earlier grid writes: the gates' base and scale, and (warps 1..) the
    // fused norm's weights of the columns this thread will scale.
    if (threadIdx.x < kCRows) base[threadIdx.x] = a.base[threadIdx.x];
    if (threadIdx.x < 3) scale[threadIdx.x] = a.scale[threadIdx.x];
    float4 nw[2] = {make_float4(1.f, 1.f, 1.f, 1.f), make_float4(1.f, 1.f, 1.f, 1.f)};
    if (norm && a.norm_weight != nullptr && warp > 0)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int c = static_cast<int>(threadIdx.x) - 32 + u * kCTeam;
            if (c < nqb) nw[u] = reinterpret_cast<const float4*>(a.norm_weight)[q0 + c];
        }
    // The weights of this block's items, each thread copying those of the items it will use.
    const float4* fn4 = reinterpret_cast<const float4*>(a.fn);
    for (int i = threadIdx.x; i < items; i += kThreads) {
        const int k = i / nqb, c = i - k * nqb;
#pragma unroll 4
        for (int r = 0; r < kCRows; ++r)
            ptx::cp_async_16(ptx::smem_addr(ws + r * kCN * nq + k * nq + c),
                             fn4 + r * width4 + int64_t{k} * nv + q0 + c);
    }
    ptx::cp_async_commit();
    dev::pdl_enter();
    ptx::cp_async_wait<0>();

    // The product over this block's items: the streams (fused post: computed and written).
    double acc[kCRows];
#pragma unroll
    for (int r = 0; r < kCRows; ++r) acc[r] = 0;
    double ss = 0;
    for (int i = threadIdx.x; i < items; i += kThreads) {
        const int k = i / nqb, c = i - k * nqb;
        float4 v;
        if constexpr (kPost) {
            v = post_float4(pa, t, k, q0 + c);
            reinterpret_cast<float4*>(pa.out)[t * width4 + int64_t{k} * nv + q0 + c] = v;
        } else {
            v = reinterpret_cast<const float4*>(a.x)[t * width4 + int64_t{k} * nv + q0 + c];
        }
        xs[k * nq + c] = v;
        ss = dev::add_squares(ss, v);
#pragma unroll
        for (int r = 0; r < kCRows; ++r) fma4(acc[r], ws[r * kCN * nq + k * nq + c], v);
    }
    {
        double v[32];
#pragma unroll
        for (int r = 0; r < 32; ++r) v[r] = r < kCRows ? acc[r] : r == kCRows ? ss : 0.0;
        dev::warp_reduce_scatter(v, lane);
        if (lane <= kCRows) red[lane][warp] = v[0];
    }
    __syncthreads();
    cluster_wait();               // every block of the cluster has started
    if (threadIdx.x <= kCRows) {  // the block's partial, to every block of the cluster
        double sum = 0;
        for (int w = 0; w < kThreads / 32; ++w) sum = __dadd_rn(sum, red[threadIdx.x][w]);
        for (int b = 0; b < kCluster; ++b)
            store_to_block(cluster, &cpart[rank][threadIdx.x], sum, &got_part, b);
        // Every partial is here; block 0 overwrites post and comb only past this point, when
        // every block has sent its partial and so has read the old ones.
        wait_stores(&got_part);
        double s = 0;
        for (int b = 0; b < kCluster; ++b) s = __dadd_rn(s, cpart[b][threadIdx.x]);
        tot[threadIdx.x] = s;
    }
    __syncthreads();
    if (threadIdx.x < kCRows) {
        const double inv = 1.0 / sqrt(tot[kCRows] / static_cast<double>(kCN * D) + a.norm_eps);
        mix[threadIdx.x] = static_cast<float>(tot[threadIdx.x] * inv);
    }
    __syncthreads();
    if (threadIdx.x < kCN) {
        const int i = threadIdx.x;
        pre[i] = pre_gate(mix[i], scale[0], base[i], a.hc_eps);
        if (rank == 0)
            a.post[t * kCN + i] = __fmul_rn(
                2.0f, sigmoidf_ref(__fadd_rn(__fmul_rn(mix[kCN + i], scale[1]), base[kCN + i])));
    }
    if (threadIdx.x < kCN * kCN) {
        const int jk = threadIdx.x;
        C[jk] = __fadd_rn(__fmul_rn(mix[2 * kCN + jk], scale[2]), base[2 * kCN + jk]);
    }
    __syncthreads();

    if (warp == 0) {  // (nothing of the Sinkhorn is needed by the other blocks)
        if (rank == 0) {
            hc::sinkhorn_warp<kCN>(C, a.sinkhorn_iters, a.hc_eps);
            if (lane < kCN * kCN) a.comb[t * kCN * kCN + lane] = C[lane];
        }
        return;
    }
    // The collapse of this block's columns by warps 1..: y = sum_i pre[i] x_i in i order.
    const Team tm = Team::after_warp0();
    float4 v[2];
    double sy = 0;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const int c = tm.rank + u * kCTeam;
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
        if (c < nqb) {
#pragma unroll
            for (int i = 0; i < kCN; ++i) add_scaled(s, pre[i], xs[i * nq + c]);
            reinterpret_cast<float4*>(a.y)[t * nv + q0 + c] = s;
        }
        v[u] = s;
        sy = dev::add_squares(sy, s);  // (zeros past the block's columns)
    }
    if (!norm) return;
    const double block_sy = dev::group_sum(sy, team_red, tm.rank, tm.size, [&] { tm.sync(); });
    if (tm.rank < kCluster) store_to_block(cluster, &cnorm[rank], block_sy, &got_norm, tm.rank);
    wait_stores(&got_norm);
    double all = 0;
    for (int b = 0; b < kCluster; ++b) all = __dadd_rn(all, cnorm[b]);
    const float inv = dev::rms_inv(all, D, a.y_norm_eps);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
        const int c = tm.rank + u * kCTeam;
        if (c >= nqb) continue;
        const int q = q0 + c;
        reinterpret_cast<float4*>(a.y_norm)[t * nv + q] =
            dev::rms_scale(v[u], inv, a.norm_weight != nullptr ? &nw[u] : nullptr);
    }
}

bool aligned16(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

}  // namespace

bool hc_pre_cluster_fits(const ops::HcPreArgs& a) {
    const ops::HcPostArgs* p = a.post_in;
    return a.n == kCN && a.D % 4 == 0 && a.T <= kClusterMaxTokens &&
           cluster_cols(a.D) <= kCMaxCols && cluster_smem(a.D) <= kClusterMaxSmem &&
           aligned16(a.x) && aligned16(a.fn) && aligned16(a.y) && aligned16(a.y_norm) &&
           aligned16(a.norm_weight) && (p == nullptr || (aligned16(p->f) && aligned16(p->x)));
}

void launch_hc_pre_cluster(const ops::HcPreArgs& a, cudaStream_t stream) {
    // The attributes are host-side settings (not stream operations): allowed during capture.
    static PerDeviceOnce set_attributes;
    DSV4_CHECK_CUDA(set_attributes([] {
        cudaError_t e = cudaSuccess;
        for (auto* k : {hc_pre_cluster_kernel<false>, hc_pre_cluster_kernel<true>}) {
            if (e == cudaSuccess)
                e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kClusterMaxSmem));
            if (e == cudaSuccess)
                e = cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        }
        return e;
    }));
    const ops::HcPostArgs* p = a.post_in;
    launch_pdl(p != nullptr ? hc_pre_cluster_kernel<true> : hc_pre_cluster_kernel<false>,
               dim3(kCluster, static_cast<unsigned>(a.T)), kThreads, cluster_smem(a.D), stream,
               kCluster, a, p != nullptr ? *p : ops::HcPostArgs{});
}

}  // namespace dsv4::cuda
