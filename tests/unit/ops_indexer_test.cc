// Lightning indexer: ReLU-weighted scores and top-k (ties to the lower index, sorted, -1 pad).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"

namespace dsv4 {
namespace {

std::vector<int32_t> topk(const std::vector<float>& q, const std::vector<float>& w,
                          const std::vector<float>& keys, int64_t pos0, int T, int Hi, int hi,
                          int K, int m) {
    std::vector<int32_t> out(T * K, 12345);
    ops::HostStep step;
    step.add_row(0, pos0, T);
    cpu_ref::indexer_topk({q.data(), w.data(), keys.data(), out.data(), step.view(),
                           static_cast<int64_t>(keys.size()) / hi, Hi, hi, K, m});
    return out;
}

TEST(OpsIndexer, ReluBeforeTheHeadWeightedSum) {
    // Two heads q0 = [1, 0], q1 = [0, 1], weights 1, 1. Keys b0 = [2, -5], b1 = [1, 0].
    // With ReLU: I(b0) = 2 + 0 = 2 > I(b1) = 1. Without ReLU b0 would score -3 and lose.
    std::vector<float> q = {1, 0, 0, 1}, w = {1, 1}, keys = {2, -5, 1, 0};
    EXPECT_EQ(topk(q, w, keys, 1, 1, 2, 2, 1, 1), (std::vector<int32_t>{0}));
    // Head weights scale each head's ReLU term: w = (1, 3), b1 = [1, 1] -> I = (2, 4).
    std::vector<float> w2 = {1, 3}, keys2 = {2, -5, 1, 1};
    EXPECT_EQ(topk(q, w2, keys2, 1, 1, 2, 2, 1, 1), (std::vector<int32_t>{1}));
}

TEST(OpsIndexer, OutputSortedByIndexNotScore) {
    // One head, hi = 1, q = 1: scores = key values (all positive). m = 1, pos0 = 3 -> 4 valid.
    std::vector<float> q = {1}, w = {1}, keys = {1, 5, 3, 4};
    EXPECT_EQ(topk(q, w, keys, 3, 1, 1, 1, 3, 1), (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(topk(q, w, keys, 3, 1, 1, 1, 2, 1), (std::vector<int32_t>{1, 3}));
}

TEST(OpsIndexer, TiesGoToLowerIndex) {
    // All ReLU scores 0 (negative dots): the first K valid entries win.
    std::vector<float> q = {1}, w = {1}, keys = {-1, -2, -3, -4, -5};
    EXPECT_EQ(topk(q, w, keys, 4, 1, 1, 1, 2, 1), (std::vector<int32_t>{0, 1}));
    // Exact tie among a subset: scores (1, 2, 2, 2, 0), K = 2 -> {1, 2}.
    std::vector<float> keys2 = {1, 2, 2, 2, 0};
    EXPECT_EQ(topk(q, w, keys2, 4, 1, 1, 1, 2, 1), (std::vector<int32_t>{1, 2}));
}

TEST(OpsIndexer, ValidEntriesFollowFloorPPlusOneOverM) {
    // m = 2, pos0 = 0, T = 4 -> valid counts 0, 1, 1, 2; K = 3: all valid, then -1.
    // Entry 2 has the largest score but is never valid.
    std::vector<float> q = {1, 1, 1, 1}, w = {1, 1, 1, 1}, keys = {1, 2, 100};
    const auto out = topk(q, w, keys, 0, 4, 1, 1, 3, 2);
    EXPECT_EQ(out, (std::vector<int32_t>{-1, -1, -1, 0, -1, -1, 0, -1, -1, 0, 1, -1}));
}

TEST(OpsIndexer, FewerValidThanKGivesAllValid) {
    // pos0 = 7, m = 4 -> 2 valid entries; K = 4 even though the first scores 0.
    std::vector<float> q = {1}, w = {1}, keys = {-3, 2, 9, 9};
    EXPECT_EQ(topk(q, w, keys, 7, 1, 1, 1, 4, 4), (std::vector<int32_t>{0, 1, -1, -1}));
}

TEST(OpsIndexer, MultiTokenRowsAndMultiDimDot) {
    // Hi = 2, hi = 2, m = 1, pos0 = 2, T = 2 (valid 3, then 4), K = 2.
    // Token 0: heads [1, 1] (w 0.5) and [1, -1] (w 2).
    // Keys: b0 = [1, 0], b1 = [0, 1], b2 = [2, 2], b3 = [3, -3].
    //   b0: 0.5 * 1 + 2 * 1 = 2.5; b1: 0.5 * 1 + 2 * relu(-1) = 0.5; b2: 0.5 * 4 + 0 = 2.
    // Token 1: heads [0, 1] (w 1), [0, 0] (w 1):
    //   b0: 0; b1: 1; b2: 2; b3: relu(-3) = 0 -> {1, 2}.
    std::vector<float> q = {1, 1, 1, -1, 0, 1, 0, 0}, w = {0.5f, 2.0f, 1.0f, 1.0f};
    std::vector<float> keys = {1, 0, 0, 1, 2, 2, 3, -3};
    EXPECT_EQ(topk(q, w, keys, 2, 2, 2, 2, 2, 1), (std::vector<int32_t>{0, 2, 1, 2}));
}

// q's rope and w's scale fused in (IndexerTopkArgs::q_rope, w_scale) give the indices of the
// composition: rope on q, scale on w, then the plain op (tokens at mixed positions, rope on
// the trailing 6 of 10 dims).
TEST(OpsIndexer, FusedRopeAndScaleAreTheComposition) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    const int Hi = 3, hi = 10, rd = 6, K = 5, m = 2;
    ops::HostStep step;
    step.add_row(0, 40, 3);
    step.add_row(1, 17, 1);
    const int T = step.T();
    const int64_t n_entries = 24;
    auto draw = [&](size_t n) {
        std::vector<float> v(n);
        for (float& x : v) x = nd(rng);
        return v;
    };
    const auto q = draw(T * Hi * hi), w = draw(T * Hi), keys = draw(2 * n_entries * hi);
    const std::vector<float> inv_freq = {1.0f, 0.1f, 0.01f};
    const float scale = 0.9f, w_scale = 0.37f;
    auto run = [&](const std::vector<float>& qv, const std::vector<float>& wv, bool fused) {
        std::vector<int32_t> out(T * K, 12345);
        ops::IndexerTopkArgs a{qv.data(), wv.data(), keys.data(), out.data(), step.view(),
                               n_entries, Hi,        hi,          K,          m};
        if (fused) {
            a.q_rope = {inv_freq.data(), step.view().tok_pos, Hi, rd, scale};
            a.w_scale = w_scale;
        }
        cpu_ref::indexer_topk(a);
        return out;
    };
    std::vector<float> q_roped = q, w_scaled = w;
    cpu_ref::rope(
        {q_roped.data(), inv_freq.data(), step.view().tok_pos, T, Hi, hi, rd, false, scale});
    for (float& x : w_scaled) x *= w_scale;
    const auto composed = run(q_roped, w_scaled, false);
    EXPECT_EQ(run(q, w, true), composed);
    EXPECT_NE(run(q, w, false), composed);  // (the rope matters on these draws)
}

}  // namespace
}  // namespace dsv4
