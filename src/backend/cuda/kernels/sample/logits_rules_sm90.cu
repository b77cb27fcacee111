// The request logits rules (ops/sample.h LogitsRulesArgs) in two launches: the step's tokens
// marked in their slots' token tables (a thread a token, atomics: one slot's tokens may repeat),
// then the sampled rows' logits, each row in slices of kSlice tokens (a block a slice): the
// penalties on every token of the slice, then the slot's bias entries that fall in it (found by
// a binary search of the sorted list; each token is in one slice, so no two blocks write it).
// Every float step is an explicit round-to-nearest intrinsic, as the reference's plain C++ is
// (no contraction), so the results are the reference's bits.
#include <cfloat>
#include <cstdint>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/sample/sample.h"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

constexpr int kMarkThreads = 256;
constexpr int kThreads = 256;
constexpr int kSlice = 4096;

__global__ void __launch_bounds__(kMarkThreads) mark_tokens_kernel(ops::LogitsRulesArgs a) {
    dev::pdl_enter();
    const int64_t t = int64_t{blockIdx.x} * kMarkThreads + threadIdx.x;
    if (t >= a.T) return;
    const int32_t slot = a.row_slot[a.tok_row[t]];
    const ops::SlotRules rule = a.rules[slot];
    if (!rule.on || !rule.count) return;
    unsigned* w = a.counts + slot * a.V + a.ids[t];
    if (a.tok_pos[t] >= rule.output_from) atomicAdd(w, 1u);
    atomicOr(w, ops::kTokenSeen);
}

__global__ void __launch_bounds__(kThreads) apply_rules_kernel(ops::LogitsRulesArgs a) {
    dev::pdl_enter();
    const int64_t r = blockIdx.y;
    const int32_t slot = a.slot[r];
    const ops::SlotRules rule = a.rules[slot];
    if (!rule.on) return;
    const int64_t v0 = int64_t{blockIdx.x} * kSlice, v1 = min(v0 + kSlice, a.V);
    float* l = a.logits + r * a.V;
    if (rule.count) {
        const unsigned* counts = a.counts + slot * a.V;
        for (int64_t v = v0 + threadIdx.x; v < v1; v += kThreads) {
            const unsigned w = counts[v], c = w & ~ops::kTokenSeen;
            float x = l[v];
            if ((w & ops::kTokenSeen) && rule.repetition != 1.0f)
                x = x > 0.0f ? __fdiv_rn(x, rule.repetition) : __fmul_rn(x, rule.repetition);
            x = __fsub_rn(x, __fmul_rn(rule.frequency, static_cast<float>(c)));
            if (c > 0) x = __fsub_rn(x, rule.presence);
            l[v] = x;
        }
    }
    if (rule.n_entries == 0) return;
    __shared__ int first;
    const ops::LogitsRuleEntry* e = a.entries + slot * a.E;
    if (threadIdx.x == 0) {  // the first entry at or after v0
        int lo = 0, hi = rule.n_entries;
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (e[mid].token < v0)
                lo = mid + 1;
            else
                hi = mid;
        }
        first = lo;
    }
    __syncthreads();  // (also orders the penalties' writes before the entries' on one token)
    const int64_t generated = a.tok_pos[a.logit_idx[r]] + 1 - rule.output_from;
    for (int i = first + static_cast<int>(threadIdx.x); i < rule.n_entries && e[i].token < v1;
         i += kThreads) {
        float& x = l[e[i].token];
        x = e[i].ban && generated < rule.min_tokens ? -FLT_MAX : __fadd_rn(x, e[i].bias);
    }
}

}  // namespace

void launch_logits_rules(const ops::LogitsRulesArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.V >= 1 && a.V <= 0x7fffffff && a.E >= 0, "logits_rules: V ", a.V, ", E ", a.E);
    if (a.T > 0)
        launch_pdl(mark_tokens_kernel,
                   static_cast<unsigned>((a.T + kMarkThreads - 1) / kMarkThreads), kMarkThreads, 0,
                   stream, 1, a);
    if (a.R > 0)
        launch_pdl(
            apply_rules_kernel,
            dim3(static_cast<unsigned>((a.V + kSlice - 1) / kSlice), static_cast<unsigned>(a.R)),
            kThreads, 0, stream, 1, a);
}

}  // namespace dsv4::cuda
