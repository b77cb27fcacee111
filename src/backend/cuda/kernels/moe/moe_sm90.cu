// MoE element-wise kernels (moe.h). Float steps use round-to-nearest intrinsics in the CPU
// reference's order so nvcc does not contract them into FMAs (the CPU build does not).
#include <algorithm>
#include <cstdint>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/common/swiglu_sm90.cuh"
#include "backend/cuda/kernels/moe/moe.h"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 16 ? 65535 * 16 : b));
}

__global__ void expand_rows_kernel(const float* x, const int32_t* row, float* out, int64_t n, int k,
                                   int64_t D) {
    dev::pdl_enter();
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t p = i / D, d = i % D;
        out[(row != nullptr ? row[p] : p) * D + d] = x[(p / k) * D + d];
    }
}

// Counts per expert in shared memory, ranks by atomics, group offsets by one thread's scan.
__global__ void moe_group_kernel(MoeGroupArgs a) {
    dev::pdl_enter();
    extern __shared__ int32_t sm[];  // [E] counts, then [E] first group
    int32_t* count = sm;
    int32_t* first = sm + a.E;
    for (int e = threadIdx.x; e < a.E; e += blockDim.x) count[e] = 0;
    __syncthreads();
    for (int64_t p = threadIdx.x; p < a.P; p += blockDim.x)
        a.pair_row[p] = atomicAdd(&count[a.sel[p]], 1);  // the rank, for now
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t g = 0;
        for (int e = 0; e < a.E; ++e) {
            first[e] = g;
            g += (count[e] + 15) / 16;
        }
    }
    __syncthreads();
    for (int64_t g = threadIdx.x; g < a.n_groups; g += blockDim.x) a.group_expert[g] = 0;
    __syncthreads();
    for (int e = threadIdx.x; e < a.E; e += blockDim.x)
        for (int32_t j = 0; j < (count[e] + 15) / 16; ++j) a.group_expert[first[e] + j] = e;
    for (int64_t p = threadIdx.x; p < a.P; p += blockDim.x) {
        const int32_t r = a.pair_row[p];
        a.pair_row[p] = (first[a.sel[p]] + r / 16) * 16 + r % 16;
    }
}

// dev::clipped_swiglu, as the swiglu op (basic_sm90.cu) and cpu_ref::swiglu.
__global__ void moe_swiglu_kernel(MoeSwigluArgs a) {
    dev::pdl_enter();
    const int64_t n = a.G * a.I;
    const float L = a.limit;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t g = i / a.I, c = i % a.I;
        float v = dev::clipped_swiglu(a.h[g * 2 * a.I + c], a.h[g * 2 * a.I + a.I + c], L);
        if (a.weight != nullptr) v = __fmul_rn(v, a.weight[g]);
        a.a[i] = v;
    }
}

// Counts per expert, the first group of each (one thread's scan over E), then each pair's row
// from its stable rank among its expert's pairs (the pairs' experts staged in shared memory).
__global__ void moe_compact_groups_kernel(MoeCompactArgs a) {
    dev::pdl_enter();
    extern __shared__ int32_t sm[];  // [E] counts, then [E] first groups, then [P] experts
    int32_t* count = sm;
    int32_t* first = sm + a.E;
    int32_t* ex = first + a.E;
    for (int e = threadIdx.x; e < a.E; e += blockDim.x) count[e] = 0;
    __syncthreads();
    for (int64_t p = threadIdx.x; p < a.P; p += blockDim.x) {
        ex[p] = a.sel[p];
        atomicAdd(&count[ex[p]], 1);
    }
    for (int64_t g = threadIdx.x; g < a.P; g += blockDim.x) a.group_expert[g] = 0;
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t g = 0;
        for (int e = 0; e < a.E; ++e) {
            first[e] = g;
            g += (count[e] + a.m - 1) / a.m;
        }
        *a.n_groups = g;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < a.E; e += blockDim.x)
        for (int32_t j = 0; j < (count[e] + a.m - 1) / a.m; ++j) a.group_expert[first[e] + j] = e;
    for (int64_t p = threadIdx.x; p < a.P; p += blockDim.x) {
        const int32_t e = ex[p];
        int32_t rank = 0;
        for (int64_t q = 0; q < p; ++q) rank += ex[q] == e;
        a.pair_row[p] = (first[e] + rank / a.m) * a.m + rank % a.m;
    }
}

