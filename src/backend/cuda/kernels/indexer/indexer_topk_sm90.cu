// Indexer top-k (indexer_topk.h): a cluster of kCluster (16) blocks per token. Scores are computed
// exactly as the reference does (backend/cpu/ref/indexer.cc): each q_h . key dot in double with
// the same four interleaved partial sums and the same final pairing, then s += w_h * max(d, 0)
// in head order, every step an explicitly rounded double operation (no FMA contraction; the CPU
// build does not contract either), so the float scores are bitwise those of the CPU and the
// selection matches exactly, ties included. Each block of the cluster scores a contiguous
// slice of the token's valid entries (keys staged through shared memory a tile at a time,
// rows padded so that the 32 lanes of a warp, 32 entries of one head, hit 32 banks); block 0
// then gathers every slice's scores through distributed shared memory and selects: the
// keep = min(K, valid) largest scores with ties to the lower index (a bitwise threshold search
// over order-preserving keys, then a scan in index order that also yields the output sorted by
// entry index), padded with -1. (One block per token scored 2048 entries x 64 heads alone on
// one SM: 8.9 ms a call at V4-Flash's 8K context.)
#include <cooperative_groups.h>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/indexer/indexer_topk.h"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 512;
// Blocks per token: 16, a non-portable cluster size (allowed by an attribute at the first
// launch): the scores are FP64 (bitwise the reference's), so the more SMs the better.
constexpr int kCluster = 16;
constexpr int kKeyTile = 32;             // entries staged per round: one per lane
constexpr size_t kMaxSmem = 227 * 1024;  // H100/H200 opt-in per block

// Shared memory: the dots of a tile [kKeyTile][Hi + 1] (double, first for alignment), the queries
// [Hi][hi + 1], the weights [Hi], a key tile [kKeyTile][hi + 1], then the scores [n_entries].
size_t fixed_bytes(int Hi, int hi) {
    return static_cast<size_t>(kKeyTile) * (Hi + 1) * sizeof(double) +
           (static_cast<size_t>(Hi) * (hi + 1) + Hi + static_cast<size_t>(kKeyTile) * (hi + 1)) *
               sizeof(float);
}

// The reference's dot (cpu_ref::dot): four interleaved double partial sums, (s0+s1)+(s2+s3).
__device__ __forceinline__ double dot_ref(const float* a, const float* b, int n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 = __dadd_rn(s0, __dmul_rn(a[i], b[i]));
        s1 = __dadd_rn(s1, __dmul_rn(a[i + 1], b[i + 1]));
        s2 = __dadd_rn(s2, __dmul_rn(a[i + 2], b[i + 2]));
        s3 = __dadd_rn(s3, __dmul_rn(a[i + 3], b[i + 3]));
    }
    for (; i < n; ++i) s0 = __dadd_rn(s0, __dmul_rn(a[i], b[i]));
    return __dadd_rn(__dadd_rn(s0, s1), __dadd_rn(s2, s3));
}

