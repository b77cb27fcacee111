// mHC: hc_pre (RMS mix, sigmoid gates, Sinkhorn), hc_post (post ⊗ F + Cᵀ·X), hc_head.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "unit_util.h"

namespace dsv4 {
namespace {

using unit::sigmoid;

struct PreOut {
    std::vector<float> y, post, comb;
};

// hc_pre with fn = 0 (mix = 0): every gate is a function of `base` alone.
PreOut run_pre(const std::vector<float>& x, const std::vector<float>& fn,
               const std::vector<float>& base, const std::vector<float>& scale, int T, int n, int D,
               int iters, float norm_eps, float hc_eps) {
    PreOut o{std::vector<float>(T * D), std::vector<float>(T * n), std::vector<float>(T * n * n)};
    cpu_ref::hc_pre({x.data(), fn.data(), base.data(), scale.data(), o.y.data(), o.post.data(),
                     o.comb.data(), T, n, D, iters, norm_eps, hc_eps});
    return o;
}

TEST(OpsHcPre, GatesAndCollapseFromBase) {
    // n = 2, D = 2, T = 2, fn = 0. pre = sigmoid(base_p) + eps, post = 2 sigmoid(base_q).
    const int n = 2, D = 2, T = 2;
    const float eps = 0.01f;
    std::vector<float> fn((2 + n) * n * n * D, 0.0f);
    std::vector<float> base = {0.0f,
                               std::log(3.0f),  // pre: 0.5, 0.75
                               std::log(3.0f),
                               -std::log(3.0f),  // post: 1.5, 0.5
                               0,
                               0,
                               0,
                               0};
    std::vector<float> scale = {1, 1, 1};
    std::vector<float> x = {1,  2, 10, 20,  // token 0: streams [1,2], [10,20]
                            -1, 0, 0,  4};  // token 1
    PreOut o = run_pre(x, fn, base, scale, T, n, D, 1, 1e-6f, eps);
    const double p0 = 0.5 + eps, p1 = 0.75 + eps;
    EXPECT_NEAR(o.y[0], p0 * 1 + p1 * 10, 1e-5);
    EXPECT_NEAR(o.y[1], p0 * 2 + p1 * 20, 1e-5);
    EXPECT_NEAR(o.y[2], p0 * -1, 1e-5);
    EXPECT_NEAR(o.y[3], p1 * 4, 1e-5);
    for (int t = 0; t < T; ++t) {
        EXPECT_NEAR(o.post[t * n + 0], 1.5, 1e-6);
        EXPECT_NEAR(o.post[t * n + 1], 0.5, 1e-6);
        // Equal logits: softmax 1/2 + eps, column sum 1 + 2 eps, divided by (sum + eps).
        for (int i = 0; i < n * n; ++i)
            EXPECT_NEAR(o.comb[t * n * n + i], (0.5 + eps) / (1 + 3 * eps), 1e-6);
    }
}

TEST(OpsHcPre, MixIsFnTimesUnweightedRmsOfAllStreamsTimesScale) {
    // n = 1, D = 2: mix rows 3. x = [3, 4] -> rms sqrt(12.5) with norm_eps 0.
    const int n = 1, D = 2;
    std::vector<float> fn = {1, 0, 0, 1, 1, 1};
    std::vector<float> base = {0.25f, -0.5f, 0.0f};
    std::vector<float> scale = {2.0f, 0.5f, 3.0f};
    std::vector<float> x = {3, 4};
    const float hc_eps = 0.001f;
    PreOut o = run_pre(x, fn, base, scale, 1, n, D, 5, 0.0f, hc_eps);
    const double r = std::sqrt(12.5);
    const double pre = sigmoid(3 / r * 2.0 + 0.25) + hc_eps;
    EXPECT_NEAR(o.y[0], pre * 3, 1e-5);
    EXPECT_NEAR(o.y[1], pre * 4, 1e-5);
    EXPECT_NEAR(o.post[0], 2 * sigmoid(4 / r * 0.5 - 0.5), 1e-6);
    // 1x1 Sinkhorn: softmax 1, +eps, then (iters) column / row normalisations with +eps.
    double c = 1.0 + hc_eps;
    c /= c + hc_eps;
    for (int it = 1; it < 5; ++it) {
        c /= c + hc_eps;
        c /= c + hc_eps;
    }
    EXPECT_NEAR(o.comb[0], c, 1e-6);

    // norm_eps enters the RMS (not hc_eps): eps 12.5 doubles the mean square.
    PreOut o2 = run_pre(x, fn, base, scale, 1, n, D, 1, 12.5f, hc_eps);
    const double pre2 = sigmoid(3 / std::sqrt(25.0) * 2.0 + 0.25) + hc_eps;
    EXPECT_NEAR(o2.y[0], pre2 * 3, 1e-5);
}

TEST(OpsHcPre, SinkhornOneIterationExactEpsPlacement2x2) {
    // Logits [[0, ln 3], [ln 2, 0]] -> row softmax [[1/4, 3/4], [2/3, 1/3]], + eps, then
    // divide each column by (column sum + eps). eps = 0.1 so a misplaced eps is visible.
    const int n = 2, D = 1;
    const double eps = 0.1;
    std::vector<float> fn((2 + n) * n * n * D, 0.0f);
    std::vector<float> base = {0, 0, 0, 0, 0.0f, std::log(3.0f), std::log(2.0f), 0.0f};
    std::vector<float> scale = {1, 1, 1};
    std::vector<float> x = {1, 1};
    PreOut o = run_pre(x, fn, base, scale, 1, n, D, 1, 1e-6f, static_cast<float>(eps));
    const double a = 0.25 + eps, b = 0.75 + eps, c = 2.0 / 3 + eps, d = 1.0 / 3 + eps;
    const double c0 = a + c + eps, c1 = b + d + eps;
    EXPECT_NEAR(o.comb[0], a / c0, 1e-6);  // 0.35 / 1.21667
    EXPECT_NEAR(o.comb[1], b / c1, 1e-6);  // 0.85 / 1.38333
    EXPECT_NEAR(o.comb[2], c / c0, 1e-6);
    EXPECT_NEAR(o.comb[3], d / c1, 1e-6);
    EXPECT_NEAR(o.comb[0], 0.35 / 1.2166667, 1e-6);

    // Two iterations: one more row normalisation (sum + eps), then column normalisation.
    PreOut o2 = run_pre(x, fn, base, scale, 1, n, D, 2, 1e-6f, static_cast<float>(eps));
    double C[4] = {a / c0, b / c1, c / c0, d / c1};
    for (int j = 0; j < 2; ++j) {
        const double s = C[2 * j] + C[2 * j + 1] + eps;
        C[2 * j] /= s;
        C[2 * j + 1] /= s;
    }
    for (int k = 0; k < 2; ++k) {
        const double s = C[k] + C[2 + k] + eps;
        C[k] /= s;
        C[2 + k] /= s;
    }
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(o2.comb[i], C[i], 1e-6) << i;
}

TEST(OpsHcPre, SinkhornManyIterationsIsDoublyStochastic) {
    const int n = 4, D = 3;
    std::vector<float> fn = unit::lcg_values((2 + n) * n * n * D, 11);
    std::vector<float> base = unit::lcg_values((2 + n) * n, 12);
    for (auto& v : base) v *= 3.0f;
    std::vector<float> scale = {1.0f, 1.0f, 2.0f};
    std::vector<float> x = unit::lcg_values(n * D, 13);
    PreOut o = run_pre(x, fn, base, scale, 1, n, D, 50, 1e-6f, 1e-6f);
    bool all_equal = true;
    for (int j = 0; j < n; ++j) {
        double rs = 0, cs = 0;
        for (int k = 0; k < n; ++k) {
            rs += o.comb[j * n + k];
            cs += o.comb[k * n + j];
            EXPECT_GT(o.comb[j * n + k], 0.0f);
            all_equal &= std::fabs(o.comb[j * n + k] - o.comb[0]) < 1e-3;
        }
        EXPECT_NEAR(rs, 1.0, 1e-4) << "row " << j;
        EXPECT_NEAR(cs, 1.0, 1e-4) << "column " << j;
    }
    EXPECT_FALSE(all_equal);  // not trivially uniform
}

TEST(OpsHcPost, UsesCTransposeTimesX) {
    // Non-symmetric C = [[1, 2], [3, 4]], X = [10, 100] (D = 1), post = [0.5, 2], F = 1.
    // Cᵀ·X: out[k] = post[k] F + sum_j C[j][k] X[j] -> [0.5 + 10 + 300, 2 + 20 + 400].
    // (C·X would give [210.5, 342].)
    std::vector<float> f = {1}, x = {10, 100}, post = {0.5f, 2.0f}, comb = {1, 2, 3, 4};
    std::vector<float> out(2);
    cpu_ref::hc_post({f.data(), x.data(), post.data(), comb.data(), out.data(), 1, 2, 1});
    EXPECT_FLOAT_EQ(out[0], 310.5f);
    EXPECT_FLOAT_EQ(out[1], 422.0f);
}

TEST(OpsHcPost, TwoTokensWideD) {
    const int T = 2, n = 2, D = 3;
    std::vector<float> f = {1, 2, 3, -1, 0, 1};
    std::vector<float> x = unit::lcg_values(T * n * D, 21);
    std::vector<float> post = {0.5f, 1.5f, 2.0f, 0.0f};
    std::vector<float> comb = {0.9f, 0.1f, 0.3f, 0.7f, 0.2f, 0.8f, 0.6f, 0.4f};
    std::vector<float> out(T * n * D);
    cpu_ref::hc_post({f.data(), x.data(), post.data(), comb.data(), out.data(), T, n, D});
    for (int t = 0; t < T; ++t)
        for (int k = 0; k < n; ++k)
            for (int d = 0; d < D; ++d) {
                double want = post[t * n + k] * f[t * D + d];
                for (int j = 0; j < n; ++j)
                    want += comb[t * 4 + j * n + k] * x[(t * n + j) * D + d];
                EXPECT_NEAR(out[(t * n + k) * D + d], want, 1e-6) << t << k << d;
            }
}

// HcPreArgs::post_in: hc_post into x, then hc_pre on it, even when the post reads the post and
// comb buffers hc_pre writes (the model's call).
TEST(OpsHcPre, FusedPostIsPostThenPre) {
    const int n = 3, D = 5, T = 2, iters = 4, mix = (2 + n) * n;
    auto ramp = [](int count, float a, float b) {
        std::vector<float> v(count);
        for (int i = 0; i < count; ++i) v[i] = std::sin(a * static_cast<float>(i) + b);
        return v;
    };
    const auto x = ramp(T * n * D, 0.7f, 0.1f), f = ramp(T * D, 1.3f, 0.2f),
               fn = ramp(mix * n * D, 0.37f, 0.3f), base = ramp(mix, 0.9f, 0.4f),
               scale = ramp(3, 1.1f, 0.5f), post0 = ramp(T * n, 0.5f, 0.6f),
               comb0 = ramp(T * n * n, 0.3f, 0.7f);
    // Separately: hc_post, then hc_pre (writing fresh post / comb).
    std::vector<float> next(T * n * D), y(T * D), post(T * n), comb(T * n * n);
    cpu_ref::hc_post({f.data(), x.data(), post0.data(), comb0.data(), next.data(), T, n, D});
    cpu_ref::hc_pre({next.data(), fn.data(), base.data(), scale.data(), y.data(), post.data(),
                     comb.data(), T, n, D, iters, 1e-6f, 1e-6f});
    // Fused, the post reading the buffers hc_pre overwrites.
    std::vector<float> fnext(T * n * D), fy(T * D), fpost = post0, fcomb = comb0;
    const ops::HcPostArgs pin{f.data(), x.data(), fpost.data(), fcomb.data(), fnext.data(), T,
                              n,        D};
    cpu_ref::hc_pre({fnext.data(), fn.data(), base.data(), scale.data(), fy.data(), fpost.data(),
                     fcomb.data(), T, n, D, iters, 1e-6f, 1e-6f, false, nullptr, nullptr, 1e-6f,
                     &pin});
    EXPECT_EQ(fnext, next);
    EXPECT_EQ(fy, y);
    EXPECT_EQ(fpost, post);
    EXPECT_EQ(fcomb, comb);
}

TEST(OpsHcHead, SigmoidGatesNoSinkhorn) {
    // X = [[2, 0], [0, 2]]: mean square 2, r = 1/sqrt(2). fn rows pick x[0] and x[3]:
    // mix = [sqrt2, sqrt2]; scale 1/sqrt2 -> args 1 + base. base = [0, -2].
    const float hc_eps = 0.01f;
    std::vector<float> x = {2, 0, 0, 2};
    std::vector<float> fn = {1, 0, 0, 0, 0, 0, 0, 1};
    std::vector<float> base = {0.0f, -2.0f};
    std::vector<float> scale = {static_cast<float>(1.0 / std::sqrt(2.0))};
    std::vector<float> out(2);
    cpu_ref::hc_head(
        {x.data(), fn.data(), base.data(), scale.data(), out.data(), 1, 2, 2, 0.0f, hc_eps});
    EXPECT_NEAR(out[0], 2 * (sigmoid(1.0) + hc_eps), 1e-5);
    EXPECT_NEAR(out[1], 2 * (sigmoid(-1.0) + hc_eps), 1e-5);
}

}  // namespace
}  // namespace dsv4