__global__ void moe_combine_kernel(MoeCombineArgs a) {
    dev::pdl_enter();
    const int64_t n = a.T * a.D;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = i / a.D, d = i % a.D;
        float s = 0.0f;
        int64_t last = -1;  // (expert id, slot) of the slot added last, as sel * k + slot
        for (int r = 0; r < a.k; ++r) {
            int j = r;
            if (a.sel != nullptr) {
                // The next slot in (expert id, slot) order: the smallest key above `last`.
                int64_t best = INT64_MAX;
                for (int c = 0; c < a.k; ++c) {
                    const int64_t key = int64_t{a.sel[t * a.k + c]} * a.k + c;
                    if (key > last && key < best) best = key;
                }
                last = best;
                j = static_cast<int>(best % a.k);
            }
            const int64_t p = t * a.k + j;
            const float y = a.y[(a.row != nullptr ? a.row[p] : p) * a.D + d];
            s = __fadd_rn(s, a.weight != nullptr ? __fmul_rn(y, a.weight[t * a.k + j]) : y);
        }
        if (a.shared != nullptr) s = __fadd_rn(s, a.shared[i]);
        a.out[i] = s;
    }
}

__global__ void moe_ids_with_shared_kernel(const int32_t* sel, const float* weight, int k,
                                           int32_t shared_id, int32_t* ids, float* scale, float* h,
                                           int64_t n_h, float* out, int64_t n_out) {
    dev::pdl_enter();
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
    if (i <= k) {
        ids[i] = i < k ? sel[i] : shared_id;
        scale[i] = i < k ? weight[i] : 1.0f;
    }
    for (int64_t j = i; j < n_h; j += step) h[j] = 0.0f;
    for (int64_t j = i; j < n_out; j += step) out[j] = 0.0f;
}

}  // namespace

void launch_moe_ids_with_shared(const int32_t* sel, const float* weight, int k, int32_t shared_id,
                                int32_t* ids, float* scale, float* h, int64_t n_h, float* out,
                                int64_t n_out, cudaStream_t stream) {
    DSV4_ASSERT(k >= 1 && k < 1024, "moe ids: k = ", k);
    const int64_t n = std::max<int64_t>({k + 1, n_h, n_out});
    launch_pdl(moe_ids_with_shared_kernel, blocks_for(n), kThreads, 0, stream, 1, sel, weight, k,
               shared_id, ids, scale, h, n_h, out, n_out);
}

void launch_expand_rows(const float* x, const int32_t* row, float* out, int64_t T, int k, int64_t D,
                        cudaStream_t stream) {
    const int64_t n = T * k * D;
    if (n == 0) return;
    launch_pdl(expand_rows_kernel, blocks_for(n), kThreads, 0, stream, 1, x, row, out, n, k, D);
}

void launch_moe_group(const MoeGroupArgs& a, cudaStream_t stream) {
    if (a.P == 0) return;
    const size_t smem = 2 * static_cast<size_t>(a.E) * sizeof(int32_t);
    DSV4_ASSERT(smem <= 48 * 1024, "moe_group: ", a.E, " experts");
    launch_pdl(moe_group_kernel, 1, 1024, smem, stream, 1, a);
}

void launch_moe_compact_groups(const MoeCompactArgs& a, cudaStream_t stream) {
    if (a.P == 0) return;
    DSV4_ASSERT(a.E >= 1 && a.E <= 1024 && a.P < 4 * int64_t{a.E} && a.m >= 1,
                "moe compact groups: ", a.P, " pairs over ", a.E, " experts, ", a.m, " rows");
    const size_t smem = (2 * static_cast<size_t>(a.E) + static_cast<size_t>(a.P)) * sizeof(int32_t);
    launch_pdl(moe_compact_groups_kernel, 1, 1024, smem, stream, 1, a);
}

void launch_moe_swiglu(const MoeSwigluArgs& a, cudaStream_t stream) {
    if (a.G * a.I == 0) return;
    launch_pdl(moe_swiglu_kernel, blocks_for(a.G * a.I), kThreads, 0, stream, 1, a);
}

__global__ void moe_local_slots_kernel(const int32_t* sel, const float* weight, int64_t P,
                                       int first, int count, int32_t* sel_out, float* weight_out) {
    dev::pdl_enter();
    const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= P) return;
    const int e = sel[p] - first;
    const bool held = e >= 0 && e < count;
    sel_out[p] = held ? e : 0;
    weight_out[p] = held ? weight[p] : 0.0f;
}

void launch_moe_local_slots(const int32_t* sel, const float* weight, int64_t P, int first,
                            int count, int32_t* sel_out, float* weight_out, cudaStream_t stream) {
    if (P == 0) return;
    launch_pdl(moe_local_slots_kernel, blocks_for(P), kThreads, 0, stream, 1, sel, weight, P, first,
               count, sel_out, weight_out);
}

void launch_moe_combine(const MoeCombineArgs& a, cudaStream_t stream) {
    if (a.T * a.D == 0) return;
    launch_pdl(moe_combine_kernel, blocks_for(a.T * a.D), kThreads, 0, stream, 1, a);
}

}  // namespace dsv4::cuda
