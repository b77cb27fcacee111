// Launchers of the MoE's element-wise kernels around the expert products (the products
// themselves are the weight GEMV, or the dense linear for dense checkpoints): spreading each
// token's row over its k expert slots, the clipped SwiGLU of a slot's [gate | up] row, and the
// weighted combine with the shared expert. Raw device pointers and a stream; capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

// out[row(t * k + j), :] = x[t, :] for j < k; row = identity when `row` is nullptr.
void launch_expand_rows(const float* x /*[T, D]*/, const int32_t* row /*[T*k] or nullptr*/,
                        float* out /*[rows, D]*/, int64_t T, int k, int64_t D, cudaStream_t stream);

// Groups the P (token, slot) pairs by expert (prefill): expert e's pairs fill ceil(n_e / 16)
// groups of 16 rows in expert order; pair p goes to row pair_row[p] (its group * 16 + its rank
// among the expert's pairs, in arrival order: any order gives the same per-row results). Groups
// past the last used one name expert 0 (their rows are zeros; their outputs are not read).
// One block; no allocation.
struct MoeGroupArgs {
    const int32_t* sel = nullptr;     // [P] expert of each pair
    int32_t* group_expert = nullptr;  // [n_groups] expert of each group of 16 rows
    int32_t* pair_row = nullptr;      // [P]
    int64_t P = 0;
    int E = 0;
    int64_t n_groups = 0;  // ceil(P / 16) + E: enough for any routing
};
void launch_moe_group(const MoeGroupArgs& a, cudaStream_t stream);

// A decode batch's pairs gathered by expert into groups of up to m rows (ops::
// kMoeDecodeGroupRows): the experts in ascending order, each expert's pairs in pair order
// (a stable counting sort), a group a run of up to m of them. Pair p goes to row pair_row[p] =
// g m + slot of its group g; group g's expert is group_expert[g] for g < *n_groups, the groups
// formed (at most P); later groups name expert 0 and are not run. One block; P < 4 E (the
// batches ops::moe_grouped_by_expert leaves ungrouped), E <= 1024.
struct MoeCompactArgs {
    const int32_t* sel = nullptr;     // [P] expert of each pair
    int32_t* group_expert = nullptr;  // [P]
    int32_t* pair_row = nullptr;      // [P]
    int32_t* n_groups = nullptr;      // [1]
    int64_t P = 0;
    int E = 0;
    int m = 0;
};
void launch_moe_compact_groups(const MoeCompactArgs& a, cudaStream_t stream);

// a[g, i] = silu(min(h[g, i], L)) * clamp(h[g, I + i], -L, L) (L = 0: no clip), times
// weight[g] when weight is given (the reference numerics' order: weight before w2).
struct MoeSwigluArgs {
    const float* h = nullptr;       // [G, 2*I] w1 | w3 outputs of each slot
    const float* weight = nullptr;  // [G] routing weights, or nullptr
    float* a = nullptr;             // [G, I]
    int64_t G = 0;
    int I = 0;
    float limit = 0.0f;
};
void launch_moe_swiglu(const MoeSwigluArgs& a, cudaStream_t stream);

// out[t, :] = sum_j (weight[t, j] * y[t*k + j, :]) in j order, then + shared[t, :]: the CPU
// reference's order. weight nullptr: the slots are already weighted. sel given: the slots are
// summed in ascending expert id instead (ties in slot order), as DeepSeek's loop over the
// experts does (the bf16 reference mode, MoeArgs::round_bf16).
struct MoeCombineArgs {
    const float* y = nullptr;       // [rows, D] each slot's expert output at row(t * k + j)
    const float* weight = nullptr;  // [T, k] or nullptr
    const float* shared = nullptr;  // [T, D] shared expert output, or nullptr
    float* out = nullptr;           // [T, D]
    int64_t T = 0;
    int k = 0;
    int64_t D = 0;
    const int32_t* row = nullptr;  // [T*k] row of each pair in y, or nullptr (identity)
    const int32_t* sel = nullptr;  // [T*k] expert of each pair, or nullptr (slot order)
};
void launch_moe_combine(const MoeCombineArgs& a, cudaStream_t stream);

// One token with a stacked shared expert (expert `shared_id` of the GEMV stacks): the k + 1
// groups' expert ids (the token's k selections, then the shared expert) and their output
// scales (the routing weights, then 1); and the two accumulate outputs of the token's launches
// cleared (w1|w3's h and w2's out), which would otherwise be two memset nodes of the graph.
void launch_moe_ids_with_shared(const int32_t* sel /*[k]*/, const float* weight /*[k]*/, int k,
                                int32_t shared_id, int32_t* ids /*[k + 1]*/,
                                float* scale /*[k + 1]*/, float* h /*[n_h]*/, int64_t n_h,
                                float* out /*[n_out]*/, int64_t n_out, cudaStream_t stream);

// Ranks (docs/parallel.md): each of the P pairs' experts in this rank's ids, sel[p] - first when
// the rank holds it ([first, first + count)); a pair of another rank's expert goes to expert 0
// with weight 0, so its product adds nothing (expert 0's weights are read again, mostly from L2)
// and the rank's sum is its own experts' part.
void launch_moe_local_slots(const int32_t* sel /*[P]*/, const float* weight /*[P]*/, int64_t P,
                            int first, int count, int32_t* sel_out /*[P]*/,
                            float* weight_out /*[P]*/, cudaStream_t stream);

}  // namespace dsv4::cuda
