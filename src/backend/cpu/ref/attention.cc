// Reference sink attention over the sliding window plus compressed entries (one softmax),
// and the ring write that follows each chunk.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/check.h"
#include "base/fp_codes.h"
#include "base/thread_pool.h"

namespace dsv4::cpu_ref {
namespace {

const uint8_t* row_at(const float* base, int64_t row, int64_t row_bytes) {
    return reinterpret_cast<const uint8_t*>(base) + row * row_bytes;
}

// The K=V rows that token t may see (see AttentionArgs for the rule), decoded into keys
// [n, hd]; `chunk` holds the step's own keys as the cache gives them back.
void gather_keys(const ops::AttentionArgs& a, int t, const std::vector<float>& chunk,
                 std::vector<float>& keys) {
    keys.clear();
    const ops::StepDesc& st = a.step;
    const int b = st.tok_row[t];
    const int64_t p = st.tok_pos[t], pos0 = st.row_pos0[b];
    const int64_t slot = st.row_slot[b];
    const int64_t rb = cache_row_bytes(a.kv_format, a.hd);
    auto push_stored = [&](const uint8_t* row) {
        keys.resize(keys.size() + a.hd);
        decode_cache_row(a.kv_format, a.hd, row, keys.data() + keys.size() - a.hd);
    };
    const int64_t first = std::max<int64_t>(0, p - a.W + 1);
    const int64_t R = a.ring_rows > 0 ? a.ring_rows : a.W;
    for (int64_t q = first; q < pos0; ++q) push_stored(row_at(a.ring, slot * R + q % R, rb));
    const float* own = chunk.data() + static_cast<int64_t>(st.row_start[b]) * a.hd;
    for (int64_t q = std::max(first, pos0); q <= p; ++q)
        keys.insert(keys.end(), own + (q - pos0) * a.hd, own + (q - pos0 + 1) * a.hd);
    if (a.entries == nullptr) return;
    const int64_t base = slot * a.n_entries;
    const int64_t valid = (p + 1) / a.compress_rate;
    DSV4_DASSERT(valid <= a.n_entries, "position ", p, " past the slot's ", a.n_entries,
                 " entries");
    if (a.topk == nullptr) {
        for (int64_t e = 0; e < valid; ++e) push_stored(row_at(a.entries, base + e, rb));
    } else {
        for (int j = 0; j < a.K; ++j) {
            const int32_t e = a.topk[static_cast<int64_t>(t) * a.K + j];
            if (e < 0) continue;
            DSV4_DASSERT(e < valid, "indexer picked entry ", e, " of ", valid);
            push_stored(row_at(a.entries, base + e, rb));
        }
    }
}

// DeepSeek's sparse_attn on bf16 operands (AttentionArgs::round_bf16): a running softmax over
// blocks of 64 keys with fp32 max and sum, each block's probabilities rounded to bf16 before
// they weight V, the sink added to the denominator at the end, the output rounded to bf16.
void attend_bf16(const float* z, size_t n_keys, const float* keys, int hd, float sink, float* out) {
    constexpr size_t kBlock = 64;
    float run_max = -INFINITY, run_sum = 0;
    std::vector<float> acc(hd, 0.0f);
    std::vector<double> block_acc(hd);
    for (size_t j0 = 0; j0 < n_keys; j0 += kBlock) {
        const size_t j1 = std::min(n_keys, j0 + kBlock);
        float new_max = run_max;
        for (size_t j = j0; j < j1; ++j) new_max = std::max(new_max, z[j]);
        const float alpha = std::exp(run_max - new_max);  // 0 for the first block
        float block_sum = 0;
        std::fill(block_acc.begin(), block_acc.end(), 0.0);
        for (size_t j = j0; j < j1; ++j) {
            const float p = std::exp(z[j] - new_max);
            block_sum += p;
            const double pb = bf16_round(p);
            const float* v = keys + j * hd;
            for (int d = 0; d < hd; ++d) block_acc[d] += pb * v[d];
        }
        run_sum = run_sum * alpha + block_sum;
        for (int d = 0; d < hd; ++d) acc[d] = acc[d] * alpha + static_cast<float>(block_acc[d]);
        run_max = new_max;
    }
    run_sum += std::exp(sink - run_max);
    for (int d = 0; d < hd; ++d) out[d] = bf16_round(acc[d] / run_sum);
}

}  // namespace

void attention(const ops::AttentionArgs& a) {
    if (a.q_norm != nullptr) {
        DSV4_ASSERT(a.q_norm->x == a.q && a.q_norm->out == a.q,
                    "attention: q_norm must norm q in place");
        rms_norm(*a.q_norm);
    }
    std::vector<float> chunk(static_cast<size_t>(a.step.T) * a.hd);
    for (int t = 0; t < a.step.T; ++t)
        store_and_load_row(a.kv_format, a.hd, a.kv + int64_t{t} * a.hd,
                           chunk.data() + int64_t{t} * a.hd);
    parallel_for(static_cast<int64_t>(a.step.T) * a.H, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> keys;
        std::vector<float> z;
        std::vector<double> acc(a.hd);
        int last_t = -1;
        for (int64_t th = begin; th < end; ++th) {
            const int t = static_cast<int>(th / a.H), h = static_cast<int>(th % a.H);
            if (t != last_t) {
                gather_keys(a, t, chunk, keys);
                last_t = t;
            }
            const float* q = a.q + th * a.hd;
            const size_t n_keys = keys.size() / a.hd;
            z.resize(n_keys);
            // The sink joins the max so exp never overflows; it only enters the denominator.
            float mx = a.sink[h];
            for (size_t j = 0; j < n_keys; ++j) {
                z[j] = static_cast<float>(dot(q, keys.data() + j * a.hd, a.hd)) * a.softmax_scale;
                mx = std::max(mx, z[j]);
            }
            if (a.round_bf16) {
                attend_bf16(z.data(), n_keys, keys.data(), a.hd, a.sink[h], a.out + th * a.hd);
                continue;
            }
            double denom = std::exp(static_cast<double>(a.sink[h]) - mx);
            std::fill(acc.begin(), acc.end(), 0.0);
            for (size_t j = 0; j < n_keys; ++j) {
                const double e = std::exp(static_cast<double>(z[j]) - mx);
                denom += e;
                const float* v = keys.data() + j * a.hd;
                for (int d = 0; d < a.hd; ++d) acc[d] += e * v[d];
            }
            float* out = a.out + th * a.hd;
            for (int d = 0; d < a.hd; ++d) out[d] = static_cast<float>(acc[d] / denom);
        }
    });
    if (const ops::FusedRope* r = a.out_rope; r != nullptr && r->inv_freq != nullptr)
        rope({a.out, r->inv_freq, r->pos, int64_t{a.step.T} * a.H / r->heads, r->heads, a.hd,
              r->rope_dim, r->inverse, r->scale, a.round_bf16});
    if (a.ring_out != nullptr)
        ring_write({a.kv, a.ring_out, a.step, a.W, a.hd, a.kv_format, a.ring_rows});
}

void ring_write(const ops::RingWriteArgs& a) {
    const ops::StepDesc& st = a.step;
    const int64_t rb = cache_row_bytes(a.kv_format, a.hd);
    const int64_t R = a.ring_rows > 0 ? a.ring_rows : a.W;
    for (int b = 0; b < st.B; ++b) {
        auto* ring = reinterpret_cast<uint8_t*>(a.ring) + int64_t{st.row_slot[b]} * R * rb;
        for (int i = std::max(0, st.row_len[b] - a.W); i < st.row_len[b]; ++i) {
            const float* src = a.kv + static_cast<int64_t>(st.row_start[b] + i) * a.hd;
            encode_cache_row(a.kv_format, a.hd, src, ring + ((st.row_pos0[b] + i) % R) * rb);
        }
    }
}

}  // namespace dsv4::cpu_ref
