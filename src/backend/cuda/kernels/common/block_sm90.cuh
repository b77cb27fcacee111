// Device helpers shared by the op kernels: warp and block reductions, and the block-wide top-k
// selection (a radix-select threshold, then a scan in index order) used by the indexer and the
// sampler. Header-only, device code.
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
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// A warp's reduce-scatter of 32 values each (T float or double): afterwards v[0] of lane l is
// the warp's sum of value l, in 31 exchanges (32 warp_sums would take 160). Step O: lanes with
// bit O keep the upper O of the first 2 O values (plus their partner's), the others the lower O.
template <int O, typename T>
__device__ __forceinline__ void scatter_step(T (&v)[32], int lane) {
    const bool hi = (lane & O) != 0;
#pragma unroll
    for (int k = 0; k < O; ++k) {
        const T send = hi ? v[k] : v[k + O];
        const T keep = hi ? v[k + O] : v[k];
        v[k] = keep + __shfl_xor_sync(0xffffffffu, send, O);
    }
}
template <typename T>
__device__ __forceinline__ void warp_reduce_scatter(T (&v)[32], int lane) {
    scatter_step<16>(v, lane);
    scatter_step<8>(v, lane);
    scatter_step<4>(v, lane);
    scatter_step<2>(v, lane);
    scatter_step<1>(v, lane);
}

// Sum over a group of whole warps: `size` threads (a multiple of 32, at most 1024), this one
// ranked `rank` in it, which sync() synchronises (the block's barrier, or a named barrier of
// the group's warps); every thread of the group gets the result. `red` is 32 elements of shared
// memory; the call begins with a barrier so it can be reused back to back.
template <typename T, typename Sync>
__device__ __forceinline__ T group_sum(T v, T* red, int rank, int size, Sync&& sync) {
    const int lane = rank & 31, warp = rank >> 5, nw = size >> 5;
    v = warp_sum(v);
    sync();
    if (lane == 0) red[warp] = v;
    sync();
    T s = lane < nw ? red[lane] : T(0);
    return warp_sum(s);
}

// group_sum over the whole block.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* red) {
    return group_sum(v, red, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x),
                     [] { __syncthreads(); });
}

// The reference RMSNorm's arithmetic in pieces (backend/cpu/ref/norm_rope.cc): squares added in
// double (a float's square is exact in double, so the FMA is the multiply-add), the factor
// 1/sqrt(ms + eps) in double rounded to float, then x * inv * w in float.
__device__ __forceinline__ double add_square(double ss, float v) {
    return __fma_rn(static_cast<double>(v), static_cast<double>(v), ss);
}
__device__ __forceinline__ double add_squares(double ss, float4 v) {
    return add_square(add_square(add_square(add_square(ss, v.x), v.y), v.z), v.w);
}
__device__ __forceinline__ float rms_inv(double ss, int dim, float eps) {
    return static_cast<float>(1.0 / sqrt(ss / dim + eps));
}
// One float4 of a row normalised by inv and weighted by *w (w null: unweighted).
__device__ __forceinline__ float4 rms_scale(float4 v, float inv, const float4* w) {
    float4 o = make_float4(__fmul_rn(v.x, inv), __fmul_rn(v.y, inv), __fmul_rn(v.z, inv),
                           __fmul_rn(v.w, inv));
    if (w == nullptr) return o;
    const float4 g = *w;
    return make_float4(__fmul_rn(o.x, g.x), __fmul_rn(o.y, g.y), __fmul_rn(o.z, g.z),
                       __fmul_rn(o.w, g.w));
}

// The reference RMSNorm's factor for one row of `dim` floats, block-wide. `red` is 32 doubles
// of shared memory.
__device__ __forceinline__ float block_rms_inv(const float* x, int dim, float eps, double* red) {
    double ss = 0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss = add_square(ss, x[i]);
    return rms_inv(block_sum(ss, red), dim, eps);
}

