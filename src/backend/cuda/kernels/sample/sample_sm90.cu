// Sampling (sample.h), in the reference's steps (backend/cpu/ref/sample.cc): a row with a
// non-finite logit gets -1 and draws nothing; greedy is the lowest id of the maximum (exact);
// otherwise the top `keep` logits (ties to the lower id) are found with the block top-k
// threshold search, sorted in descending order in shared memory, and one thread does the
// reference's sequential double arithmetic: probabilities exp((l - max) / T), the top-p cut,
// one xoshiro256** draw from the slot's state, and the walk. Only exp differs from the CPU
// (CUDA's double exp is within 1 ulp, glibc's is correctly rounded in practice): the draw can
// differ only when r falls within ~1e-16 of a cumulative boundary.
#include "backend/cuda/common/check.cuh"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/sample/sample.h"
#include "base/check.h"
#include "base/xoshiro.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 1024;

// Descending by logit, ties to the lower id: (order key << 32) | ~id, larger first.
__device__ __forceinline__ uint64_t cand_key(uint32_t k, int64_t id) {
    return (static_cast<uint64_t>(k) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}

__global__ void __launch_bounds__(kThreads) sample_kernel(ops::SampleArgs a) {
    __shared__ int red[32];
    __shared__ uint64_t cand[kSampleMaxTopK];
    __shared__ double probs[kSampleMaxTopK];
    __shared__ unsigned long long best;
    const int64_t r = blockIdx.x;
    const float* logits = a.logits + r * a.V;
    int bad = 0;
    for (int64_t i = threadIdx.x; i < a.V; i += blockDim.x) bad += !isfinite(logits[i]);
    if (dev::block_sum(bad, red) > 0) {
        if (threadIdx.x == 0) a.out[r] = -1;
        return;
    }
    const SamplingParams p = a.params[r];
    auto key = [&](int64_t i) { return dev::order_key(logits[i]); };
    if (p.temperature <= 0.0f || p.top_k == 1) {
        if (threadIdx.x == 0) best = 0;
        __syncthreads();
        unsigned long long mine = 0;
        for (int64_t i = threadIdx.x; i < a.V; i += blockDim.x) {
            const unsigned long long c = cand_key(key(i), i);
            mine = c > mine ? c : mine;
        }
        atomicMax(&best, mine);
        __syncthreads();
        if (threadIdx.x == 0) a.out[r] = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(best));
        return;
    }
    const int64_t keep = (p.top_k > 0 && p.top_k < a.V) ? p.top_k : a.V;
    // Not implemented (sample.h): a device-side abort (a printf here would need local memory,
    // which this build forbids).
    if (keep > kSampleMaxTopK) __trap();
    int64_t above = 0;
    const uint32_t thr = dev::block_topk_threshold(key, a.V, keep, red, &above);
    int n_pow2 = 1;
    while (n_pow2 < keep) n_pow2 <<= 1;
    for (int i = threadIdx.x; i < n_pow2; i += blockDim.x) cand[i] = 0;  // padding sorts last
    __syncthreads();
    dev::block_topk_collect(key, a.V, thr, above, keep, red,
                            [&](int64_t i, int64_t rank) { cand[rank] = cand_key(key(i), i); });
    __syncthreads();
    // Bitonic sort, descending.
    for (int size = 2; size <= n_pow2; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < n_pow2; i += blockDim.x) {
                const int j = i ^ stride;
                if (j > i) {
                    const bool desc = (i & size) == 0;
                    const uint64_t x = cand[i], y = cand[j];
                    if (desc ? x < y : x > y) {
                        cand[i] = y;
                        cand[j] = x;
                    }
                }
            }
            __syncthreads();
        }
    }
    if (threadIdx.x != 0) return;
    auto id_at = [&](int64_t i) { return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(cand[i])); };
    const double mx = logits[id_at(0)];
    double sum = 0;
    for (int64_t i = 0; i < keep; ++i) {
        probs[i] = exp(__ddiv_rn(__dsub_rn(static_cast<double>(logits[id_at(i)]), mx),
                                 static_cast<double>(p.temperature)));
        sum = __dadd_rn(sum, probs[i]);
    }
    int64_t n = keep;
    if (p.top_p < 1.0f) {
        double mass = 0;
        int64_t cut = 0;
        while (cut < n) {
            mass = __dadd_rn(mass, __ddiv_rn(probs[cut++], sum));
            if (mass >= p.top_p) break;
        }
        n = cut;
        sum = 0;
        for (int64_t i = 0; i < n; ++i) sum = __dadd_rn(sum, probs[i]);
    }
    const double u = __dmul_rn(xoshiro_uniform(a.rng + 4 * static_cast<int64_t>(a.slot[r])), sum);
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
        acc = __dadd_rn(acc, probs[i]);
        if (u < acc) {
            a.out[r] = id_at(i);
            return;
        }
    }
    a.out[r] = id_at(n - 1);
}

}  // namespace

void launch_sample(const ops::SampleArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.V >= 1 && a.V <= 0x7fffffff, "sample: V ", a.V);
    if (a.R == 0) return;
    sample_kernel<<<static_cast<unsigned>(a.R), kThreads, 0, stream>>>(a);
    DSV4_CHECK_LAUNCH(stream);
}

}  // namespace dsv4::cuda
