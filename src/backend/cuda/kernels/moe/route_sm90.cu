// Router scoring (route.h), one block per token, in the reference's steps
// (backend/cpu/ref/moe.cc route()): s = sqrt(softplus(l)) in float, selection of the k largest
// s + bias (larger first, ties to the lower index: the reference's partial_sort order), then
// weight_j = s[sel_j] / sum_j s[sel_j] * scale with the sum in double. The selection (keys
// distinct: value, then the index) first by a threshold (k <= 8, the warps): T, the k-th largest
// of the 8 warps' largest keys, is at most the k-th largest key overall, so the top k are among
// the keys >= T (typically a few more than k); those go to shared memory, each ranks itself
// among them, and the k best write their slots: three barriers, no serial rounds (session 38).
// Where k > 8 or more than kCandCap keys pass T (many equal scores spread over the warps'
// experts), the earlier selection runs: every warp takes the k largest of its experts by k
// rounds of a warp arg-max (shuffles only), then warp 0 the k largest of those candidates the
// same way (session 28's; with the radix select's early stop it measured -1.0% a step).
// softplus uses CUDA's expf/log1pf (within 2 ulp of glibc's): a selection can differ from the
// CPU only where two biased scores are within a few float ulps; docs/numerics-cuda.md.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/moe/route.h"
#include "base/check.h"
#include "base/fp_codes.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float softplus_ref(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

constexpr int kWarps = kThreads / 32;
static_assert(kRouteMaxK <= kThreads, "a thread a hash-routed slot");
// Keys the threshold selection holds (at least the fallback's kWarps * kRouteMaxK).
constexpr int kCandCap = kWarps * kRouteMaxK;

// The warp's k largest of the distinct keys key(i) (dev::cand_key: never 0), i = first + lane,
// first + lane + stride, ... < n (0: not a candidate), largest first: out(j, key) for j < k, key 0
// once they run out. Each lane keeps its largest key below the last one taken from it; a round is a
// warp arg-max.
template <typename KeyFn, typename OutFn>
__device__ __forceinline__ void warp_top_keys(int first, int stride, int n, int k, KeyFn key,
                                              OutFn out) {
    const int lane = threadIdx.x & 31;
    uint64_t bound = ~0ull;
    auto best_below = [&] {
        uint64_t b = 0;
        for (int i = first + lane; i < n; i += stride) {
            const uint64_t c = key(i);
            if (c < bound && c > b) b = c;
        }
        return b;
    };
    uint64_t mine = best_below();
    for (int j = 0; j < k; ++j) {
        uint64_t w = mine;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const uint64_t u = __shfl_xor_sync(0xffffffffu, w, o);
            w = u > w ? u : w;
        }
        out(j, w);
        if (w != 0 && mine == w) {  // (keys are distinct: one lane)
            bound = w;
            mine = best_below();
        }
    }
}

// Blocks past the T routing blocks zero prep's h and out (a grid-stride loop over those blocks).
__device__ void clear_prep(const MoePrep& p, int64_t T) {
    const int64_t n = p.n_h + p.n_out;
    const int64_t stride = (gridDim.x - T) * blockDim.x;
    for (int64_t i = (blockIdx.x - T) * blockDim.x + threadIdx.x; i < n; i += stride)
        (i < p.n_h ? p.h[i] : p.out[i - p.n_h]) = 0.0f;
}

