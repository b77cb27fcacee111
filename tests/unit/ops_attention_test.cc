// Sink attention over the sliding window (ring + chunk) and compressed entries, ring write.
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "unit_util.h"

namespace dsv4 {
namespace {

// A one-row step: T tokens from position pos0, in slot 0 (kept alive for the test's duration).
ops::StepDesc one_row(int64_t pos0, int T) {
    static std::deque<ops::HostStep> keep;
    keep.emplace_back().add_row(0, pos0, T);
    return keep.back().view();
}

constexpr float kNoSink = -1e4f;  // exp(sink - max) == 0: the softmax is a plain average

TEST(OpsAttention, OneKeyIsScaledBySinkRatio) {
    // q = [1, 0], k = [2, 3], scale 0.5 -> z = 1; out = k e^z / (e^z + e^sink).
    std::vector<float> q = {1, 0}, kv = {2, 3}, ring(2 * 4, 0.0f), sink = {0.5f}, out(2);
    cpu_ref::attention({.q = q.data(),
                        .kv = kv.data(),
                        .ring = ring.data(),
                        .sink = sink.data(),
                        .out = out.data(),
                        .step = one_row(0, 1),
                        .H = 1,
                        .hd = 2,
                        .W = 4,
                        .softmax_scale = 0.5f});
    const double f = std::exp(1.0) / (std::exp(1.0) + std::exp(0.5));
    EXPECT_NEAR(out[0], 2 * f, 1e-6);
    EXPECT_NEAR(out[1], 3 * f, 1e-6);
}

TEST(OpsAttention, SinkOnlyInDenominatorPerHead) {
    // Two chunk keys, two heads with different sinks. Weights e^z_j / (sum e^z + e^sink[h]).
    const int H = 2, hd = 2;
    std::vector<float> q = {1, 0, 0, 2,    // t = 0: head 0, head 1
                            1, 0, 0, 2};   // t = 1
    std::vector<float> kv = {1, 0, 0, 1};  // positions 0 and 1
    std::vector<float> ring(4 * hd, 0.0f), sink = {kNoSink, 1.0f}, out(2 * H * hd);
    cpu_ref::attention({.q = q.data(),
                        .kv = kv.data(),
                        .ring = ring.data(),
                        .sink = sink.data(),
                        .out = out.data(),
                        .step = one_row(0, 2),
                        .H = H,
                        .hd = hd,
                        .W = 4,
                        .softmax_scale = 1.0f});
    // t = 0 sees only key 0. Head 0 (no sink): out = k0. Head 1: z = 0 -> 1 / (1 + e).
    EXPECT_NEAR(out[0], 1.0, 1e-6);
    EXPECT_NEAR(out[1], 0.0, 1e-6);
    EXPECT_NEAR(out[2], 1.0 / (1.0 + std::exp(1.0)), 1e-6);
    EXPECT_NEAR(out[3], 0.0, 1e-6);
    // t = 1 sees keys 0 and 1. Head 0: z = (1, 0); head 1: z = (0, 2), sink 1.
    const double e = std::exp(1.0);
    EXPECT_NEAR(out[4], e / (e + 1), 1e-6);
    EXPECT_NEAR(out[5], 1 / (e + 1), 1e-6);
    const double d1 = 1 + std::exp(2.0) + e;
    EXPECT_NEAR(out[6], 1 / d1, 1e-6);
    EXPECT_NEAR(out[7], std::exp(2.0) / d1, 1e-6);
    // The weights of head 1 sum to less than one: the sink's value is zero.
    EXPECT_LT(out[6] + out[7], 1.0f);
}

TEST(OpsAttention, WindowRingBeforeChunkPlusChunk) {
    // W = 3, hd = 1, q = 0 so every visible key has the same weight (no sink): out = mean.
    // Ring holds positions 2, 3, 4 (slot = pos % 3); position 2 carries 1000 and must be
    // outside both queries' windows. Chunk: positions 5, 6.
    std::vector<float> ring(3);
    ring[2 % 3] = 1000;
    ring[3 % 3] = 3;
    ring[4 % 3] = 4;
    std::vector<float> kv = {5, 6}, q = {0, 0}, sink = {kNoSink}, out(2);
    cpu_ref::attention({.q = q.data(),
                        .kv = kv.data(),
                        .ring = ring.data(),
                        .sink = sink.data(),
                        .out = out.data(),
                        .step = one_row(5, 2),
                        .H = 1,
                        .hd = 1,
                        .W = 3,
                        .softmax_scale = 1.0f});
    EXPECT_NEAR(out[0], (3 + 4 + 5) / 3.0, 1e-5);  // positions 3, 4, 5
    EXPECT_NEAR(out[1], (4 + 5 + 6) / 3.0, 1e-5);  // positions 4, 5, 6
}

TEST(OpsFused, AttentionWithOutRopeIsAttentionThenInverseRope) {
    // The fused entry point against its plain composition, bit for bit: 3 heads of 8 dims (the
    // last 4 rotated), 5 tokens of a chunk from position 9, in both bf16 modes.
    const int H = 3, hd = 8, rd = 4, T = 5, W = 4;
    const std::vector<float> q = unit::lcg_values(T * H * hd, 7), kv = unit::lcg_values(T * hd, 8),
                             ring = unit::lcg_values(W * hd, 9), sink = {0.1f, -0.2f, 0.3f},
                             inv = {0.5f, 0.01f};
    const ops::StepDesc st = one_row(9, T);
    for (bool bf16 : {false, true}) {
        std::vector<float> fused(T * H * hd), plain(T * H * hd);
        const ops::FusedRope r{inv.data(), st.tok_pos, H, rd, 1.25f, /*inverse=*/true};
        ops::AttentionArgs a{.q = q.data(),
                             .kv = kv.data(),
                             .ring = ring.data(),
                             .sink = sink.data(),
                             .out = plain.data(),
                             .step = st,
                             .H = H,
                             .hd = hd,
                             .W = W,
                             .softmax_scale = 0.3f,
                             .round_bf16 = bf16};
        cpu_ref::attention(a);
        cpu_ref::rope({plain.data(), inv.data(), st.tok_pos, T, H, hd, rd, true, 1.25f, bf16});
        a.out = fused.data();
        a.out_rope = &r;
        cpu_ref::attention(a);
        EXPECT_EQ(fused, plain) << "bf16 " << bf16;
    }
}

TEST(OpsFused, AttentionWithQueryNormIsNormThenAttention) {
    // AttentionArgs::q_norm against its plain composition, bit for bit: the per-head norm (and
    // rope) in place on q, then attention; q holds the normed rows afterwards. 3 heads of 8
    // dims (the last 4 rotated), 5 tokens from position 9, in both bf16 modes.
    const int H = 3, hd = 8, rd = 4, T = 5, W = 4;
    const std::vector<float> q = unit::lcg_values(T * H * hd, 17),
                             kv = unit::lcg_values(T * hd, 18), ring = unit::lcg_values(W * hd, 19),
                             sink = {0.1f, -0.2f, 0.3f}, inv = {0.5f, 0.01f};
    const ops::StepDesc st = one_row(9, T);
    for (bool bf16 : {false, true}) {
        std::vector<float> q_plain = q, q_fused = q, fused(T * H * hd), plain(T * H * hd);
        const ops::FusedRope r{inv.data(), st.tok_pos, H, rd, 1.25f};
        ops::AttentionArgs a{.q = q_plain.data(),
                             .kv = kv.data(),
                             .ring = ring.data(),
                             .sink = sink.data(),
                             .out = plain.data(),
                             .step = st,
                             .H = H,
                             .hd = hd,
                             .W = W,
                             .softmax_scale = 0.3f,
                             .round_bf16 = bf16};
        cpu_ref::rms_norm({q_plain.data(), nullptr, q_plain.data(), T * H, hd, 1e-6f, bf16, &r});
        cpu_ref::attention(a);
        const ops::RmsNormArgs n{q_fused.data(), nullptr, q_fused.data(), T * H, hd, 1e-6f,
                                 bf16,           &r};
        a.q = q_fused.data();
        a.q_norm = &n;
        a.out = fused.data();
        cpu_ref::attention(a);
        EXPECT_EQ(fused, plain) << "bf16 " << bf16;
        EXPECT_EQ(q_fused, q_plain) << "bf16 " << bf16;
    }
}

TEST(OpsAttention, WindowWithinChunkIsCausal) {
    // pos0 = 0, T = 4, W = 2: query p sees positions max(0, p - 1) .. p of the chunk.
    std::vector<float> ring(2, 777.0f), kv = {1, 10, 100, 1000}, q(4, 0.0f), sink = {kNoSink},
                                        out(4);
    cpu_ref::attention({.q = q.data(),
                        .kv = kv.data(),
                        .ring = ring.data(),
                        .sink = sink.data(),
                        .out = out.data(),
                        .step = one_row(0, 4),
                        .H = 1,
                        .hd = 1,
                        .W = 2,
                        .softmax_scale = 1.0f});
    EXPECT_NEAR(out[0], 1.0, 1e-5);
    EXPECT_NEAR(out[1], 5.5, 1e-5);
    EXPECT_NEAR(out[2], 55.0, 1e-4);
    EXPECT_NEAR(out[3], 550.0, 1e-3);
}

TEST(OpsAttention, HcaSeesEntriesBelowFloorPPlusOneOverM) {
    // m = 2, W = 1 (only the token itself). Entries e0 = 100, e1 = 1000, e2 = 1e5 (never valid).
    std::vector<float> kv = {1, 2, 3, 4}, q(4, 0.0f), ring(1), sink = {kNoSink}, out(4);
    std::vector<float> entries = {100, 1000, 1e5f};
    cpu_ref::attention({.q = q.data(),
                        .kv = kv.data(),
                        .ring = ring.data(),
                        .entries = entries.data(),
                        .sink = sink.data(),
                        .out = out.data(),
                        .step = one_row(0, 4),
                        .H = 1,
                        .hd = 1,
                        .W = 1,
                        .compress_rate = 2,
                        .n_entries = 1000,
                        .softmax_scale = 1.0f});
    EXPECT_NEAR(out[0], 1.0, 1e-4);                     // p = 0: no entry yet
    EXPECT_NEAR(out[1], (2 + 100) / 2.0, 1e-4);         // p = 1: e0
    EXPECT_NEAR(out[2], (3 + 100) / 2.0, 1e-4);         // p = 2: e0
    EXPECT_NEAR(out[3], (4 + 100 + 1000) / 3.0, 1e-3);  // p = 3: e0, e1
}

TEST(OpsAttention, CsaTopkSkipsMinusOneSlots) {
    // m = 2, pos0 = 5 -> 3 valid entries. topk rows: [0, -1, 2] and [-1, -1, -1].
    std::vector<float> entries = {10, 20, 30};
    std::vector<int32_t> topk = {0, -1, 2, -1, -1, -1};
    std::vector<float> ring(1, 0.0f), kv = {1}, q = {0}, sink = {kNoSink}, out(1);
    ops::AttentionArgs a{.q = q.data(),
                         .kv = kv.data(),
                         .ring = ring.data(),
                         .entries = entries.data(),
                         .topk = topk.data(),
                         .sink = sink.data(),
                         .out = out.data(),
                         .step = one_row(5, 1),
                         .H = 1,
                         .hd = 1,
                         .W = 1,
                         .K = 3,
                         .compress_rate = 2,
                         .n_entries = 1000,
                         .softmax_scale = 1.0f};
    cpu_ref::attention(a);
    EXPECT_NEAR(out[0], (1 + 10 + 30) / 3.0, 1e-5);  // entry 1 not selected
    a.topk = topk.data() + 3;
    cpu_ref::attention(a);
    EXPECT_NEAR(out[0], 1.0, 1e-6);
}

TEST(OpsAttention, WindowAndEntriesShareOneSoftmax) {
    // One window key and one entry with different scores, plus a sink: one denominator.
    std::vector<float> q = {1, 1}, kv = {1, 0}, entries = {0, 2}, ring(2 * 2, 0.0f), sink = {0.0f};
    std::vector<float> out(2);
    cpu_ref::attention({.q = q.data(),
                        .kv = kv.data(),
                        .ring = ring.data(),
                        .entries = entries.data(),
                        .sink = sink.data(),
                        .out = out.data(),
                        .step = one_row(1, 1),
                        .H = 1,
                        .hd = 2,
                        .W = 1,
                        .compress_rate = 2,
                        .n_entries = 1000,
                        .softmax_scale = 1.0f});
    // z_window = 1, z_entry = 2, sink 0.
    const double d = std::exp(1.0) + std::exp(2.0) + 1.0;
    EXPECT_NEAR(out[0], std::exp(1.0) / d, 1e-6);
    EXPECT_NEAR(out[1], 2 * std::exp(2.0) / d, 1e-6);
}

TEST(OpsRingWrite, SlotIsPosModWAndOnlyLastWOfLongChunk) {
    const int W = 3;
    std::vector<float> ring(W, -1.0f), kv = {40, 50};
    cpu_ref::ring_write({kv.data(), ring.data(), one_row(4, 2), W, 1});
    EXPECT_EQ(ring, (std::vector<float>{-1, 40, 50}));  // positions 4, 5 -> slots 1, 2
    std::vector<float> kv5 = {0, 1, 2, 3, 4};
    cpu_ref::ring_write({kv5.data(), ring.data(), one_row(0, 5), W, 1});
    EXPECT_EQ(ring, (std::vector<float>{3, 4, 2}));  // positions 2, 3, 4 -> slots 2, 0, 1
}

TEST(OpsRingWrite, ChunkedDecodeMatchesOneChunk) {
    // Attention over a 7-token sequence fed 3 + 1 + 3 (ring written after each chunk) equals one
    // chunk of 7.
    const int W = 3, hd = 2, H = 2, S = 7;
    std::vector<float> q(S * H * hd), kv(S * hd), sink = {0.3f, -0.2f};
    for (int i = 0; i < S * H * hd; ++i) q[i] = std::sin(0.7 * i);
    for (int i = 0; i < S * hd; ++i) kv[i] = std::cos(1.3 * i);
    std::vector<float> ring(W * hd, 0.0f), full(S * H * hd), part(S * H * hd);
    ops::AttentionArgs a{.q = q.data(),
                         .kv = kv.data(),
                         .ring = ring.data(),
                         .sink = sink.data(),
                         .out = full.data(),
                         .step = one_row(0, S),
                         .H = H,
                         .hd = hd,
                         .W = W,
                         .softmax_scale = 0.8f};
    cpu_ref::attention(a);
    int p = 0;
    for (int len : {3, 1, 3}) {
        a.q = q.data() + p * H * hd;
        a.kv = kv.data() + p * hd;
        a.out = part.data() + p * H * hd;
        a.step = one_row(p, len);
        cpu_ref::attention(a);
        cpu_ref::ring_write({a.kv, ring.data(), one_row(p, len), W, hd});
        p += len;
    }
    for (int i = 0; i < S * H * hd; ++i) EXPECT_NEAR(part[i], full[i], 1e-6) << i;
}

TEST(OpsRingWrite, AttentionWritesTheRingAfterReadingIt) {
    // AttentionArgs::ring_out: the same chunks as above with the ring written by the attention
    // call itself (after its reads, also for chunks of several tokens) give the same outputs and
    // the same ring as the separate ring_write.
    const int W = 3, hd = 2, H = 2, S = 7;
    std::vector<float> q(S * H * hd), kv(S * hd), sink = {0.3f, -0.2f};
    for (int i = 0; i < S * H * hd; ++i) q[i] = std::sin(0.9 * i);
    for (int i = 0; i < S * hd; ++i) kv[i] = std::cos(1.1 * i);
    std::vector<float> ring_a(W * hd, 0.0f), ring_b(W * hd, 0.0f), out_a(S * H * hd),
        out_b(S * H * hd);
    int p = 0;
    for (int len : {3, 1, 1, 2}) {
        ops::AttentionArgs a{.q = q.data() + p * H * hd,
                             .kv = kv.data() + p * hd,
                             .ring = ring_a.data(),
                             .sink = sink.data(),
                             .out = out_a.data() + p * H * hd,
                             .step = one_row(p, len),
                             .H = H,
                             .hd = hd,
                             .W = W,
                             .softmax_scale = 0.8f};
        cpu_ref::attention(a);
        cpu_ref::ring_write({a.kv, ring_a.data(), a.step, W, hd});
        a.ring = ring_b.data();
        a.ring_out = ring_b.data();
        a.out = out_b.data() + p * H * hd;
        cpu_ref::attention(a);
        EXPECT_EQ(ring_b, ring_a) << "after the chunk at " << p;
        p += len;
    }
    EXPECT_EQ(out_b, out_a);
}

}  // namespace
}  // namespace dsv4
