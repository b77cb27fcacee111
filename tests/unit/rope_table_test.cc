// rope_inv_freq: plain frequencies over the rope dim, YaRN ramp (floor/ceil, clamps, guard).
#include "model/rope_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/config.h"

namespace dsv4 {
namespace {

// Plain base^(-2i/rd) in double.
double plain(double base, int i, int rd) {
    return std::pow(base, -2.0 * i / rd);
}

// YaRN value for a given ramp: ω/factor · ramp + ω · (1 − ramp).
double blend(double w, double factor, double ramp) {
    return w / factor * ramp + w * (1 - ramp);
}

void expect_rel(float got, double want, const std::string& what) {
    EXPECT_NEAR(got, want, 2e-6 * std::fabs(want)) << what;
}

RopeParams yarn(double theta, double factor, double orig, double bf = 32, double bs = 1) {
    RopeParams p;
    p.theta = theta;
    p.yarn = true;
    p.factor = factor;
    p.original_max_position = orig;
    p.beta_fast = bf;
    p.beta_slow = bs;
    return p;
}

TEST(RopeTable, PlainUsesRopeDimInExponent) {
    RopeParams p;
    p.theta = 10000.0;
    const auto inv = rope_inv_freq(p, 8);  // 10000^(-i/4) = 10^-i
    ASSERT_EQ(inv.size(), 4u);
    EXPECT_FLOAT_EQ(inv[0], 1.0f);
    EXPECT_NEAR(inv[1], 0.1, 1e-7);
    EXPECT_NEAR(inv[2], 0.01, 1e-8);
    EXPECT_NEAR(inv[3], 0.001, 1e-9);
    const auto inv4 = rope_inv_freq(p, 4);  // 1, 10000^-0.5
    ASSERT_EQ(inv4.size(), 2u);
    EXPECT_NEAR(inv4[1], 0.01, 1e-8);
}

TEST(RopeTable, YarnFlashRampLow15High25) {
    // rd 64, base 160000, orig 65536, factor 16: corr(32) = 15.45 -> floor 15,
    // corr(1) = 24.71 -> ceil 25 (spec §4.3). ramp_i = (i - 15) / 10.
    const auto inv = rope_inv_freq(yarn(160000, 16, 65536), 64);
    ASSERT_EQ(inv.size(), 32u);
    for (int i = 0; i <= 15; ++i)
        expect_rel(inv[i], plain(160000, i, 64), "unchanged pair " + std::to_string(i));
    for (int i = 25; i < 32; ++i)
        expect_rel(inv[i], plain(160000, i, 64) / 16, "divided pair " + std::to_string(i));
    // The floor and the ceil are visible inside the ramp: exactly 0.1, 0.5, 0.9.
    expect_rel(inv[16], blend(plain(160000, 16, 64), 16, 0.1), "pair 16 (floor)");
    expect_rel(inv[20], blend(plain(160000, 20, 64), 16, 0.5), "pair 20");
    expect_rel(inv[24], blend(plain(160000, 24, 64), 16, 0.9), "pair 24 (ceil)");
}

TEST(RopeTable, YarnSmallRatesLow3High7) {
    // rd 16, base 160000, orig 65536: corr(32) = 3.86 -> 3, corr(1) = 6.18 -> 7.
    const auto inv = rope_inv_freq(yarn(160000, 16, 65536), 16);
    for (int i = 0; i <= 3; ++i)
        expect_rel(inv[i], plain(160000, i, 16), "pair " + std::to_string(i));
    expect_rel(inv[4], blend(plain(160000, 4, 16), 16, 0.25), "pair 4");
    expect_rel(inv[5], blend(plain(160000, 5, 16), 16, 0.50), "pair 5");
    expect_rel(inv[6], blend(plain(160000, 6, 16), 16, 0.75), "pair 6");
    expect_rel(inv[7], plain(160000, 7, 16) / 16, "pair 7");
}

TEST(RopeTable, YarnLowClampedToZero) {
    // rd 8, base 1e4, orig 16: corr(32) = -1.10 -> floor -2 -> clamped to 0; corr(1) = 0.41 -> 1.
    // Without the clamp pair 0 would get ramp 2/3.
    const auto inv = rope_inv_freq(yarn(10000, 4, 16), 8);
    expect_rel(inv[0], 1.0, "pair 0");
    for (int i = 1; i < 4; ++i)
        expect_rel(inv[i], plain(10000, i, 8) / 4, "pair " + std::to_string(i));
}

TEST(RopeTable, YarnEqualLowHighGuard) {
    // rd 8, base 1e4, orig 4: low = 0 (clamped), high = ceil(-0.196) = 0 == low -> high = 0.001.
    const auto inv = rope_inv_freq(yarn(10000, 4, 4), 8);
    ASSERT_TRUE(std::isfinite(inv[0]));
    expect_rel(inv[0], 1.0, "pair 0");
    for (int i = 1; i < 4; ++i)
        expect_rel(inv[i], plain(10000, i, 8) / 4, "pair " + std::to_string(i));
}

TEST(RopeTable, TinyYarnGoldenConfigCompressRope) {
    // tiny-yarn: rd 8, compress base 160000, orig 256, factor 16: corr(32) = 0.08 -> 0,
    // corr(1) = 1.24 -> 2. Pair 0 unchanged, pair 1 half-blended, pairs 2, 3 divided.
    auto c = load_model_config(std::string(DSV4_GOLDEN_MODELS_DIR) + "/tiny-yarn/config.json");
    ASSERT_TRUE(c.has_value()) << c.status().message();
    ASSERT_EQ(c->rope_dim, 8);
    const auto inv = rope_inv_freq(c->rope_compress, c->rope_dim);
    ASSERT_EQ(inv.size(), 4u);
    expect_rel(inv[0], 1.0, "pair 0");
    expect_rel(inv[1], blend(plain(160000, 1, 8), 16, 0.5), "pair 1");
    expect_rel(inv[2], plain(160000, 2, 8) / 16, "pair 2");
    expect_rel(inv[3], plain(160000, 3, 8) / 16, "pair 3");
    // The main (sliding) rope is plain, base 10000.
    const auto main_inv = rope_inv_freq(c->rope_main, c->rope_dim);
    for (int i = 0; i < 4; ++i)
        expect_rel(main_inv[i], plain(10000, i, 8), "main pair " + std::to_string(i));
}

}  // namespace
}  // namespace dsv4
