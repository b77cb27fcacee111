// Reference KV compressor with the reference's buffer layout: HCA keeps the open block in
// slots [0, m); CSA keeps the previous complete block in [0, m) (only its first-half
// channels are read) and the open block in [m, 2m). A completed entry is pooled, then
// RMS-normed and roped by the plain reference ops (the fused op is their composition), and
// stored in the entry format.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/thread_pool.h"

namespace dsv4::cpu_ref {
namespace {

// Per-channel softmax pooling of one entry from one slot's state rows.
void pool_entry(const ops::CompressArgs& a, const float* state_kv, const float* state_gate,
                float* entry) {
    const int m = a.m, hd = a.hd, width = a.coff * hd;
    const int slots = a.coff * m;
    // Column of state row s feeding channel c: CSA reads the previous block's Ca, the open
    // block's Cb; HCA the one block.
    auto col = [&](int s, int c) { return a.coff == 2 && s >= m ? hd + c : c; };
    for (int c = 0; c < hd; ++c) {
        float mx = -std::numeric_limits<float>::infinity();
        for (int s = 0; s < slots; ++s) mx = std::max(mx, state_gate[s * width + col(s, c)]);
        double denom = 0, acc = 0;
        for (int s = 0; s < slots; ++s) {
            const float g = state_gate[s * width + col(s, c)];
            if (g == -std::numeric_limits<float>::infinity()) continue;
            const double e = std::exp(static_cast<double>(g) - mx);
            denom += e;
            acc += e * state_kv[s * width + col(s, c)];
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
                const int row = a.coff == 2 ? m + j : j;
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
                pool_entry(a, skv, sgate, x);
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
                if (a.coff == 2) {
                    std::copy(skv + m * width, skv + 2 * m * width, skv);
                    std::copy(sgate + m * width, sgate + 2 * m * width, sgate);
                }
            }
        }
    });
}

}  // namespace dsv4::cpu_ref
