// Device arithmetic shared by the mHC kernels (hyper_conn_sm90.cu, hc_pre_cluster_sm90.cu), in
// the reference's order with explicit round-to-nearest intrinsics (no FMA contraction):
// the gates, the one-warp Sinkhorn, the collapse's scaled adds, and the collapsing team of
// warps. Header-only, device code.
#pragma once

#include <cuda_runtime.h>

namespace dsv4::cuda::hc {

__device__ __forceinline__ float sigmoidf_ref(float x) {
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}

// The pre gate of stream i from its mixing value: sigmoid(mix * scale + base) + hc_eps.
__device__ __forceinline__ float pre_gate(float mix, float scale, float base, float hc_eps) {
    return __fadd_rn(sigmoidf_ref(__fadd_rn(__fmul_rn(mix, scale), base)), hc_eps);
}

// Sinkhorn of an N x N matrix (N * N <= 32) on one warp, in place in m: lane e holds element e
// in a register and reads its row's or column's elements by shuffles, no barriers. N is a
// compile-time constant so each sum's N shuffles are issued together and then added in index
// order (a runtime N leaves a loop of shuffle, add, each waiting on the last).
template <int N>
__device__ void sinkhorn_warp(float* m, int iters, float eps) {
    static_assert(N * N <= 32, "one element a lane");
    constexpr unsigned kAll = 0xffffffffu;
    const int e = threadIdx.x;
    const bool active = e < N * N;
    const int j = active ? e / N : 0, k = active ? e % N : 0;
    float v = m[active ? e : 0];
    __syncwarp();  // every lane has read before lane e writes m[e] at the end
    auto sum = [&](float x, int first, int step) {  // elements first + c * step, c in order
        float t[N];
#pragma unroll
        for (int c = 0; c < N; ++c) t[c] = __shfl_sync(kAll, x, first + c * step);
        float s = 0;
#pragma unroll
        for (int c = 0; c < N; ++c) s = __fadd_rn(s, t[c]);
        return s;
    };
    float mx = 0;  // column 0 first
#pragma unroll
    for (int c = 0; c < N; ++c) {
        const float x = __shfl_sync(kAll, v, j * N + c);
        mx = c == 0 ? x : (x > mx ? x : mx);
    }
    v = expf(__fsub_rn(v, mx));
    v = __fadd_rn(__fdiv_rn(v, sum(v, j * N, 1)), eps);
    v = __fdiv_rn(v, __fadd_rn(sum(v, k, N), eps));
    for (int it = 1; it < iters; ++it) {
        v = __fdiv_rn(v, __fadd_rn(sum(v, j * N, 1), eps));
        v = __fdiv_rn(v, __fadd_rn(sum(v, k, N), eps));
    }
    if (active) m[e] = v;
    __syncwarp();
}

// sinkhorn_warp<n> for a run-time n <= N.
template <int N>
__device__ void sinkhorn_warp_upto(int n, float* m, int iters, float eps) {
    if constexpr (N > 1) {
        if (n < N) {
            sinkhorn_warp_upto<N - 1>(n, m, iters, eps);
            return;
        }
    }
    sinkhorn_warp<N>(m, iters, eps);
}

// s += p * x per component, rounded as the reference's loop (no contraction).
__device__ __forceinline__ void add_scaled(float4& s, float p, const float4& x) {
    s.x = __fadd_rn(s.x, __fmul_rn(p, x.x));
    s.y = __fadd_rn(s.y, __fmul_rn(p, x.y));
    s.z = __fadd_rn(s.z, __fmul_rn(p, x.z));
    s.w = __fadd_rn(s.w, __fmul_rn(p, x.w));
}

// The threads that run the collapse: the whole block, or (hc_pre's finish, Team::after_warp0)
// warps 1.. while warp 0 runs the Sinkhorn, with a named barrier of their own so that the
// norm's reduction does not wait for the Sinkhorn.
struct Team {
    int rank, size;
    bool whole;
    __device__ static Team block() {
        return {static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x), true};
    }
    __device__ static Team after_warp0() {
        return {static_cast<int>(threadIdx.x) - 32, static_cast<int>(blockDim.x) - 32, false};
    }
    __device__ void sync() const {
        if (whole)
            __syncthreads();
        else
            asm volatile("bar.sync 1, %0;" ::"r"(size) : "memory");
    }
};

}  // namespace dsv4::cuda::hc
