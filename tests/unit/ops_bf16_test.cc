// The bf16 reference mode's rounding (RoundTrip::kBf16, kHadamardBf16Fp4 and the ops'
// round_bf16 flags): by hand where the rounding shows, else the plain op followed by the round
// trip.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/fp_codes.h"
#include "formats/cache_row.h"
#include "unit_util.h"

namespace dsv4 {
namespace {

std::vector<float> bf16_of(std::vector<float> v) {
    cpu_ref::round_trip({v.data(), 1, static_cast<int>(v.size()), static_cast<int>(v.size()), 1,
                         ops::RoundTrip::kBf16});
    return v;
}

TEST(OpsBf16, RoundTripIsNearestEvenOnTheFirstDims) {
    // bf16 keeps 8 significant bits: the ulp of [1, 2) is 2^-7. 1 + 2^-8 is a tie to 1 (even);
    // 1 + 3 * 2^-8 a tie to 1 + 2^-6 (even); 1 + 2^-8 + 2^-12 is above the tie. The last of the
    // 4 dims is outside `dims` and stays.
    std::vector<float> x = {1 + 0x1p-8f, 1 + 3 * 0x1p-8f, 1 + 0x1p-8f + 0x1p-12f, 1 + 0x1p-8f};
    cpu_ref::round_trip({x.data(), 1, 4, 3, 1, ops::RoundTrip::kBf16});
    EXPECT_EQ(x, (std::vector<float>{1.0f, 1 + 0x1p-6f, 1 + 0x1p-7f, 1 + 0x1p-8f}));
}

TEST(OpsBf16, HadamardBf16Fp4RoundsTheRotatedRowToBf16First) {
    const int w = 64;
    const std::vector<float> x = unit::lcg_values(2 * w, 7);
    std::vector<float> got = x, want = x;
    cpu_ref::round_trip({got.data(), 2, w, w, 32, ops::RoundTrip::kHadamardBf16Fp4});
    for (int r = 0; r < 2; ++r) {
        float* row = want.data() + r * w;
        hadamard_rotate(row, w);
        for (int i = 0; i < w; ++i) row[i] = bf16_round(row[i]);
        for (int b = 0; b < w; b += 32) {
            float amax = 0;
            for (int i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(row[i]));
            for (int i = b; i < b + 32; ++i) row[i] = fp4_round_trip(row[i], fp4_block_scale(amax));
        }
    }
    EXPECT_EQ(got, want);
}

TEST(OpsBf16, LinearOutputIsTheLinearRoundedToBf16) {
    const int M = 3, K = 40, N = 5;
    const std::vector<float> wv = unit::lcg_values(N * K, 1), x = unit::lcg_values(M * K, 2);
    const QuantWeight q = unit::dense_f32(wv, N, K);
    const ops::Weight w = cpu_ref::wrap(q);
    std::vector<float> plain(M * N), rounded(M * N);
    cpu_ref::linear({x.data(), &w, plain.data(), M, N});
    ops::LinearArgs a{x.data(), &w, rounded.data(), M, N};
    a.round_bf16 = true;
    cpu_ref::linear(a);
    EXPECT_EQ(rounded, bf16_of(plain));
    EXPECT_NE(rounded, plain);
}

TEST(OpsBf16, WeightedNormIsTheNormRoundedToBf16) {
    const int dim = 48;
    const std::vector<float> x = unit::lcg_values(2 * dim, 3), w = unit::lcg_values(dim, 4);
    std::vector<float> plain(2 * dim), rounded(2 * dim);
    cpu_ref::rms_norm({x.data(), w.data(), plain.data(), 2, dim, 1e-6f});
    cpu_ref::rms_norm({x.data(), w.data(), rounded.data(), 2, dim, 1e-6f, true});
    EXPECT_EQ(rounded, bf16_of(plain));
}

TEST(OpsBf16, UnweightedNormRoundsEveryIntermediate) {
    // x = (3, 5): squares 9, 25, mean 17, 17 + 1e-6 -> bf16 17, rsqrt(17) = 0.2425356 -> bf16
    // 0.2421875 (= 248 * 2^-10); y = (3, 5) * 0.2421875 = (0.7265625, 1.2109375), both bf16.
    // The float32 norm gives (0.7276069, 1.2126781).
    const std::vector<float> x = {3, 5};
    std::vector<float> y(2);
    cpu_ref::rms_norm({x.data(), nullptr, y.data(), 1, 2, 1e-6f, true});
    EXPECT_EQ(y, (std::vector<float>{0.7265625f, 1.2109375f}));
    // (2, 2): mean + eps rounds back to 4, rsqrt 0.5 exactly, y = 1 (float32: 0.99999988).
    const std::vector<float> twos = {2, 2};
    cpu_ref::rms_norm({twos.data(), nullptr, y.data(), 1, 2, 1e-6f, true});
    EXPECT_EQ(y, (std::vector<float>{1.0f, 1.0f}));
}

TEST(OpsBf16, RopeRoundsTheRotatedDimsOnly) {
    // 2 heads of 6 dims, the last 4 rotated; the NoPE dims keep their non-bf16 values.
    std::vector<float> plain = unit::lcg_values(12, 5), inv_freq = {0.7f, 0.05f};
    std::vector<float> rounded = plain;
    const int64_t pos = 11;
    cpu_ref::rope({plain.data(), inv_freq.data(), &pos, 1, 2, 6, 4});
    cpu_ref::rope({rounded.data(), inv_freq.data(), &pos, 1, 2, 6, 4, false, 1.0f, true});
    for (int i = 0; i < 12; ++i)
        EXPECT_EQ(rounded[i], i % 6 < 2 ? plain[i] : bf16_round(plain[i])) << i;
}

TEST(OpsBf16, HyperConnectionOutputsAreRoundedToBf16) {
    const int n = 2, D = 8, T = 2, mix = (2 + n) * n;
    const std::vector<float> x = unit::lcg_values(T * n * D, 6),
                             fn = unit::lcg_values(mix * n * D, 7), base = unit::lcg_values(mix, 8),
                             scale = {0.9f, 1.1f, 0.7f}, f = unit::lcg_values(T * D, 9);
    std::vector<float> y(T * D), yb(T * D), post(T * n), comb(T * n * n), postb(T * n),
        combb(T * n * n);
    cpu_ref::hc_pre({x.data(), fn.data(), base.data(), scale.data(), y.data(), post.data(),
                     comb.data(), T, n, D, 3});
    cpu_ref::hc_pre({x.data(), fn.data(), base.data(), scale.data(), yb.data(), postb.data(),
                     combb.data(), T, n, D, 3, 1e-6f, 1e-6f, true});
    EXPECT_EQ(yb, bf16_of(y));
    EXPECT_EQ(postb, post);  // the mixing weights stay float32
    EXPECT_EQ(combb, comb);
    std::vector<float> s(T * n * D), sb(T * n * D);
    cpu_ref::hc_post({f.data(), x.data(), post.data(), comb.data(), s.data(), T, n, D});
    cpu_ref::hc_post({f.data(), x.data(), post.data(), comb.data(), sb.data(), T, n, D, true});
    EXPECT_EQ(sb, bf16_of(s));
    std::vector<float> h(T * D), hb(T * D);
    cpu_ref::hc_head({x.data(), fn.data(), base.data(), scale.data(), h.data(), T, n, D});
    cpu_ref::hc_head(
        {x.data(), fn.data(), base.data(), scale.data(), hb.data(), T, n, D, 1e-6f, 1e-6f, true});
    EXPECT_EQ(hb, bf16_of(h));
}

// Window-only attention of one head (scale 1) over a one-row step, in the bf16 mode.
ops::AttentionArgs bf16_window(std::vector<float>& q, std::vector<float>& kv,
                               std::vector<float>& ring, std::vector<float>& sink,
                               std::vector<float>& out, ops::HostStep& step, int hd, int W) {
    ops::AttentionArgs a;
    a.q = q.data();
    a.kv = kv.data();
    a.ring = ring.data();
    a.sink = sink.data();
    a.out = out.data();
    a.step = step.view();
    a.H = 1;
    a.hd = hd;
    a.W = W;
    a.round_bf16 = true;
    return a;
}

TEST(OpsBf16, AttentionRoundsProbabilitiesAndOutput) {
    // One query, two keys k0 = (1, 0), k1 = (0, 1) with V = K; q = (1, 0.2), scale 1:
    // z = (1, 0.2), max 1, p = (1, e^-0.8). P·V takes bf16(e^-0.8) = 0.44921875 (e^-0.8 =
    // 0.449329), the denominator the float32 p plus e^(sink - 1); the output rounds to bf16.
    // Two tokens with the same q: token 1 sees k0 and k1, token 0 only k0.
    std::vector<float> q2 = {1, 0.2f, 1, 0.2f}, kv = {1, 0, 0, 1}, ring(2 * 4, 0.0f), sink = {0.3f},
                       out2(4);
    ops::HostStep step;
    step.add_row(0, 0, 2);
    ops::AttentionArgs a = bf16_window(q2, kv, ring, sink, out2, step, 2, 4);
    cpu_ref::attention(a);
    const float p1 = std::exp(0.2f - 1.0f);
    const float denom = 1.0f + p1 + std::exp(0.3f - 1.0f);
    EXPECT_EQ(bf16_round(p1), 0.44921875f);
    EXPECT_EQ(out2[2], bf16_round(1.0f / denom));
    EXPECT_EQ(out2[3], bf16_round(0.44921875f / denom));
    EXPECT_EQ(out2[0], bf16_round(1.0f / (1.0f + std::exp(0.3f - 1.0f))));
}

TEST(OpsBf16, AttentionRunsTheSoftmaxInBlocksOf64Keys) {
    // 65 keys in the window (all from this step): the 65th key, alone in the second block,
    // raises the running max, so the first block's bf16 probabilities are rescaled by
    // alpha = e^(m1 - m2) instead of being rounded against the final max.
    const int T = 65, hd = 2;
    std::vector<float> q(T * hd), kv(T * hd), ring(T * hd, 0.0f), sink = {-1e4f}, out(T * hd);
    for (int t = 0; t < T; ++t) {
        q[t * hd] = 1, q[t * hd + 1] = 0;
        kv[t * hd] = t == T - 1 ? 2.0f : 0.01f * static_cast<float>(t);
        kv[t * hd + 1] = static_cast<float>(t % 3);
    }
    ops::HostStep step;
    step.add_row(0, 0, T);
    ops::AttentionArgs a = bf16_window(q, kv, ring, sink, out, step, hd, T);
    cpu_ref::attention(a);
    // The last token by the running-softmax recurrence, written out (block sums in double).
    float m1 = -INFINITY, sum = 0;
    double acc[2] = {0, 0};
    for (int j = 0; j < 64; ++j) m1 = std::max(m1, kv[j * hd]);
    for (int j = 0; j < 64; ++j) {
        const float p = std::exp(kv[j * hd] - m1);
        sum += p;
        for (int d = 0; d < hd; ++d) acc[d] += double(bf16_round(p)) * kv[j * hd + d];
    }
    const float m2 = kv[64 * hd], alpha = std::exp(m1 - m2);
    sum = sum * alpha + 1.0f;
    for (int d = 0; d < hd; ++d) {
        const float total = static_cast<float>(acc[d]) * alpha + kv[64 * hd + d];
        EXPECT_EQ(out[64 * hd + d], bf16_round(total / sum)) << d;
    }
}

TEST(OpsBf16, IndexScoresInBf16TieToTheLowerEntry) {
    // One head, w = 1, q = 1: entry 0 scores 1, entry 1 scores 1 + 2^-9. Top-1 in float32 is
    // entry 1; in bf16 both scores are 1 and the tie goes to the lower entry.
    std::vector<float> q = {1}, w = {1}, keys = {1, 1 + 0x1p-9f};
    std::vector<int32_t> out(1);
    ops::HostStep step;
    step.add_row(0, 1, 1);  // position 1, m = 1: two valid entries
    ops::IndexerTopkArgs a{q.data(), w.data(), keys.data(), out.data(), step.view(), 2, 1, 1, 1, 1};
    cpu_ref::indexer_topk(a);
    EXPECT_EQ(out[0], 1);
    a.round_bf16 = true;
    cpu_ref::indexer_topk(a);
    EXPECT_EQ(out[0], 0);
}

TEST(OpsBf16, MoeRoundsEachExpertStage) {
    // D = I = 2, one token, experts 1 then 0 selected (weights 0.3, 0.6), dense weights.
    const std::vector<float> w1v = {1.1f, 0.3f, -0.2f, 0.9f}, w3v = {0.7f, -0.4f, 0.5f, 1.3f},
                             w2v = {0.6f, 0.25f, -0.8f, 1.05f};
    const std::vector<float> w1b = {0.4f, 1.2f, 0.8f, -0.6f}, w3b = {1.3f, 0.1f, -0.9f, 0.2f},
                             w2b = {0.35f, -1.1f, 0.45f, 0.7f};
    const QuantWeight w1[2] = {unit::dense_f32(w1v, 2, 2), unit::dense_f32(w1b, 2, 2)};
    const QuantWeight w3[2] = {unit::dense_f32(w3v, 2, 2), unit::dense_f32(w3b, 2, 2)};
    const QuantWeight w2[2] = {unit::dense_f32(w2v, 2, 2), unit::dense_f32(w2b, 2, 2)};
    const cpu_ref::CpuExperts ex{{w1, w1 + 2}, {w3, w3 + 2}, {w2, w2 + 2}};
    const ops::ExpertWeights h = cpu_ref::wrap(ex, 2, 2);
    const std::vector<float> x = {bf16_round(0.8125f), bf16_round(-1.375f)};
    const std::vector<int32_t> sel = {1, 0};
    const std::vector<float> weight = {0.3f, 0.6f};
    std::vector<float> out(2);
    ops::MoeArgs a;
    a.x = x.data();
    a.sel = sel.data();
    a.weight = weight.data();
    a.experts = &h;
    a.out = out.data();
    a.T = 1, a.D = 2, a.I = 2, a.E = 2, a.k = 2;
    a.round_bf16 = true;
    cpu_ref::moe(a);
    // By hand: g, u rounded; h = bf16(silu(g) * u * w); y = bf16(W2 h); the sum rounded.
    auto expert = [&](const std::vector<float>& a1, const std::vector<float>& a3,
                      const std::vector<float>& a2, float wt) {
        float hh[2];
        for (int i = 0; i < 2; ++i) {
            const float g = bf16_round(
                static_cast<float>(double(a1[2 * i]) * x[0] + double(a1[2 * i + 1]) * x[1]));
            const float u = bf16_round(
                static_cast<float>(double(a3[2 * i]) * x[0] + double(a3[2 * i + 1]) * x[1]));
            hh[i] = bf16_round(g * cpu_ref::sigmoid(g) * u * wt);
        }
        std::vector<float> y(2);
        for (int d = 0; d < 2; ++d)
            y[d] = bf16_round(
                static_cast<float>(double(a2[2 * d]) * hh[0] + double(a2[2 * d + 1]) * hh[1]));
        return y;
    };
    const std::vector<float> e0 = expert(w1v, w3v, w2v, 0.6f), e1 = expert(w1b, w3b, w2b, 0.3f);
    for (int d = 0; d < 2; ++d) EXPECT_EQ(out[d], bf16_round(0.0f + e0[d] + e1[d])) << d;
}

}  // namespace
}  // namespace dsv4