// y = x · inv · w (w nullptr: unweighted) for one row, inv = block_rms_inv: the scalar
// RMSNorm of a row, block-wide (y may alias x). `red` as block_rms_inv's.
__device__ __forceinline__ void block_rms_norm_row(const float* x, const float* w, float* y,
                                                   int dim, float eps, double* red) {
    const float inv = block_rms_inv(x, dim, eps, red);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        const float v = __fmul_rn(x[i], inv);
        y[i] = w != nullptr ? __fmul_rn(v, w[i]) : v;
    }
}

// A float as an unsigned key with the same order (-0 and +0 are first made equal, as the
// reference's comparisons treat them).
__device__ __forceinline__ uint32_t order_key(float f) {
    f = f + 0.0f;  // -0 -> +0
    const uint32_t b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// A candidate's 64-bit selection key: its order key, then the complement of its index, so that
// a larger key is a larger value or, at equal values, a lower index (the sampler's and the
// router's ties to the lower id). Never 0 for an index below 2^32 - 1.
__device__ __forceinline__ uint64_t cand_key(uint32_t k, int64_t id) {
    return (static_cast<uint64_t>(k) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ int32_t key_id(uint64_t c) {
    return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(c));
}

// Block-wide: the largest key `v` such that at least k of the n keys are >= v (0 < k <= n; n <
// 2^31), by a radix select over 8-bit digits from the top: up to four passes, each a 256-bin
// histogram of the keys whose higher digits equal those chosen so far (shared-memory atomics, one
// per distinct bin per warp), scanned from the top bin by one warp for the largest digit that still
// leaves at least k keys at or above it. Keys come from key(i), i < n, read once per pass. The
// search stops early at a digit whose keys complete the top k exactly (with the keys above it;
// a 24-bit prefix of a few thousand float scores rarely holds two, so the fourth pass is mostly
// skipped), returning that digit's prefix with zeros below as v. On
// return every thread holds v and `above` such that the caller, taking all keys > v and the
// (k - above) lowest-index keys == v (all of them when fewer), takes exactly the top k with ties
// to the lower index: above counts the keys > v, or, after an early stop, the keys above the
// digit's range (the keys >= v then number exactly k, so every key == v is taken).
// `hist` is 256 unsigned and `red` 32 ints of shared memory; the call begins with a
// barrier (the caller's last use of them may come just before), and the caller passes one before
// writing them again (block_topk_collect's scan does).
template <typename KeyFn>
__device__ uint32_t block_topk_threshold(KeyFn key, int64_t n, int64_t k, unsigned* hist, int* red,
                                         int64_t* above) {
    const int lane = threadIdx.x & 31;
    uint32_t prefix = 0;
    int64_t gt = 0;  // keys above every key that matches the digits chosen so far
    for (int shift = 24; shift >= 0; shift -= 8) {
        __syncthreads();  // (the first pass: the caller's use of hist and red is over)
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        const uint32_t high = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
        // Four keys per thread at a time (their reads, then their bins: independent); every
        // lane runs every step (match_any).
        constexpr int kBatch = 4;
        for (int64_t base = 0; base < n; base += static_cast<int64_t>(blockDim.x) * kBatch) {
            int bin[kBatch];
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int64_t i = base + static_cast<int64_t>(b) * blockDim.x + threadIdx.x;
                bin[b] = -1;
                if (i < n) {
                    const uint32_t kv = key(i);
                    if ((kv & high) == prefix) bin[b] = static_cast<int>((kv >> shift) & 255u);
                }
            }
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const unsigned peers = __match_any_sync(0xffffffffu, bin[b]);
                if (bin[b] >= 0 && lane == __ffs(peers) - 1)
                    atomicAdd(&hist[bin[b]], static_cast<unsigned>(__popc(peers)));
            }
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            // Lane l scans bins 255 - 8l down to 248 - 8l; lanes in order cover 255 down to 0.
            unsigned c[8], mine = 0;
#pragma unroll
            for (int m = 0; m < 8; ++m) {
                c[m] = hist[255 - 8 * lane - m];
                mine += c[m];
            }
            unsigned incl = mine;  // inclusive prefix over the lanes (the bins above, and mine)
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned u = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += u;
            }
            int64_t cum = gt + (incl - mine);  // keys above my first bin
            int found = -1;
            unsigned in_bin = 0;  // c[found] (a register: c is indexed by constants only)
#pragma unroll
            for (int m = 0; m < 8; ++m) {
                if (found >= 0) continue;
                if (cum + c[m] >= k) {
                    found = m;
                    in_bin = c[m];
                } else {
                    cum += c[m];
                }
            }
            // The first lane with a hit holds the digit (one exists: the keys matching the
            // prefix, with the gt above them, are at least k).
            const unsigned hits = __ballot_sync(0xffffffffu, found >= 0);
            if (lane == __ffs(hits) - 1) {
                red[0] = 255 - 8 * lane - found;
                red[1] = static_cast<int>(cum - gt);  // keys of this pass above the digit
                red[2] = cum + in_bin == k;           // the digit's keys complete the top k
            }
        }
        __syncthreads();
        prefix |= static_cast<uint32_t>(red[0]) << shift;
        gt += red[1];
        if (red[2] != 0) break;  // (block-uniform; the caller's barrier comes before red's reuse)
    }
    *above = gt;
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
// Each thread takes kPer consecutive indices per round (blockDim.x * kPer < 2^16; kPer odd, so
// a warp's runs start in distinct shared-memory banks when the keys are read from there), and
// one block scan per round counts the keys above and the ties before each thread's run: a key's
// rank is (keys > thr before it) + min(ties before it, k - above).
template <int kPer = 9, typename KeyFn, typename EmitFn>
__device__ void block_topk_collect(KeyFn key, int64_t n, uint32_t thr, int64_t above, int64_t k,
                                   int* red, EmitFn emit) {
    const int64_t ties_wanted = k - above;
    int64_t gt_before = 0, ties_before = 0;  // over the previous rounds
    for (int64_t base = 0; base < n; base += static_cast<int64_t>(blockDim.x) * kPer) {
        const int64_t i0 = base + static_cast<int64_t>(threadIdx.x) * kPer;
        int gt = 0, ties = 0;
#pragma unroll
        for (int m = 0; m < kPer; ++m) {
            if (i0 + m >= n) break;
            const uint32_t kv = key(i0 + m);
            gt += kv > thr;
            ties += kv == thr;
        }
        int total = 0;  // packed: ties in the high 16 bits, keys above thr in the low 16
        const int off = block_exclusive_scan((ties << 16) | gt, red, &total);
        int64_t g = gt_before + (off & 0xffff), t = ties_before + (off >> 16);
        for (int m = 0; m < kPer && (gt > 0 || ties > 0); ++m) {
            if (i0 + m >= n) break;
            const uint32_t kv = key(i0 + m);
            if (kv > thr) {
                emit(i0 + m, g + (t < ties_wanted ? t : ties_wanted));
                ++g;
            } else if (kv == thr) {
                if (t < ties_wanted) emit(i0 + m, g + t);
                ++t;
            }
        }
        gt_before += total & 0xffff;
        ties_before += total >> 16;
    }
}

// Whether this block is the last of the S blocks of its row of the grid (blockIdx.y: a token)
// to have written its partial results (block-wide call). The partial writes are fenced before the
// arrival is counted, and the last block fences again before it reads the others'
// (threadfence-reduction); it leaves the counter at zero.
__device__ inline bool last_to_arrive(unsigned* arrivals, int S) {
    if (S == 1) return true;
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned* c = arrivals + blockIdx.y;
        last = atomicAdd(c, 1u) == static_cast<unsigned>(S - 1);
        if (last) *c = 0;
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

}  // namespace dsv4::cuda::dev
