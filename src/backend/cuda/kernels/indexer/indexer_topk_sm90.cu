// Indexer top-k (indexer_topk.h): one block per token. Scores are computed exactly as the
// reference does (backend/cpu/ref/indexer.cc): each q_h . key dot in double with the same four
// interleaved partial sums and the same final pairing, then s += w_h * max(d, 0) in head order,
// every step an explicitly rounded double operation (no FMA contraction; the CPU build does not
// contract either), so the float scores are bitwise those of the CPU and the selection matches
// exactly, ties included. Selection: the keep = min(K, valid) largest scores with ties to the
// lower index (a bitwise threshold search over order-preserving keys, then a scan in index
// order that also yields the output sorted by entry index), padded with -1.
#include "backend/cuda/common/check.cuh"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/indexer/indexer_topk.h"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 512;
constexpr size_t kMaxSmem = 227 * 1024;  // H100/H200 opt-in per block

size_t fixed_floats(int Hi, int hi) {
    return static_cast<size_t>(Hi) * hi + Hi;
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

__global__ void __launch_bounds__(kThreads) indexer_topk_kernel(ops::IndexerTopkArgs a) {
    extern __shared__ float smem[];
    __shared__ int red[32];
    const ops::StepDesc& st = a.step;
    const int64_t t = blockIdx.x;
    const int64_t valid = (st.tok_pos[t] + 1) / a.m;
    const float* keys = a.keys + st.row_slot[st.tok_row[t]] * a.n_entries * a.hi;
    float* q_s = smem;                                // [Hi][hi]
    float* w_s = q_s + static_cast<int64_t>(a.Hi) * a.hi;  // [Hi]
    float* score = w_s + a.Hi;                        // [valid]
    for (int i = threadIdx.x; i < a.Hi * a.hi; i += blockDim.x)
        q_s[i] = a.q[t * a.Hi * a.hi + i];
    for (int i = threadIdx.x; i < a.Hi; i += blockDim.x) w_s[i] = a.w[t * a.Hi + i];
    __syncthreads();
    for (int64_t e = threadIdx.x; e < valid; e += blockDim.x) {
        double s = 0;
        for (int h = 0; h < a.Hi; ++h) {
            const double d = dot_ref(q_s + h * a.hi, keys + e * a.hi, a.hi);
            s = __dadd_rn(s, __dmul_rn(static_cast<double>(w_s[h]), d < 0.0 ? 0.0 : d));
        }
        score[e] = static_cast<float>(s);
    }
    __syncthreads();
    const int64_t keep = a.K < valid ? a.K : valid;
    int32_t* out = a.topk + t * a.K;
    if (keep > 0) {
        auto key = [&](int64_t i) { return dev::order_key(score[i]); };
        int64_t above = 0;
        const uint32_t thr = dev::block_topk_threshold(key, valid, keep, red, &above);
        dev::block_topk_collect(key, valid, thr, above, keep, red,
                                [&](int64_t i, int64_t rank) { out[rank] = static_cast<int32_t>(i); });
    }
    for (int64_t j = keep + threadIdx.x; j < a.K; j += blockDim.x) out[j] = -1;
}

size_t smem_bytes(int Hi, int hi, int64_t n_entries) {
    return (fixed_floats(Hi, hi) + static_cast<size_t>(n_entries)) * sizeof(float);
}

}  // namespace

int64_t indexer_max_entries(int Hi, int hi) {
    return static_cast<int64_t>(kMaxSmem / sizeof(float)) - static_cast<int64_t>(fixed_floats(Hi, hi)) -
           64;  // the static shared memory (reduction scratch) comes out of the same budget
}

void launch_indexer_topk(const ops::IndexerTopkArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.n_entries <= indexer_max_entries(a.Hi, a.hi), "indexer_topk: ", a.n_entries,
                " entries per slot; the CUDA kernel holds at most ", indexer_max_entries(a.Hi, a.hi),
                " scores in shared memory");
    DSV4_ASSERT(a.m >= 1 && a.K >= 0, "indexer_topk: m ", a.m, " K ", a.K);
    if (a.step.T == 0) return;
    static const cudaError_t attr = cudaFuncSetAttribute(
        indexer_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(kMaxSmem - 32 * sizeof(int)));
    DSV4_CHECK_CUDA(attr);
    indexer_topk_kernel<<<static_cast<unsigned>(a.step.T), kThreads, smem_bytes(a.Hi, a.hi, a.n_entries),
                          stream>>>(a);
    DSV4_CHECK_LAUNCH(stream);
}

}  // namespace dsv4::cuda
