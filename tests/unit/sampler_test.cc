// The sampling op's row function: greedy (ties to the lower id), seeded temperature sampling,
// top-k, top-p; and the op over rows with per-slot generators.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"

namespace dsv4 {
namespace {

// One generator driven through the op's row function, as one slot would be.
class Sampler {
  public:
    explicit Sampler(const SamplingParams& p) : p_(p) { ops::seed_rng(p.seed, s_); }
    int32_t sample(const float* logits, int64_t V) {
        return cpu_ref::sample_row(logits, V, p_, s_);
    }

  private:
    SamplingParams p_;
    uint64_t s_[4];
};

int32_t argmax(const float* logits, int64_t V) {
    return Sampler(SamplingParams{}).sample(logits, V);
}

std::vector<int> counts(Sampler& s, const std::vector<float>& logits, int draws) {
    std::vector<int> c(logits.size(), 0);
    for (int i = 0; i < draws; ++i) {
        const int32_t id = s.sample(logits.data(), static_cast<int64_t>(logits.size()));
        EXPECT_GE(id, 0);
        EXPECT_LT(id, static_cast<int32_t>(logits.size()));
        if (id >= 0 && id < static_cast<int32_t>(logits.size())) ++c[id];
    }
    return c;
}

TEST(Sampler, GreedyIsArgmaxTiesToLowerId) {
    std::vector<float> logits = {1, 3, 3, 2};
    EXPECT_EQ(argmax(logits.data(), 4), 1);
    std::vector<float> neg = {-5, -1, -1, -7};
    EXPECT_EQ(argmax(neg.data(), 4), 1);
    Sampler s(SamplingParams{});  // temperature 0
    for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(logits.data(), 4), 1);
    std::vector<float> last = {0, 0, 0, 9};
    EXPECT_EQ(s.sample(last.data(), 4), 3);
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedDifferent) {
    std::vector<float> logits(50, 0.0f);
    for (int i = 0; i < 50; ++i) logits[i] = 0.02f * i;
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 42;
    Sampler a(p), b(p);
    p.seed = 43;
    Sampler c(p);
    std::vector<int32_t> sa, sb, sc;
    for (int i = 0; i < 100; ++i) {
        sa.push_back(a.sample(logits.data(), 50));
        sb.push_back(b.sample(logits.data(), 50));
        sc.push_back(c.sample(logits.data(), 50));
    }
    EXPECT_EQ(sa, sb);
    EXPECT_NE(sa, sc);
    // Not stuck on one token.
    int distinct = 0;
    std::vector<bool> seen(50, false);
    for (int32_t id : sa) distinct += !seen[id], seen[id] = true;
    EXPECT_GT(distinct, 20);
}

TEST(Sampler, TopK1IsGreedy) {
    std::vector<float> logits = {0, 5, 5, 1};
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 1;
    p.seed = 7;
    Sampler s(p);
    for (int i = 0; i < 200; ++i) ASSERT_EQ(s.sample(logits.data(), 4), 1);
}

TEST(Sampler, TinyTopPIsGreedy) {
    std::vector<float> logits = {0, 2, 5, 1};
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = 1e-6f;
    p.seed = 9;
    Sampler s(p);
    for (int i = 0; i < 200; ++i) ASSERT_EQ(s.sample(logits.data(), 4), 2);
    std::vector<float> tie = {5, 0, 5, 1};
    for (int i = 0; i < 50; ++i) ASSERT_EQ(s.sample(tie.data(), 4), 0);
}

TEST(Sampler, DistributionMatchesSoftmax) {
    // logits ln(1..4): probabilities 0.1, 0.2, 0.3, 0.4 at temperature 1.
    std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 1234;
    Sampler s(p);
    const int N = 40000;
    const auto c = counts(s, logits, N);
    for (int i = 0; i < 4; ++i)
        EXPECT_NEAR(c[i] / double(N), 0.1 * (i + 1), 0.015) << "token " << i;

    // Temperature 2: probabilities ∝ sqrt(1..4).
    p.temperature = 2.0f;
    Sampler s2(p);
    const auto c2 = counts(s2, logits, N);
    double z = 0;
    for (int i = 1; i <= 4; ++i) z += std::sqrt(double(i));
    for (int i = 0; i < 4; ++i)
        EXPECT_NEAR(c2[i] / double(N), std::sqrt(i + 1.0) / z, 0.015) << "token " << i;
}

TEST(Sampler, TopKAndTopPRestrictTheSupport) {
    std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)};
    const int N = 20000;
    // top_k 2: only tokens 3 and 2, renormalised 4:3.
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 2;
    p.seed = 5;
    Sampler s(p);
    const auto c = counts(s, logits, N);
    EXPECT_EQ(c[0] + c[1], 0);
    EXPECT_NEAR(c[3] / double(N), 4.0 / 7, 0.02);
    // top_p 0.5: sorted masses 0.4, 0.7 -> keep {3, 2} (0.4 < 0.5 <= 0.7).
    p.top_k = 0;
    p.top_p = 0.5f;
    Sampler s2(p);
    const auto c2 = counts(s2, logits, N);
    EXPECT_EQ(c2[0] + c2[1], 0);
    EXPECT_NEAR(c2[3] / double(N), 4.0 / 7, 0.02);
    // top_p 0.35: the first token alone already reaches it.
    p.top_p = 0.35f;
    Sampler s3(p);
    const auto c3 = counts(s3, logits, 500);
    EXPECT_EQ(c3[3], 500);
}

TEST(Sampler, VeryLowTemperatureIsAlmostGreedy) {
    std::vector<float> logits = {1.0f, 1.5f, 0.5f};
    SamplingParams p;
    p.temperature = 1e-3f;
    p.seed = 3;
    Sampler s(p);
    const auto c = counts(s, logits, 1000);
    EXPECT_EQ(c[1], 1000);
}

