// Router scoring (route.h), one block per token (or, for decode, the last block of the gate's
// product: gate_route_kernel), in the reference's steps
// (backend/cpu/ref/moe.cc route()): s = sqrt(softplus(l)) in float, selection over s + bias by
// k rounds of a block arg-max (larger first, ties to the lower index: the reference's
// partial_sort order), then weight_j = s[sel_j] / sum_j s[sel_j] * scale with the sum in double.
// softplus uses CUDA's expf/log1pf (within 2 ulp of glibc's): a selection can differ from the
// CPU only where two biased scores are within a few float ulps; docs/numerics-cuda.md.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/common/ptx_sm90.cuh"
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

// The routing of token t by the block, from its E logits l (read through L2: another block of
// the launch may have written them): the scores, the selection, the weights, and prep's ids
// and scales. s_s: [2 E] floats of shared memory.
__device__ void route_token(const ops::RouteArgs& a, const MoePrep& prep, int64_t t, const float* l,
                            float* s_s) {
    __shared__ unsigned long long best;
    __shared__ int32_t sel_s[kRouteMaxK];
    float* biased = s_s + a.E;
    __syncthreads();  // (a previous token's routing is done with the shared arrays)
    for (int e = threadIdx.x; e < a.E; e += blockDim.x) {
        const float s = sqrtf(softplus_ref(__ldcg(l + e)));
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

// logits[t, e] = x[t] . w[e] by one warp (lanes striding over D, then a warp reduction: the
// dense linear kernel's order, bit for bit); w a row in global or shared memory.
__device__ __forceinline__ float gate_dot(const RouterGate& g, const float* x, const void* w,
                                          int lane) {
    float s = 0;
    for (int64_t k = lane; k < g.D; k += 32) {
        const float wk = g.w_bf16 ? bf16_to_f32(static_cast<const uint16_t*>(w)[k])
                                  : static_cast<const float*>(w)[k];
        s = fmaf(x[k], wk, s);
    }
    return dev::warp_sum(s);
}

__global__ void __launch_bounds__(kThreads)
    route_kernel(ops::RouteArgs a, RouterGate g, MoePrep prep) {
    dev::pdl_enter();
    if (blockIdx.x >= a.T) {
        clear_prep(prep, a.T);
        return;
    }
    extern __shared__ float s_s[];  // [E] scores, then [E] biased
    const int64_t t = blockIdx.x;
    if (g.w != nullptr) {
        // Fused gate: warp w computes experts w, w + 8, ...; written to the logits scratch
        // (the op's contract) and read back after the barrier.
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const size_t row_bytes = static_cast<size_t>(g.D) * (g.w_bf16 ? 2 : 4);
        for (int e = warp; e < a.E; e += kThreads / 32) {
            const float s =
                gate_dot(g, g.x + t * g.D, static_cast<const uint8_t*>(g.w) + e * row_bytes, lane);
            if (lane == 0) g.logits[t * a.E + e] = s;
        }
        __syncthreads();
    }
    route_token(a, prep, t, a.logits + t * a.E, s_s);
}

// The decode router in one launch (launch_gate_route): block b owns gate rows [b R, b R + R),
// copied into its shared memory before the programmatic-launch wait (they depend on no earlier
// kernel, so they stream in while the previous kernel runs), warp w row b R + w; after the wait
// the blocks clear prep's outputs, write their logits, and the last block to arrive routes every
// token (route_token, the routing kernel's steps), its staged rows' space reused for the scores.
__global__ void __launch_bounds__(kThreads)
    gate_route_kernel(ops::RouteArgs a, RouterGate g, MoePrep prep, unsigned* arrivals, int R) {
    extern __shared__ __align__(16) float s_rows[];  // [R][D] gate rows, later [2 E] scores
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int e0 = static_cast<int>(blockIdx.x) * R;
    const int nr = min(R, a.E - e0);
    const int64_t row_bytes = g.D * (g.w_bf16 ? 2 : 4);  // a multiple of 16 (the launcher's)
    const uint8_t* src = static_cast<const uint8_t*>(g.w) + e0 * row_bytes;
    const uint32_t dst = ptx::smem_addr(s_rows);
    for (int64_t i = threadIdx.x; i < nr * row_bytes / 16; i += kThreads)
        ptx::cp_async_16(dst + static_cast<uint32_t>(16 * i), src + 16 * i);
    ptx::cp_async_commit();
    dev::pdl_enter();
    if (prep.ids != nullptr) {
        const int64_t n = prep.n_h + prep.n_out, stride = int64_t{gridDim.x} * kThreads;
        for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < n; i += stride)
            (i < prep.n_h ? prep.h[i] : prep.out[i - prep.n_h]) = 0.0f;
    }
    ptx::cp_async_wait<0>();
    __syncthreads();
    if (warp < nr) {
        const uint8_t* w = reinterpret_cast<const uint8_t*>(s_rows) + warp * row_bytes;
        for (int64_t t = 0; t < a.T; ++t) {
            const float s = gate_dot(g, g.x + t * g.D, w, lane);
            if (lane == 0) g.logits[t * a.E + e0 + warp] = s;
        }
    }
    // (last_to_arrive's barrier also ends every warp's reads of the staged rows.)
    if (!dev::last_to_arrive(arrivals, static_cast<int>(gridDim.x))) return;
    for (int64_t t = 0; t < a.T; ++t) route_token(a, prep, t, a.logits + t * a.E, s_rows);
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

namespace dsv4::cuda {

bool gate_route_fits(const ops::RouteArgs& a, const RouterGate& g) {
    const int64_t row_bytes = g.D * (g.w_bf16 ? 2 : 4);
    return a.T >= 1 && a.T <= kGateRouteMaxTokens && row_bytes % 16 == 0 &&
           row_bytes <= kGateRouteStageBytes && reinterpret_cast<uintptr_t>(g.w) % 16 == 0 &&
           2 * a.E * sizeof(float) <= kGateRouteStageBytes;
}

void launch_gate_route(const ops::RouteArgs& a, const RouterGate& g, const MoePrep* prep,
                       unsigned* arrivals, cudaStream_t stream) {
    DSV4_ASSERT(a.k >= 1 && a.k <= kRouteMaxK && a.k <= a.E && a.E <= kRouteMaxExperts, "route: k ",
                a.k, " of ", a.E);
    DSV4_ASSERT(g.logits == a.logits && gate_route_fits(a, g), "gate_route: arguments");
    DSV4_ASSERT(prep == nullptr || (a.T == 1 && prep->ids != nullptr && prep->scale != nullptr),
                "route: the MoE's launches are prepared for one-token steps");
    static PerDeviceOnce set_attributes;  // (per device: ranks on several GPUs)
    DSV4_CHECK_CUDA(set_attributes([] {
        return cudaFuncSetAttribute(gate_route_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(kGateRouteStageBytes));
    }));
    const int64_t row_bytes = g.D * (g.w_bf16 ? 2 : 4);
    const int R =
        static_cast<int>(std::min<int64_t>(kThreads / 32, kGateRouteStageBytes / row_bytes));
    const unsigned blocks = static_cast<unsigned>((a.E + R - 1) / R);
    const size_t smem =
        std::max<size_t>(static_cast<size_t>(R) * row_bytes, 2 * a.E * sizeof(float));
    launch_pdl(gate_route_kernel, blocks, kThreads, smem, stream, 1, a, g,
               prep != nullptr ? *prep : MoePrep{}, arrivals, R);
}

}  // namespace dsv4::cuda
