// Router scoring (route.h), one block per token, in the reference's steps
// (backend/cpu/ref/moe.cc route()): s = sqrt(softplus(l)) in float, selection of the k largest
// s + bias (larger first, ties to the lower index: the reference's partial_sort order), then
// weight_j = s[sel_j] / sum_j s[sel_j] * scale with the sum in double. The selection: every warp
// takes the k largest of its experts by k rounds of a warp arg-max (shuffles only), then warp 0
// the k largest of those candidates the same way: two barriers (k rounds of a block arg-max took
// three barriers and an atomicMax from every thread onto one shared address each; the change
// measured -1.0% a V4-Flash decode step together with the radix select's early stop,
// docs/perf.md, session 28).
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
    dev::pdl_enter();
    if (blockIdx.x >= a.T) {
        clear_prep(prep, a.T);
        return;
    }
    extern __shared__ float s_s[];  // [E] scores, then [E] biased
    float* biased = s_s + a.E;
    __shared__ uint64_t cand[kWarps * kRouteMaxK];  // each warp's k best keys
    __shared__ int32_t sel_s[kRouteMaxK];
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
        for (int j = threadIdx.x; j < a.k; j += blockDim.x)
            sel_s[j] = a.tid2eid[static_cast<int64_t>(a.ids[t]) * a.k + j];
    } else {
        // Warp w's experts are w * 32 + lane + m * kThreads; its k best into cand[w], then warp 0
        // takes the k best of the kWarps * k candidates (every expert of the top k is among its
        // warp's k best). k <= E: the k keys taken are real ones.
        const int warp = threadIdx.x >> 5;
        warp_top_keys(
            warp * 32, kThreads, a.E, a.k,
            [&](int e) { return dev::cand_key(dev::order_key(biased[e]), e); },
            [&](int j, uint64_t key) {
                if ((threadIdx.x & 31) == 0) cand[warp * a.k + j] = key;
            });
        __syncthreads();
        if (warp == 0)
            warp_top_keys(
                0, 32, kWarps * a.k, a.k, [&](int i) { return cand[i]; },
                [&](int j, uint64_t key) {
                    if (threadIdx.x == 0) sel_s[j] = dev::key_id(key);
                });
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
