// Router (sqrt-softplus, selection bias, hash routing, ties) and routed experts (clipped SwiGLU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/fp_codes.h"
#include "unit_util.h"

namespace dsv4 {
namespace {

double sqsp(double l) {
    return std::sqrt(std::log1p(std::exp(l)));
}

struct Routed {
    std::vector<int32_t> sel;
    std::vector<float> weight;
    // expert -> weight for token t (score routing's order within a row is not part of the contract)
    std::map<int, float> of(int t, int k) const {
        std::map<int, float> r;
        for (int j = 0; j < k; ++j) r[sel[t * k + j]] = weight[t * k + j];
        return r;
    }
};

Routed route(const std::vector<float>& logits, const float* bias, int T, int E, int k, float scale,
             const int32_t* tid2eid = nullptr, const int32_t* ids = nullptr) {
    Routed r{std::vector<int32_t>(T * k, -5), std::vector<float>(T * k, -5.0f)};
    cpu_ref::route(
        {logits.data(), bias, tid2eid, ids, r.sel.data(), r.weight.data(), T, E, k, scale});
    return r;
}

TEST(OpsRoute, SqrtSoftplusScoresNormalisedTimesScale) {
    // logits (0, 1, -1, 0.5): scores sqrt(ln 2) = .833, sqrt(ln(1 + e)) = 1.146,
    // sqrt(ln(1 + 1/e)) = .560, sqrt(ln(1 + e^.5)) = .987 -> top 2 = {1, 3}.
    std::vector<float> logits = {0, 1, -1, 0.5f};
    const Routed r = route(logits, nullptr, 1, 4, 2, 1.5f);
    const auto m = r.of(0, 2);
    ASSERT_EQ(m.size(), 2u);
    ASSERT_TRUE(m.count(1) && m.count(3));
    const double s1 = sqsp(1), s3 = sqsp(0.5);
    EXPECT_NEAR(m.at(1), s1 / (s1 + s3) * 1.5, 1e-6);
    EXPECT_NEAR(m.at(3), s3 / (s1 + s3) * 1.5, 1e-6);
    EXPECT_NEAR(sqsp(0), std::sqrt(std::log(2.0)), 1e-12);  // the helper itself, by hand

    // k = 1: the weight is exactly the scaling factor.
    const Routed r1 = route(logits, nullptr, 1, 4, 1, 2.5f);
    EXPECT_EQ(r1.sel[0], 1);
    EXPECT_FLOAT_EQ(r1.weight[0], 2.5f);
}

TEST(OpsRoute, LargeLogitsSoftplusIsIdentity) {
    std::vector<float> logits = {30.0f, 25.0f};
    const Routed r = route(logits, nullptr, 1, 2, 2, 1.0f);
    const auto m = r.of(0, 2);
    const double a = std::sqrt(30.0), b = std::sqrt(25.0);
    EXPECT_NEAR(m.at(0), a / (a + b), 1e-6);
    EXPECT_NEAR(m.at(1), b / (a + b), 1e-6);
}

TEST(OpsRoute, BiasSelectsButDoesNotWeigh) {
    // Scores favour experts 0 and 2; bias +10 on expert 1 forces it in, weights use raw scores.
    std::vector<float> logits = {2, 0, 1};
    std::vector<float> bias = {0, 10, 0};
    const Routed r = route(logits, bias.data(), 1, 3, 2, 1.5f);
    const auto m = r.of(0, 2);
    ASSERT_TRUE(m.count(0) && m.count(1)) << "bias must change the selection";
    const double s0 = sqsp(2), s1 = sqsp(0);
    EXPECT_NEAR(m.at(0), s0 / (s0 + s1) * 1.5, 1e-6);
    EXPECT_NEAR(m.at(1), s1 / (s0 + s1) * 1.5, 1e-6);
    // A negative bias removes a top scorer.
    std::vector<float> bias2 = {-10, 0, 0};
    const auto m2 = route(logits, bias2.data(), 1, 3, 2, 1.0f).of(0, 2);
    EXPECT_TRUE(m2.count(1) && m2.count(2));
}

TEST(OpsRoute, TiesGoToLowerExpertId) {
    std::vector<float> logits = {0.5f, 0.5f, 0.5f, 0.5f};
    const auto m = route(logits, nullptr, 1, 4, 2, 1.0f).of(0, 2);
    EXPECT_TRUE(m.count(0) && m.count(1));
    EXPECT_NEAR(m.at(0), 0.5, 1e-7);
    std::vector<float> logits2 = {0, 5, 5, 5};
    const auto m2 = route(logits2, nullptr, 1, 4, 2, 1.0f).of(0, 2);
    EXPECT_TRUE(m2.count(1) && m2.count(2));
    // Ties after an equal bias on every expert: still the lowest ids.
    std::vector<float> logits3 = {1, 1, 1}, bias3 = {0.25f, 0.25f, 0.25f};
    const auto m3 = route(logits3, bias3.data(), 1, 3, 2, 1.0f).of(0, 2);
    EXPECT_TRUE(m3.count(0) && m3.count(1));
}

TEST(OpsRoute, HashRoutingCopiesTid2eidRow) {
    // tid2eid [V = 3, k = 2]; tokens 2 and 1. Order is kept; weights are the normalised scores.
    std::vector<int32_t> tid2eid = {0, 1, 2, 3, 3, 0};
    std::vector<int32_t> ids = {2, 1};
    std::vector<float> logits = {1, 2, 3, 4, -1, 0, 1, 2};
    const Routed r = route(logits, nullptr, 2, 4, 2, 1.5f, tid2eid.data(), ids.data());
    EXPECT_EQ(r.sel, (std::vector<int32_t>{3, 0, 2, 3}));
    const double a = sqsp(4), b = sqsp(1);
    EXPECT_NEAR(r.weight[0], a / (a + b) * 1.5, 1e-6);
    EXPECT_NEAR(r.weight[1], b / (a + b) * 1.5, 1e-6);
    const double c = sqsp(1), d = sqsp(2);
    EXPECT_NEAR(r.weight[2], c / (c + d) * 1.5, 1e-6);
    EXPECT_NEAR(r.weight[3], d / (c + d) * 1.5, 1e-6);
}

// The MoE op over per-expert weights (routed experts only).
void moe_ref(const float* x, const int32_t* sel, const float* weight, const QuantWeight* w1,
             const QuantWeight* w3, const QuantWeight* w2, float* out, int64_t T, int D, int I,
             int E, int k, float L) {
    const cpu_ref::CpuExperts ex{{w1, w1 + E}, {w3, w3 + E}, {w2, w2 + E}};
    const ops::ExpertWeights h = cpu_ref::wrap(ex, I, D);
    ops::MoeArgs a;
    a.x = x;
    a.sel = sel;
    a.weight = weight;
    a.experts = &h;
    a.out = out;
    a.T = T;
    a.D = D;
    a.I = I;
    a.E = E;
    a.k = k;
    a.swiglu_limit = L;
    cpu_ref::moe(a);
}

// expert(x) = W2 · (silu(min(W1 x, L)) * clamp(W3 x, -L, L)), straight from the spec.
std::vector<double> naive_expert(const std::vector<float>& x, const std::vector<float>& w1,
                                 const std::vector<float>& w3, const std::vector<float>& w2, int D,
                                 int I, double L) {
    std::vector<double> h(I), y(D, 0.0);
    for (int i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int d = 0; d < D; ++d)
            g += double(w1[i * D + d]) * x[d], u += double(w3[i * D + d]) * x[d];
        if (L > 0) g = std::min(g, L), u = std::clamp(u, -L, L);
        h[i] = unit::silu(g) * u;
    }
    for (int d = 0; d < D; ++d)
        for (int i = 0; i < I; ++i) y[d] += w2[d * I + i] * h[i];
    return y;
}

TEST(OpsMoe, OneDenseExpertByHand) {
    // D = I = 2. W1 = I, W3 = diag(2, 1), W2 = [[1, 1], [0, 1]]; x = [1, -1], weight 0.5.
    // g = (1, -1), u = (2, -1), h = (2 silu(1), -silu(-1)), y = 0.5 (h0 + h1, h1).
    std::vector<float> w1v = {1, 0, 0, 1}, w3v = {2, 0, 0, 1}, w2v = {1, 1, 0, 1};
    const QuantWeight w1 = unit::dense_f32(w1v, 2, 2), w3 = unit::dense_f32(w3v, 2, 2),
                      w2 = unit::dense_f32(w2v, 2, 2);
    std::vector<float> x = {1, -1}, weight = {0.5f}, out(2, 99.0f);
    std::vector<int32_t> sel = {0};
    moe_ref(x.data(), sel.data(), weight.data(), &w1, &w3, &w2, out.data(), 1, 2, 2, 1, 1, 0.0f);
    const double h0 = 2 * unit::silu(1.0), h1 = -unit::silu(-1.0);
    EXPECT_NEAR(out[0], 0.5 * (h0 + h1), 1e-6);
    EXPECT_NEAR(out[1], 0.5 * h1, 1e-6);

    // swiglu_limit 1.5 clamps u0 = 2 to 1.5; the gate -1 is not raised.
    moe_ref(x.data(), sel.data(), weight.data(), &w1, &w3, &w2, out.data(), 1, 2, 2, 1, 1, 1.5f);
    const double c0 = 1.5 * unit::silu(1.0);
    EXPECT_NEAR(out[0], 0.5 * (c0 + h1), 1e-6);
    EXPECT_NEAR(out[1], 0.5 * h1, 1e-6);
}

TEST(OpsMoe, WeightedSumOverSelectedExpertsOnly) {
    // E = 3 experts, k = 2, T = 3 tokens; expert 2 is never selected and holds NaNs.
    const int D = 3, I = 4, E = 3, k = 2, T = 3;
    const float L = 0.8f;
    std::vector<std::vector<float>> v1, v3, v2;
    std::vector<QuantWeight> w1, w3, w2;
    for (int e = 0; e < E; ++e) {
        v1.push_back(unit::lcg_values(I * D, 10 + e));
        v3.push_back(unit::lcg_values(I * D, 20 + e));
        v2.push_back(unit::lcg_values(D * I, 30 + e));
        if (e == 2)
            for (auto* v : {&v1.back(), &v3.back(), &v2.back()})
                v->assign(v->size(), std::numeric_limits<float>::quiet_NaN());
    }
    for (int e = 0; e < E; ++e) {
        for (auto& x3 : v1[e]) x3 *= 3.0f;  // large enough that the clip matters
        w1.push_back(unit::dense_f32(v1[e], I, D));
        w3.push_back(unit::dense_f32(v3[e], I, D));
        w2.push_back(unit::dense_f32(v2[e], D, I));
    }
    std::vector<float> x = unit::lcg_values(T * D, 40);
    for (auto& xv : x) xv *= 2.0f;
    std::vector<int32_t> sel = {0, 1, 1, 0, 1, 0};
    std::vector<float> weight = {0.25f, 1.25f, 0.5f, 1.0f, 2.0f, -0.5f};
    std::vector<float> out(T * D);
    moe_ref(x.data(), sel.data(), weight.data(), w1.data(), w3.data(), w2.data(), out.data(), T, D,
            I, E, k, L);
    for (int t = 0; t < T; ++t) {
        std::vector<float> xt(x.begin() + t * D, x.begin() + (t + 1) * D);
        std::vector<double> want(D, 0.0);
        for (int j = 0; j < k; ++j) {
            const int e = sel[t * k + j];
            const auto y = naive_expert(xt, v1[e], v3[e], v2[e], D, I, L);
            for (int d = 0; d < D; ++d) want[d] += weight[t * k + j] * y[d];
        }
        for (int d = 0; d < D; ++d)
            EXPECT_NEAR(out[t * D + d], want[d], 1e-5) << "t=" << t << " d=" << d;
    }
}

TEST(OpsFused, RouterIsGateLinearThenRouteAndSharedExpertIsAddedLast) {
    // The fused entry points against their plain composition, bit for bit.
    const int D = 5, I = 3, E = 4, k = 2, T = 3;
    std::vector<float> gv = unit::lcg_values(E * D, 50), x = unit::lcg_values(T * D, 51);
    std::vector<float> bias = {0.1f, -0.2f, 0.0f, 0.3f};
    const QuantWeight gq = unit::dense_f32(gv, E, D);
    const ops::Weight gate = cpu_ref::wrap(gq);
    std::vector<float> logits(T * E), logits2(T * E), w(T * k), w2v(T * k);
    std::vector<int32_t> sel(T * k), sel2(T * k);
    cpu_ref::router({x.data(), &gate, bias.data(), nullptr, nullptr, logits.data(), sel.data(),
                     w.data(), T, E, k, 1.5f});
    cpu_ref::linear({x.data(), &gate, logits2.data(), T, E});
    cpu_ref::route(
        {logits2.data(), bias.data(), nullptr, nullptr, sel2.data(), w2v.data(), T, E, k, 1.5f});
    EXPECT_EQ(sel, sel2);
    EXPECT_EQ(w, w2v);

    std::vector<std::vector<float>> v(3 * E + 3);
    std::vector<QuantWeight> q1, q3, q2;
    for (int e = 0; e < E; ++e) {
        v[3 * e] = unit::lcg_values(I * D, 60 + e);
        v[3 * e + 1] = unit::lcg_values(I * D, 70 + e);
        v[3 * e + 2] = unit::lcg_values(D * I, 80 + e);
    }
    for (int e = 0; e < E; ++e) {
        q1.push_back(unit::dense_f32(v[3 * e], I, D));
        q3.push_back(unit::dense_f32(v[3 * e + 1], I, D));
        q2.push_back(unit::dense_f32(v[3 * e + 2], D, I));
    }
    v[3 * E] = unit::lcg_values(I * D, 90);
    v[3 * E + 1] = unit::lcg_values(I * D, 91);
    v[3 * E + 2] = unit::lcg_values(D * I, 92);
    const QuantWeight s1 = unit::dense_f32(v[3 * E], I, D),
                      s3 = unit::dense_f32(v[3 * E + 1], I, D),
                      s2 = unit::dense_f32(v[3 * E + 2], D, I);
    const ops::Weight h1 = cpu_ref::wrap(s1), h3 = cpu_ref::wrap(s3), h2 = cpu_ref::wrap(s2);
    const cpu_ref::CpuExperts ex{q1, q3, q2};
    const ops::ExpertWeights experts = cpu_ref::wrap(ex, I, D);
    std::vector<float> fused(T * D), scratch(T * (2 * I + D));
    cpu_ref::moe({x.data(), sel.data(), w.data(), &experts, &h1, &h3, &h2, scratch.data(), nullptr,
                  fused.data(), T, D, I, E, k, 0.7f});
    std::vector<float> plain(T * D), g(T * I), u(T * I), y(T * D);
    moe_ref(x.data(), sel.data(), w.data(), q1.data(), q3.data(), q2.data(), plain.data(), T, D, I,
            E, k, 0.7f);
    cpu_ref::linear({x.data(), &h1, g.data(), T, I});
    cpu_ref::linear({x.data(), &h3, u.data(), T, I});
    cpu_ref::swiglu({g.data(), u.data(), g.data(), T * I, 0.7f});
    cpu_ref::linear({g.data(), &h2, y.data(), T, D});
    for (int i = 0; i < T * D; ++i) plain[i] += y[i];
    EXPECT_EQ(fused, plain);

    // MoeArgs::route: the routing inside the moe call is the router, then the experts.
    std::vector<float> logits3(T * E, 9.0f), w3v(T * k), routed_first(T * D);
    std::vector<int32_t> sel3(T * k);
    const ops::RouterArgs route{
        x.data(),    &gate,      bias.data(), nullptr, nullptr, logits3.data(),
        sel3.data(), w3v.data(), T,           E,       k,       1.5f};
    ops::MoeArgs m{
        x.data(), sel3.data(),         w3v.data(), &experts, &h1, &h3, &h2, scratch.data(),
        nullptr,  routed_first.data(), T,          D,        I,   E,   k,   0.7f};
    m.route = &route;
    cpu_ref::moe(m);
    EXPECT_EQ(sel3, sel);
    EXPECT_EQ(w3v, w);
    EXPECT_EQ(routed_first, fused);
}

TEST(OpsLinearGroup, EachOutputEqualsItsOwnLinearAndClearsAfter) {
    const int K = 7, M = 3;
    std::vector<float> a = unit::lcg_values(5 * K, 1), b = unit::lcg_values(2 * K, 2),
                       x = unit::lcg_values(M * K, 3);
    const QuantWeight qa = unit::dense_f32(a, 5, K), qb = unit::dense_f32(b, 2, K);
    const ops::Weight wa = cpu_ref::wrap(qa), wb = cpu_ref::wrap(qb);
    std::vector<float> ya(M * 5), yb(M * 2), za(M * 5), zb(M * 2);
    ops::LinearGroupArgs g{x.data(), {{&wa, ya.data()}, {&wb, yb.data()}}, 2, M};
    // Its clears: two ranges of a buffer of ones, the rest left as it was.
    std::vector<float> buf(9, 1.0f);
    g.clear[0] = {buf.data() + 1, 3};
    g.clear[3] = {buf.data() + 8, 1};
    cpu_ref::linear_group(g);
    cpu_ref::linear({x.data(), &wa, za.data(), M, 5});
    cpu_ref::linear({x.data(), &wb, zb.data(), M, 2});
    EXPECT_EQ(ya, za);
    EXPECT_EQ(yb, zb);
    EXPECT_EQ(buf, (std::vector<float>{1, 0, 0, 0, 1, 1, 1, 1, 0}));
}

TEST(OpsLinear, Bf16ActivationsInAndOut) {
    // bf16 x is widened exactly; bf16 y is the f32 result rounded to nearest even.
    const int K = 9, N = 4, M = 2;
    std::vector<float> wv = unit::lcg_values(N * K, 4), xf = unit::lcg_values(M * K, 5);
    const QuantWeight q = unit::dense_f32(wv, N, K);
    const ops::Weight w = cpu_ref::wrap(q);
    std::vector<uint16_t> xb(M * K), yb(M * N);
    std::vector<float> xr(M * K), yf(M * N);
    for (int i = 0; i < M * K; ++i) xr[i] = bf16_to_f32(xb[i] = f32_to_bf16(xf[i]));
    cpu_ref::linear({xr.data(), &w, yf.data(), M, N});
    ops::LinearArgs a{xb.data(), &w, yb.data(), M, N};
    a.x_type = a.y_type = ops::ActType::kBF16;
    cpu_ref::linear(a);
    for (int i = 0; i < M * N; ++i) EXPECT_EQ(yb[i], f32_to_bf16(yf[i])) << i;
}

}  // namespace
}  // namespace dsv4
