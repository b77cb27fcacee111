// Reference KV compressor. HCA keeps the open block in state rows [0, m). CSA keeps two
// blocks by parity: block e in rows [(e % 2) m, (e % 2) m + m), so the previous complete block
// (only its first-half channels are read) is the other half, and completing a block moves
// nothing (DeepSeek's buffer shifts the open block into the previous-block rows instead; the
// pooled entries are the same). Nothing but the completing token's own row then changes at a
// completion, so a rejected speculative draft there leaves only what the right token rewrites
// (docs/engine.md). A completed entry is pooled, then RMS-normed and roped by the plain
// reference ops (the fused op is their composition), and stored in the entry format.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/thread_pool.h"

namespace dsv4::cpu_ref {
namespace {

// Per-channel softmax pooling of entry e from one slot's state rows, in the reference's order
// (CSA: the previous block's rows, then the open block's).
void pool_entry(const ops::CompressArgs& a, int64_t e, const float* state_kv,
                const float* state_gate, float* entry) {
    const int m = a.m, hd = a.hd, width = a.coff * hd;
    const int slots = a.coff * m;
    // Element of the s-th pooled row feeding channel c: CSA reads the previous block's Ca, the
    // open block's Cb; HCA the one block.
    auto at = [&](int s, int c) {
        return a.coff == 2 ? ops::compress_state_row(e + (s >= m ? 0 : -1), s % m, m) * width +
                                 (s >= m ? hd : 0) + c
                           : s * width + c;
    };
    for (int c = 0; c < hd; ++c) {
        float mx = -std::numeric_limits<float>::infinity();
        for (int s = 0; s < slots; ++s) mx = std::max(mx, state_gate[at(s, c)]);
        double denom = 0, acc = 0;
        for (int s = 0; s < slots; ++s) {
            const float g = state_gate[at(s, c)];
            if (g == -std::numeric_limits<float>::infinity()) continue;
            const double ex = std::exp(static_cast<double>(g) - mx);
            denom += ex;
            acc += ex * state_kv[at(s, c)];
        }
        entry[c] = static_cast<float>(acc / denom);
    }
}

}  // namespace

void compress(const ops::CompressArgs& a) {
    const int m = a.m, width = a.coff * a.hd;
    const int64_t state_size = int64_t{a.coff} * m * width;
    const ops::StepDesc& st = a.step;
    const int64_t rb = cache_row_bytes(a.entry_format, a.hd);
    DSV4_ASSERT(
        a.entry_format.type != CacheType::kFp4 || a.entry_round_trip == ops::RoundTrip::kNone,
        "fp4 entries rotate once: no Hadamard round trip before them");
    DSV4_ASSERT(a.entry_round_trip == ops::RoundTrip::kNone ||
                    a.entry_round_trip == ops::RoundTrip::kFp8 ||
                    a.entry_round_trip == ops::RoundTrip::kHadamardFp4 ||
                    a.entry_round_trip == ops::RoundTrip::kHadamardBf16Fp4,
                "no such entry round trip");
    // Rows are different slots: independent.
    parallel_for(st.B, 1, [&](int64_t b_begin, int64_t b_end) {
        for (int64_t b = b_begin; b < b_end; ++b) {
            const int64_t slot = st.row_slot[b];
            float* skv = a.state_kv + slot * state_size;
            float* sgate = a.state_gate + slot * state_size;
            auto* entries = reinterpret_cast<uint8_t*>(a.entries) + slot * a.n_entries * rb;
            std::vector<float> entry(a.hd);
            for (int i = 0; i < st.row_len[b]; ++i) {
                const int64_t t = st.row_start[b] + i, p = st.row_pos0[b] + i;
                const int j = static_cast<int>(p % m);
                const int row = a.coff == 2 ? ops::compress_state_row(p / m, j, m) : j;
                const float* kv = a.kv + t * width;
                const float* gate = a.gate + t * width;
                for (int c = 0; c < width; ++c) {
                    skv[row * width + c] = kv[c];
                    sgate[row * width + c] = gate[c] + a.ape[j * width + c];
                }
                if (j != m - 1) continue;
                const int64_t e = p / m;
                DSV4_ASSERT(e < a.n_entries, "entry ", e, " past the slot's ", a.n_entries);
                float* x = entry.data();
                pool_entry(a, e, skv, sgate, x);
                if (a.round_bf16) round_trip({x, 1, a.hd, a.hd, 1, ops::RoundTrip::kBf16});
                if (a.norm != nullptr) {
                    rms_norm({x, a.norm, x, 1, a.hd, a.eps, a.round_bf16});
                    // Entry e sits at the position of its block's first token, e*m.
                    const int64_t at = e * m;
                    rope({x, a.inv_freq, &at, 1, 1, a.hd, a.rope_dim, false, a.rope_scale,
                          a.round_bf16});
                }
                if (a.entry_round_trip == ops::RoundTrip::kFp8)
                    round_trip({x, 1, a.hd, a.hd - a.rope_dim, 64, ops::RoundTrip::kFp8});
                else if (a.entry_round_trip != ops::RoundTrip::kNone)
                    round_trip({x, 1, a.hd, a.hd, 32, a.entry_round_trip});
                encode_cache_row(a.entry_format, a.hd, x, entries + e * rb);
            }
        }
    });
}

}  // namespace dsv4::cpu_ref