__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads)
    indexer_topk_kernel(ops::IndexerTopkArgs a) {
    extern __shared__ double dyn[];
    __shared__ int red[32];
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = static_cast<int>(cluster.block_rank());
    const ops::StepDesc& st = a.step;
    const int64_t t = blockIdx.x / kCluster;
    const int64_t valid = (st.tok_pos[t] + 1) / a.m;
    const float* keys = a.keys + st.row_slot[st.tok_row[t]] * a.n_entries * a.hi;
    const int Hi = a.Hi, hi = a.hi, ld = hi + 1;
    const int ldd = Hi + 1;                                       // (rows padded: banks)
    double* d_s = dyn;                                            // [kKeyTile][ldd]
    float* q_s = reinterpret_cast<float*>(d_s + kKeyTile * ldd);  // [Hi][ld]
    float* w_s = q_s + static_cast<int64_t>(Hi) * ld;             // [Hi]
    float* k_s = w_s + Hi;                                        // [kKeyTile][ld]
    float* score = k_s + kKeyTile * ld;                           // [n_entries]
    for (int i = threadIdx.x; i < Hi * hi; i += blockDim.x)
        q_s[(i / hi) * ld + i % hi] = a.q[t * Hi * hi + i];
    for (int i = threadIdx.x; i < Hi; i += blockDim.x) w_s[i] = a.w[t * Hi + i];
    // This block's slice of the entries.
    const int64_t per = (valid + kCluster - 1) / kCluster;
    const int64_t e_begin = rank * per, e_end = valid < e_begin + per ? valid : e_begin + per;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int64_t e0 = e_begin; e0 < e_end; e0 += kKeyTile) {
        const int n = static_cast<int>(e_end - e0 < kKeyTile ? e_end - e0 : kKeyTile);
        __syncthreads();  // the previous tile's keys and dots are consumed
        for (int i = threadIdx.x; i < n * hi; i += blockDim.x)
            k_s[(i / hi) * ld + i % hi] = keys[(e0 + i / hi) * hi + i % hi];
        __syncthreads();
        if (lane < n)
            for (int h = warp; h < Hi; h += warps)
                d_s[lane * ldd + h] = dot_ref(q_s + h * ld, k_s + lane * ld, hi);
        __syncthreads();
        if (threadIdx.x < n) {
            double s = 0;
            for (int h = 0; h < Hi; ++h) {
                const double d = d_s[threadIdx.x * ldd + h];
                s = __dadd_rn(s, __dmul_rn(static_cast<double>(w_s[h]), d < 0.0 ? 0.0 : d));
            }
            score[e0 + threadIdx.x] = static_cast<float>(s);
        }
    }
    cluster.sync();  // every slice scored
    if (rank == 0) {
        for (int r = 1; r < kCluster; ++r) {
            const float* remote = cluster.map_shared_rank(score, r);
            const int64_t b = r * per, e = valid < b + per ? valid : b + per;
            for (int64_t i = b + threadIdx.x; i < e; i += blockDim.x) score[i] = remote[i];
        }
    }
    cluster.sync();  // the other blocks' scores are read: they may exit
    if (rank != 0) return;
    const int64_t keep = a.K < valid ? a.K : valid;
    int32_t* out = a.topk + t * a.K;
    if (keep > 0) {
        auto key = [&](int64_t i) { return dev::order_key(score[i]); };
        int64_t above = 0;
        const uint32_t thr = dev::block_topk_threshold(key, valid, keep, red, &above);
        dev::block_topk_collect(key, valid, thr, above, keep, red, [&](int64_t i, int64_t rank_i) {
            out[rank_i] = static_cast<int32_t>(i);
        });
    }
    for (int64_t j = keep + threadIdx.x; j < a.K; j += blockDim.x) out[j] = -1;
}

size_t smem_bytes(int Hi, int hi, int64_t n_entries) {
    return fixed_bytes(Hi, hi) + static_cast<size_t>(n_entries) * sizeof(float);
}

}  // namespace

int64_t indexer_max_entries(int Hi, int hi) {
    // The static shared memory (reduction scratch) comes out of the same budget.
    return (static_cast<int64_t>(kMaxSmem) - static_cast<int64_t>(fixed_bytes(Hi, hi))) /
               static_cast<int64_t>(sizeof(float)) -
           64;
}

void launch_indexer_topk(const ops::IndexerTopkArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.n_entries <= indexer_max_entries(a.Hi, a.hi), "indexer_topk: ", a.n_entries,
                " entries per slot; the CUDA kernel holds at most ",
                indexer_max_entries(a.Hi, a.hi), " scores in shared memory");
    DSV4_ASSERT(a.m >= 1 && a.K >= 0, "indexer_topk: m ", a.m, " K ", a.K);
    if (a.step.T == 0) return;
    static const cudaError_t attr = [] {
        const cudaError_t e =
            cudaFuncSetAttribute(indexer_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(kMaxSmem - 32 * sizeof(int)));
        if (e != cudaSuccess) return e;
        return cudaFuncSetAttribute(indexer_topk_kernel,
                                    cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    }();
    DSV4_CHECK_CUDA(attr);
    // (Compile-time cluster dims: the grid is a whole number of clusters.)
    indexer_topk_kernel<<<static_cast<unsigned>(a.step.T * kCluster), kThreads,
                          smem_bytes(a.Hi, a.hi, a.n_entries), stream>>>(a);
    DSV4_CHECK_LAUNCH(stream);
}

}  // namespace dsv4::cuda
