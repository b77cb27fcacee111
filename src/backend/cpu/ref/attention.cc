// Reference sink attention over the sliding window plus compressed entries (one softmax),
// and the ring write that follows each chunk.
#include <algorithm>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/thread_pool.h"

namespace dsv4::cpu_ref {
namespace {

// Pointers to the K=V rows that token t may see (see AttentionArgs for the rule).
void gather_keys(const ops::AttentionArgs& a, int t, std::vector<const float*>& keys) {
    keys.clear();
    const ops::StepDesc& st = a.step;
    const int b = st.tok_row[t];
    const int64_t p = st.tok_pos[t], pos0 = st.row_pos0[b];
    const int64_t slot = st.row_slot[b];
    const float* ring = a.ring + slot * a.W * a.hd;
    const float* chunk = a.kv + static_cast<int64_t>(st.row_start[b]) * a.hd;
    const int64_t first = std::max<int64_t>(0, p - a.W + 1);
    for (int64_t q = first; q < pos0; ++q) keys.push_back(ring + (q % a.W) * a.hd);
    for (int64_t q = std::max(first, pos0); q <= p; ++q) keys.push_back(chunk + (q - pos0) * a.hd);
    if (a.entries == nullptr) return;
    const float* entries = a.entries + slot * a.n_entries * a.hd;
    const int64_t valid = (p + 1) / a.compress_rate;
    DSV4_DASSERT(valid <= a.n_entries, "position ", p, " past the slot's ", a.n_entries,
                 " entries");
    if (a.topk == nullptr) {
        for (int64_t e = 0; e < valid; ++e) keys.push_back(entries + e * a.hd);
    } else {
        for (int j = 0; j < a.K; ++j) {
            const int32_t e = a.topk[static_cast<int64_t>(t) * a.K + j];
            if (e < 0) continue;
            DSV4_DASSERT(e < valid, "indexer picked entry ", e, " of ", valid);
            keys.push_back(entries + static_cast<int64_t>(e) * a.hd);
        }
    }
}

}  // namespace

void attention(const ops::AttentionArgs& a) {
    parallel_for(static_cast<int64_t>(a.step.T) * a.H, 1, [&](int64_t begin, int64_t end) {
        std::vector<const float*> keys;
        std::vector<float> z;
        std::vector<double> acc(a.hd);
        int last_t = -1;
        for (int64_t th = begin; th < end; ++th) {
            const int t = static_cast<int>(th / a.H), h = static_cast<int>(th % a.H);
            if (t != last_t) {
                gather_keys(a, t, keys);
                last_t = t;
            }
            const float* q = a.q + th * a.hd;
            z.resize(keys.size());
            // The sink joins the max so exp never overflows; it only enters the denominator.
            float mx = a.sink[h];
            for (size_t j = 0; j < keys.size(); ++j) {
                z[j] = static_cast<float>(dot(q, keys[j], a.hd)) * a.softmax_scale;
                mx = std::max(mx, z[j]);
            }
            double denom = std::exp(static_cast<double>(a.sink[h]) - mx);
            std::fill(acc.begin(), acc.end(), 0.0);
            for (size_t j = 0; j < keys.size(); ++j) {
                const double e = std::exp(static_cast<double>(z[j]) - mx);
                denom += e;
                for (int d = 0; d < a.hd; ++d) acc[d] += e * keys[j][d];
            }
            float* out = a.out + th * a.hd;
            for (int d = 0; d < a.hd; ++d) out[d] = static_cast<float>(acc[d] / denom);
        }
    });
}

void ring_write(const ops::RingWriteArgs& a) {
    const ops::StepDesc& st = a.step;
    for (int b = 0; b < st.B; ++b) {
        float* ring = a.ring + static_cast<int64_t>(st.row_slot[b]) * a.W * a.hd;
        for (int i = std::max(0, st.row_len[b] - a.W); i < st.row_len[b]; ++i) {
            const float* src = a.kv + static_cast<int64_t>(st.row_start[b] + i) * a.hd;
            std::copy(src, src + a.hd, ring + ((st.row_pos0[b] + i) % a.W) * a.hd);
        }
    }
}

}  // namespace dsv4::cpu_ref
