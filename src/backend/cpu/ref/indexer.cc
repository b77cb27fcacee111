// Reference lightning-indexer scores and top-k with the documented tie rule; the keys are
// decoded from their cache format first.
#include <algorithm>
#include <numeric>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/fp_codes.h"
#include "base/thread_pool.h"

namespace dsv4::cpu_ref {

void indexer_topk(const ops::IndexerTopkArgs& a) {
    const ops::StepDesc& st = a.step;
    const int64_t rb = cache_row_bytes(a.key_format, a.hi);
    const bool rotate_q = a.key_format.type == CacheType::kFp4 && !a.q_rotated;
    DSV4_ASSERT(a.q_rope.inv_freq == nullptr ||
                    (a.q_rope.heads == a.Hi && a.q_rope.rope_dim <= a.hi && !a.q_rope.inverse),
                "indexer_topk: a fused rope of ", a.q_rope.heads, " heads x ", a.q_rope.rope_dim,
                " dims on ", a.Hi, " x ", a.hi);
    parallel_for(st.T, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> score, keys, q;
        std::vector<int32_t> order;
        for (int64_t t = begin; t < end; ++t) {
            const int64_t valid = (st.tok_pos[t] + 1) / a.m;
            DSV4_DASSERT(valid <= a.n_entries, "position past the slot's entries");
            const auto* stored = reinterpret_cast<const uint8_t*>(a.keys) +
                                 st.row_slot[st.tok_row[t]] * a.n_entries * rb;
            keys.resize(valid * a.hi);
            for (int64_t b = 0; b < valid; ++b)
                decode_cache_row(a.key_format, a.hi, stored + b * rb, keys.data() + b * a.hi);
            q.assign(a.q + t * a.Hi * a.hi, a.q + (t + 1) * a.Hi * a.hi);
            if (const ops::FusedRope& r = a.q_rope; r.inv_freq != nullptr)
                rope({q.data(), r.inv_freq, r.pos + t, 1, a.Hi, a.hi, r.rope_dim, r.inverse,
                      r.scale});
            if (rotate_q)
                for (int h = 0; h < a.Hi; ++h) hadamard_rotate(q.data() + h * a.hi, a.hi);
            score.resize(valid);
            for (int64_t b = 0; b < valid; ++b) {
                double s = 0;
                for (int h = 0; h < a.Hi; ++h) {
                    const double d = dot(q.data() + h * a.hi, keys.data() + b * a.hi, a.hi);
                    const float w = a.w[t * a.Hi + h] * a.w_scale;
                    if (a.round_bf16)  // bf16 dot, ReLU, bf16 product; the sum in fp32
                        s += bf16_round(w * std::max(bf16_round(static_cast<float>(d)), 0.0f));
                    else
                        s += static_cast<double>(w) * std::max(d, 0.0);
                }
                score[b] = a.round_bf16 ? bf16_round(static_cast<float>(s)) : static_cast<float>(s);
            }
            const int64_t keep = std::min<int64_t>(a.K, valid);
            order.resize(valid);
            std::iota(order.begin(), order.end(), 0);
            // Higher score first; exact ties (common: ReLU makes zeros) go to the lower index.
            std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                              [&](int32_t x, int32_t y) {
                                  return score[x] > score[y] || (score[x] == score[y] && x < y);
                              });
            std::sort(order.begin(), order.begin() + keep);
            int32_t* out = a.topk + t * a.K;
            for (int j = 0; j < a.K; ++j) out[j] = j < keep ? order[j] : -1;
        }
    });
}

}  // namespace dsv4::cpu_ref
