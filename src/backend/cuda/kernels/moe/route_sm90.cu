// Router scoring (route.h), one block per token, in the reference's steps
// (backend/cpu/ref/moe.cc route()): s = sqrt(softplus(l)) in float, selection over s + bias by
// k rounds of a block arg-max (larger first, ties to the lower index: the reference's
// partial_sort order), then weight_j = s[sel_j] / sum_j s[sel_j] * scale with the sum in double.
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
    __shared__ unsigned long long best;
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
        for (int j = 0; j < a.k; ++j) {
            if (threadIdx.x == 0) best = 0;
            __syncthreads();
            unsigned long long mine = 0;
            for (int e = threadIdx.x; e < a.E; e += blockDim.x) {
                bool taken = false;
                for (int q = 0; q < j; ++q) taken |= sel_s[q] == e;
                if (taken) continue;
                const unsigned long long c =
                    (static_cast<unsigned long long>(dev::order_key(biased[e])) << 32) |
                    (0xffffffffu - static_cast<uint32_t>(e));
                mine = c > mine ? c : mine;
            }
            atomicMax(&best, mine);
            __syncthreads();
            if (threadIdx.x == 0)
                sel_s[j] = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(best));
            __syncthreads();
        }
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    double sum = 0;
    for (int j = 0; j < a.k; ++j) sum = __dadd_rn(sum, static_cast<double>(s_s[sel_s[j]]));
    for (int j = 0; j < a.k; ++j) {
        a.sel[t * a.k + j] = sel_s[j];
        a.weight[t * a.k + j] = static_cast<float>(__dmul_rn(
            __ddiv_rn(static_cast<double>(s_s[sel_s[j]]), sum), static_cast<double>(a.scale)));
        if (prep.ids != nullptr) {
            prep.ids[j] = sel_s[j];
            prep.scale[j] = a.weight[t * a.k + j];
        }
    }
    if (prep.ids != nullptr) {
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