TEST(SampleOp, RowsUseTheirSlotsGenerators) {
    // Two rows in slots 2 and 0: each row's draws equal a lone generator seeded like its slot.
    const int64_t V = 40;
    std::vector<float> logits(2 * V);
    for (int64_t i = 0; i < 2 * V; ++i) logits[i] = 0.05f * static_cast<float>(i % V);
    std::vector<SamplingParams> params(2);
    params[0].temperature = params[1].temperature = 1.0f;
    params[0].seed = 7;
    params[1].seed = 9;
    std::vector<uint64_t> rng(3 * 4, 0);
    ops::seed_rng(7, &rng[2 * 4]);
    ops::seed_rng(9, &rng[0]);
    std::vector<int32_t> slot = {2, 0}, out(2);
    Sampler a(params[0]), b(params[1]);
    for (int step = 0; step < 20; ++step) {
        cpu_ref::sample({logits.data(), params.data(), slot.data(), rng.data(), out.data(), 2, V});
        EXPECT_EQ(out[0], a.sample(logits.data(), V));
        EXPECT_EQ(out[1], b.sample(logits.data() + V, V));
    }
}

TEST(Sampler, SpeculativeVerificationKeepsTheDistribution) {
    // A deterministic draft is kept with probability p(draft), else the token comes from p
    // without it: the draws must follow p. Chi-square over 6 tokens (5 degrees of freedom);
    // 20.5 is the 0.1% point, and the generator is seeded, so the test is deterministic.
    const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 1.5f, 0.0f, 0.7f};
    SamplingParams p;
    p.temperature = 0.9f;
    std::vector<double> want(6);
    double z = 0;
    for (int i = 0; i < 6; ++i) z += (want[i] = std::exp(logits[i] / 0.9));
    for (double& w : want) w /= z;
    for (int32_t draft : {3, 2}) {  // the likeliest token, and an unlikely one
        uint64_t s[4];
        ops::seed_rng(99 + draft, s);
        const int N = 60000;
        std::vector<int> count(6, 0);
        int kept = 0;
        for (int i = 0; i < N; ++i) {
            const int32_t id = cpu_ref::sample_row(logits.data(), 6, p, s, draft);
            ++count[id];
            kept += id == draft;
        }
        double chi2 = 0;
        for (int i = 0; i < 6; ++i) chi2 += std::pow(count[i] - N * want[i], 2) / (N * want[i]);
        EXPECT_LT(chi2, 20.5) << "draft " << draft;
        EXPECT_NEAR(static_cast<double>(kept) / N, want[draft], 0.01) << "draft " << draft;
    }
    // A draft outside the top-k is never kept; greedy keeps it only as the arg-max.
    SamplingParams k2 = p;
    k2.top_k = 2;
    uint64_t s[4];
    ops::seed_rng(5, s);
    for (int i = 0; i < 2000; ++i) {
        const int32_t id = cpu_ref::sample_row(logits.data(), 6, k2, s, 4);
        EXPECT_TRUE(id == 3 || id == 0) << id;
    }
    EXPECT_EQ(cpu_ref::sample_row(logits.data(), 6, SamplingParams{}, s, 0), 3);
    EXPECT_EQ(cpu_ref::sample_row(logits.data(), 6, SamplingParams{}, s, 3), 3);
}

// The log-probabilities op: the sampled id's log-softmax at temperature 1 and the n most likely
// ids (ties to the lower id) with theirs, against a direct computation; a row whose sample is
// -1 reports NaN and ids -1; n above the vocabulary pads with -1.
TEST(Sampler, LogprobsOp) {
    const int64_t V = 6;
    const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 2.0f,   // row 0
                                       0.0f, 0.0f, 0.0f,  0.0f, 0.0f, 0.0f};  // row 1 (uniform)
    const std::vector<int32_t> sampled = {4, -1};
    const int n = 4;
    std::vector<float> lp(2), top(2 * n);
    std::vector<int32_t> top_id(2 * n);
    cpu_ref::logprobs(
        {logits.data(), sampled.data(), lp.data(), top_id.data(), top.data(), 2, V, n});
    double z = 0;
    for (int i = 0; i < V; ++i) z += std::exp(static_cast<double>(logits[i]));
    auto want = [&](int i) { return static_cast<float>(logits[i] - std::log(z)); };
    EXPECT_FLOAT_EQ(lp[0], want(4));
    EXPECT_EQ(std::vector<int32_t>(top_id.begin(), top_id.begin() + n),
              (std::vector<int32_t>{1, 3, 5, 0}));
    for (int j = 0; j < n; ++j) EXPECT_FLOAT_EQ(top[j], want(top_id[j]));
    EXPECT_TRUE(std::isnan(lp[1]));
    for (int j = 0; j < n; ++j) {
        EXPECT_EQ(top_id[n + j], -1);
        EXPECT_TRUE(std::isnan(top[n + j]));
    }
    // n larger than the vocabulary: the whole vocabulary, then -1.
    const std::vector<float> small = {0.25f, -1.0f};
    const std::vector<int32_t> one = {0};
    std::vector<float> lp1(1), top1(3);
    std::vector<int32_t> id1(3);
    cpu_ref::logprobs({small.data(), one.data(), lp1.data(), id1.data(), top1.data(), 1, 2, 3});
    EXPECT_EQ(id1, (std::vector<int32_t>{0, 1, -1}));
    EXPECT_NEAR(std::exp(top1[0]) + std::exp(top1[1]), 1.0, 1e-6);
    EXPECT_EQ(lp1[0], top1[0]);
}

}  // namespace
}  // namespace dsv4