__global__ void __launch_bounds__(kThreads)
    route_kernel(ops::RouteArgs a, RouterGate g, MoePrep prep) {
    // A hash-routed layer's experts, the tid2eid row of the token's id (a weight and the step
    // descriptor: pdl.cuh), read before the wait; they were two round trips after it.
    int hashed = 0;
    if (a.tid2eid != nullptr && blockIdx.x < a.T && threadIdx.x < a.k)
        hashed = a.tid2eid[static_cast<int64_t>(a.ids[blockIdx.x]) * a.k + threadIdx.x];
    dev::pdl_enter();
    if (blockIdx.x >= a.T) {
        clear_prep(prep, a.T);
        return;
    }
    extern __shared__ float s_s[];  // [E] scores, then [E] biased
    float* biased = s_s + a.E;
    __shared__ uint64_t cand[kCandCap];  // the keys >= T, or each warp's k best keys
    __shared__ uint64_t wbest[kWarps];   // each warp's largest key
    __shared__ int32_t sel_s[kRouteMaxK];
    __shared__ int n_cand;
    const int64_t t = blockIdx.x;
    const float* l = a.logits + t * a.E;
    if (g.w != nullptr) {
        // Fused gate: warp w computes experts w, w + 8, ...; written to the logits scratch
        // (the op's contract) and read back after the barrier.
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const float* x = g.x + t * g.D;
        for (int e = warp; e < a.E; e += kThreads / 32) {
            float s = 0;
            for (int64_t k = lane; k < g.D; k += 32) {
                const int64_t i = static_cast<int64_t>(e) * g.D + k;
                const float w = g.w_bf16 ? bf16_to_f32(static_cast<const uint16_t*>(g.w)[i])
                                         : static_cast<const float*>(g.w)[i];
                s = fmaf(x[k], w, s);
            }
            s = dev::warp_sum(s);
            if (lane == 0) g.logits[t * a.E + e] = s;
        }
        __syncthreads();
    }
    for (int e = threadIdx.x; e < a.E; e += blockDim.x) {
        const float s = sqrtf(softplus_ref(l[e]));
        s_s[e] = s;
        biased[e] = __fadd_rn(s, a.bias ? a.bias[e] : 0.0f);
    }
    __syncthreads();
    if (a.tid2eid != nullptr) {
        if (threadIdx.x < a.k) sel_s[threadIdx.x] = hashed;  // (k <= kRouteMaxK < kThreads)
    } else {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        auto key = [&](int e) { return dev::cand_key(dev::order_key(biased[e]), e); };
        // Warp w's experts are w * 32 + lane + m * kThreads. A warp without experts: 0 (below
        // every real key).
        uint64_t best = 0;
        for (int e = threadIdx.x; e < a.E; e += kThreads) best = max(best, key(e));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
        if (lane == 0) wbest[warp] = best;
        if (threadIdx.x == 0) n_cand = 0;
        __syncthreads();
        const bool by_threshold = a.k <= kWarps;
        if (by_threshold) {
            // T: the k-th largest warp best (equal ones, the zeros of empty warps, ranked by
            // warp). At least k real keys are >= T unless T is 0, where every key is.
            uint64_t T = 0;
#pragma unroll
            for (int j = 0; j < kWarps; ++j) {
                int rank = 0;
#pragma unroll
                for (int i = 0; i < kWarps; ++i)
                    rank += wbest[i] > wbest[j] || (wbest[i] == wbest[j] && i < j);
                if (rank == a.k - 1) T = wbest[j];
            }
            for (int e = threadIdx.x; e < a.E; e += kThreads) {
                const uint64_t c = key(e);
                if (c >= T) {
                    const int slot = atomicAdd(&n_cand, 1);
                    if (slot < kCandCap) cand[slot] = c;
                }
            }
        }
        __syncthreads();
        const int n = n_cand;  // (block-uniform, as the branch below)
        if (by_threshold && n <= kCandCap) {
            for (int i = threadIdx.x; i < n; i += kThreads) {
                const uint64_t c = cand[i];
                int rank = 0;
                for (int j = 0; j < n; ++j) rank += cand[j] > c;
                if (rank < a.k) sel_s[rank] = dev::key_id(c);
            }
        } else {
            // Warp w's k best into cand[w * k ..], then warp 0 takes the k best of the kWarps * k
            // candidates (every expert of the top k is among its warp's k best). k <= E: the k
            // keys taken are real ones. (Every thread has read n_cand and no thread reads the
            // threshold's cand: the branch is block-uniform.)
            warp_top_keys(warp * 32, kThreads, a.E, a.k, key, [&](int j, uint64_t c) {
                if (lane == 0) cand[warp * a.k + j] = c;
            });
            __syncthreads();
            if (warp == 0)
                warp_top_keys(
                    0, 32, kWarps * a.k, a.k, [&](int i) { return cand[i]; },
                    [&](int j, uint64_t c) {
                        if (threadIdx.x == 0) sel_s[j] = dev::key_id(c);
                    });
        }
    }
    __syncthreads();
    // The weights, one a lane of warp 0 (an fp64 division each, side by side instead of k in a
    // row on one thread): every lane sums the k scores in slot order itself, the same bits.
    if (threadIdx.x >= 32) return;
    double sum = 0;
    for (int j = 0; j < a.k; ++j) sum = __dadd_rn(sum, static_cast<double>(s_s[sel_s[j]]));
    for (int j = threadIdx.x; j < a.k; j += 32) {
        const int e = sel_s[j];
        const float w = static_cast<float>(
            __dmul_rn(__ddiv_rn(static_cast<double>(s_s[e]), sum), static_cast<double>(a.scale)));
        a.sel[t * a.k + j] = e;
        a.weight[t * a.k + j] = w;
        if (prep.ids != nullptr) {
            prep.ids[j] = e;
            prep.scale[j] = w;
        }
    }
    if (threadIdx.x == 0 && prep.ids != nullptr) {
        prep.ids[a.k] = prep.shared_id;
        prep.scale[a.k] = 1.0f;
    }
}

}  // namespace

void launch_route(const ops::RouteArgs& a, cudaStream_t stream, const RouterGate* gate,
                  const MoePrep* prep) {
    DSV4_ASSERT(a.k >= 1 && a.k <= kRouteMaxK && a.k <= a.E && a.E <= kRouteMaxExperts, "route: k ",
                a.k, " of ", a.E);
    DSV4_ASSERT(gate == nullptr || gate->logits == a.logits, "route: fused gate logits");
    if (a.T == 0) return;
    unsigned clear_blocks = 0;
    if (prep != nullptr) {
        DSV4_ASSERT(a.T == 1 && prep->ids != nullptr && prep->scale != nullptr,
                    "route: the MoE's launches are prepared for one-token steps");
        const int64_t n = prep->n_h + prep->n_out;
        clear_blocks = static_cast<unsigned>(std::min<int64_t>(64, (n + kThreads - 1) / kThreads));
    }
    launch_pdl(route_kernel, static_cast<unsigned>(a.T) + clear_blocks, kThreads,
               2 * a.E * sizeof(float), stream, 1, a, gate != nullptr ? *gate : RouterGate{},
               prep != nullptr ? *prep : MoePrep{});
}

}  // namespace dsv4::cuda
