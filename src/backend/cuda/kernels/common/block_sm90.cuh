// Device helpers shared by the op kernels: warp and block reductions, and the block-wide top-k
// threshold search used by the indexer and the sampler. Header-only, device code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda::dev {

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `red` is 32 elements of shared memory; the call begins and ends with a barrier so it can be
// reused back to back.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    T s = lane < nw ? red[lane] : T(0);
    return warp_sum(s);
}

// The reference RMSNorm's factor for one row of `dim` floats, block-wide: the sum of squares in
// double, then 1/sqrt(ms + eps) in double rounded to float. `red` is 32 doubles of shared memory.
__device__ __forceinline__ float block_rms_inv(const float* x, int dim, float eps, double* red) {
    double ss = 0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const double v = x[i];
        ss = __dadd_rn(ss, __dmul_rn(v, v));
    }
    ss = block_sum(ss, red);
    return static_cast<float>(1.0 / sqrt(ss / dim + eps));
}

// A float as an unsigned key with the same order (-0 and +0 are first made equal, as the
// reference's comparisons treat them).
__device__ __forceinline__ uint32_t order_key(float f) {
    f = f + 0.0f;  // -0 -> +0
    const uint32_t b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// Block-wide: the largest key `v` such that at least k of the n keys are >= v (k <= n), by a
// bitwise search from the top bit (32 counting passes over the keys). Keys come from
// key(i), i < n. On return every thread holds v and the number of keys strictly above it; the
// caller takes all keys > v and the (k - above) lowest-index keys == v: exactly the top k with
// ties to the lower index. `red` is 32 ints of shared memory.
template <typename KeyFn>
__device__ uint32_t block_topk_threshold(KeyFn key, int64_t n, int64_t k, int* red,
                                         int64_t* above) {
    uint32_t prefix = 0;
    for (int bit = 31; bit >= 0; --bit) {
        const uint32_t cand = prefix | (1u << bit);
        int cnt = 0;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) cnt += key(i) >= cand;
        if (block_sum(cnt, red) >= k) prefix = cand;
    }
    int gt = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) gt += key(i) > prefix;
    *above = block_sum(gt, red);
    return prefix;
}

// Block-wide exclusive prefix sum of one int per thread (in thread order); returns this
// thread's offset and sets *total. `red` is 32 ints of shared memory.
__device__ __forceinline__ int block_exclusive_scan(int v, int* red, int* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += u;
    }
    __syncthreads();
    if (lane == 31) red[warp] = incl;
    __syncthreads();
    int warp_off = 0, all = 0;
    for (int w = 0; w < nw; ++w) {
        const int s = red[w];
        if (w < warp) warp_off += s;
        all += s;
    }
    *total = all;
    return warp_off + incl - v;
}

// Walks i = 0..n-1 in index order and calls emit(i, rank) for the top-k keys (keys > thr, then
// the first `k - above` keys == thr), rank being the position in index order among the taken.
template <typename KeyFn, typename EmitFn>
__device__ void block_topk_collect(KeyFn key, int64_t n, uint32_t thr, int64_t above, int64_t k,
                                   int* red, EmitFn emit) {
    int64_t taken = 0, ties_taken = 0;
    const int64_t ties_wanted = k - above;
    for (int64_t base = 0; base < n; base += blockDim.x) {
        const int64_t i = base + threadIdx.x;
        const uint32_t kv = i < n ? key(i) : 0u;
        const int is_tie = i < n && kv == thr;
        int tie_total = 0;
        const int tie_rank = block_exclusive_scan(is_tie, red, &tie_total);
        const int take = i < n && (kv > thr || (is_tie && ties_taken + tie_rank < ties_wanted));
        int take_total = 0;
        const int rank = block_exclusive_scan(take, red, &take_total);
        if (take) emit(i, taken + rank);
        taken += take_total;
        ties_taken += tie_total;
    }
}

}  // namespace dsv4::cuda::dev
