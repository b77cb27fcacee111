// RMSNorm and interleaved partial RoPE on the trailing rope dims.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "unit_util.h"

namespace dsv4 {
namespace {

// The rope op with rows at positions pos0 + r * step.
void rope_rows(float* x, const float* inv, int64_t rows, int heads, int hd, int rd, int64_t pos0,
               int64_t step, bool inverse) {
    std::vector<int64_t> pos(rows);
    for (int64_t r = 0; r < rows; ++r) pos[r] = pos0 + r * step;
    cpu_ref::rope({x, inv, pos.data(), rows, heads, hd, rd, inverse});
}

constexpr double kPi = std::numbers::pi;

TEST(OpsRmsNorm, ThreeFourEpsZero) {
    // mean(9, 16) = 12.5, rms = sqrt(12.5).
    std::vector<float> x = {3, 4};
    std::vector<float> y(2);
    cpu_ref::rms_norm({x.data(), nullptr, y.data(), 1, 2, 0.0f});
    EXPECT_NEAR(y[0], 3.0 / std::sqrt(12.5), 1e-6);
    EXPECT_NEAR(y[1], 4.0 / std::sqrt(12.5), 1e-6);
    EXPECT_NEAR(y[0] * y[0] + y[1] * y[1], 2.0, 1e-5);  // unit RMS
}

TEST(OpsRmsNorm, WeightEpsRowsAndInPlace) {
    // Row 0: [3, 4] weighted by [2, 0.5]; row 1: [1, 1] with eps 3 -> 1/sqrt(1 + 3) = 0.5.
    std::vector<float> x = {3, 4, 1, 1};
    std::vector<float> w = {2.0f, 0.5f};
    cpu_ref::rms_norm({x.data(), w.data(), x.data(), 1, 2, 0.0f});
    EXPECT_NEAR(x[0], 2.0 * 3.0 / std::sqrt(12.5), 1e-6);
    EXPECT_NEAR(x[1], 0.5 * 4.0 / std::sqrt(12.5), 1e-6);
    EXPECT_EQ(x[2], 1.0f);  // rows = 1: the second row is untouched
    std::vector<float> z = {3, 4, 1, 1};
    cpu_ref::rms_norm({z.data(), nullptr, z.data(), 2, 2, 3.0f});
    EXPECT_NEAR(z[0], 3.0 / std::sqrt(12.5 + 3.0), 1e-6);
    EXPECT_NEAR(z[2], 0.5, 1e-7);
    EXPECT_NEAR(z[3], 0.5, 1e-7);
}

TEST(OpsFused, RmsNormWithRopeIsNormThenRope) {
    // The fused entry point against its plain composition, bit for bit: the per-head q norm's
    // shape (4 tokens x 3 heads of 8 dims, unweighted) and the K=V norm's (weighted, one head),
    // in both bf16 modes.
    const int hd = 8, rd = 4;
    const std::vector<int64_t> pos = {0, 3, 17, 4096};
    const std::vector<float> inv = {0.5f, 0.01f}, w = unit::lcg_values(hd, 11);
    for (int heads : {3, 1})
        for (bool bf16 : {false, true}) {
            const int64_t rows = static_cast<int64_t>(pos.size()) * heads;
            const std::vector<float> x = unit::lcg_values(rows * hd, 12 + heads);
            const float* wp = heads == 1 ? w.data() : nullptr;
            std::vector<float> fused(x.size()), plain(x.size());
            const ops::FusedRope r{inv.data(), pos.data(), heads, rd, 1.25f};
            cpu_ref::rms_norm({x.data(), wp, fused.data(), rows, hd, 1e-6f, bf16, &r});
            cpu_ref::rms_norm({x.data(), wp, plain.data(), rows, hd, 1e-6f, bf16});
            cpu_ref::rope({plain.data(), inv.data(), pos.data(), rows / heads, heads, hd, rd, false,
                           1.25f, bf16});
            EXPECT_EQ(fused, plain) << "heads " << heads << " bf16 " << bf16;
        }
}

TEST(OpsFused, RmsNormAlsoIsTwoNorms) {
    // RmsNormArgs::also against the two calls: the decode step's q norm (3 heads, unweighted,
    // rope) with the K=V norm (one head, weighted, rope) riding along.
    const int hd = 8, rd = 4;
    const std::vector<int64_t> pos = {0, 3, 17, 4096};
    const int64_t T = static_cast<int64_t>(pos.size());
    const std::vector<float> inv = {0.5f, 0.01f}, w = unit::lcg_values(hd, 21);
    const std::vector<float> q = unit::lcg_values(T * 3 * hd, 22),
                             kv = unit::lcg_values(T * hd, 23);
    const ops::FusedRope qr{inv.data(), pos.data(), 3, rd, 1.25f},
        kr{inv.data(), pos.data(), 1, rd};
    std::vector<float> q1(q.size()), kv1(kv.size()), q2(q.size()), kv2(kv.size());
    const ops::RmsNormArgs second{kv.data(), w.data(), kv1.data(), T, hd, 1e-6f, false, &kr};
    cpu_ref::rms_norm({q.data(), nullptr, q1.data(), T * 3, hd, 1e-6f, false, &qr, &second});
    cpu_ref::rms_norm({q.data(), nullptr, q2.data(), T * 3, hd, 1e-6f, false, &qr});
    cpu_ref::rms_norm({kv.data(), w.data(), kv2.data(), T, hd, 1e-6f, false, &kr});
    EXPECT_EQ(q1, q2);
    EXPECT_EQ(kv1, kv2);
}

TEST(OpsRope, UnitVectorsByKnownAngles) {
    // head_dim 6, rd 4: dims [0, 2) are nope, pairs (2,3) and (4,5) rotate.
    // Position 3, inv_freq {pi/6, pi/12}: angles pi/2 and pi/4.
    std::vector<float> inv = {static_cast<float>(kPi / 6), static_cast<float>(kPi / 12)};
    std::vector<float> x = {7, -8, 1, 0, 0, 1,   // head 0
                            5, 6,  0, 2, 1, 0};  // head 1
    rope_rows(x.data(), inv.data(), 1, 2, 6, 4, 3, 1, false);
    const double r = std::sqrt(0.5);
    // Head 0: (1,0) by 90 deg -> (0,1); (0,1) by 45 deg -> (-sin, cos).
    EXPECT_EQ(x[0], 7.0f);
    EXPECT_EQ(x[1], -8.0f);
    EXPECT_NEAR(x[2], 0.0, 1e-6);
    EXPECT_NEAR(x[3], 1.0, 1e-6);
    EXPECT_NEAR(x[4], -r, 1e-6);
    EXPECT_NEAR(x[5], r, 1e-6);
    // Head 1: (0,2) by 90 deg -> (-2,0); (1,0) by 45 deg -> (cos, sin).
    EXPECT_EQ(x[6], 5.0f);
    EXPECT_EQ(x[7], 6.0f);
    EXPECT_NEAR(x[8], -2.0, 1e-6);
    EXPECT_NEAR(x[9], 0.0, 1e-6);
    EXPECT_NEAR(x[10], r, 1e-6);
    EXPECT_NEAR(x[11], r, 1e-6);
}

TEST(OpsRope, PairsAreInterleavedNotHalfSplit) {
    // hd = rd = 4, one pair frequency 0 (no rotation) and one with angle pi/2. A half-split
    // rope would pair (0,2),(1,3); interleaved pairs (0,1),(2,3).
    std::vector<float> inv = {static_cast<float>(kPi / 2), 0.0f};
    std::vector<float> x = {1, 0, 0, 0};
    rope_rows(x.data(), inv.data(), 1, 1, 4, 4, 1, 1, false);
    EXPECT_NEAR(x[0], 0.0, 1e-6);
    EXPECT_NEAR(x[1], 1.0, 1e-6);  // rotated into its partner 2i+1
    EXPECT_EQ(x[2], 0.0f);
    EXPECT_EQ(x[3], 0.0f);
}

TEST(OpsRope, RowPositionsPos0AndStep) {
    // Rows at positions 1, 3, 5 (pos0 = 1, step 2); hd = rd = 2, inv_freq 0.25.
    std::vector<float> inv = {0.25f};
    std::vector<float> x = {1, 0, 1, 0, 1, 0};
    rope_rows(x.data(), inv.data(), 3, 1, 2, 2, 1, 2, false);
    for (int r = 0; r < 3; ++r) {
        const double a = (1 + 2 * r) * 0.25;
        EXPECT_NEAR(x[2 * r], std::cos(a), 1e-6) << r;
        EXPECT_NEAR(x[2 * r + 1], std::sin(a), 1e-6) << r;
    }
}

TEST(OpsRope, InverseUndoesAndEqualsNegativePosition) {
    const int rows = 3, heads = 2, hd = 8, rd = 6;
    std::vector<float> inv = {1.0f, 0.1f, 0.01f};
    const std::vector<float> x0 = unit::lcg_values(rows * heads * hd, 7);
    std::vector<float> x = x0;
    rope_rows(x.data(), inv.data(), rows, heads, hd, rd, 5, 1, false);
    // The rope slice moved, the nope slice did not, and the norm of each pair is kept (no mscale).
    for (int i = 0; i < rows * heads; ++i) {
        for (int d = 0; d < hd - rd; ++d) EXPECT_EQ(x[i * hd + d], x0[i * hd + d]);
        for (int d = hd - rd; d < hd; d += 2) {
            const float* p = &x[i * hd + d];
            const float* q = &x0[i * hd + d];
            EXPECT_NEAR(p[0] * p[0] + p[1] * p[1], q[0] * q[0] + q[1] * q[1], 1e-6);
        }
    }
    EXPECT_NE(x, x0);
    rope_rows(x.data(), inv.data(), rows, heads, hd, rd, 5, 1, true);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], x0[i], 1e-6) << i;

    // Inverse at position p == forward rotation at -p (single row, position 4).
    std::vector<float> a(x0.begin(), x0.begin() + hd), b = a;
    rope_rows(a.data(), inv.data(), 1, 1, hd, rd, 4, 1, true);
    rope_rows(b.data(), inv.data(), 1, 1, hd, rd, -4, 1, false);
    for (int d = 0; d < hd; ++d) EXPECT_NEAR(a[d], b[d], 1e-6) << d;
}

TEST(OpsRope, DotProductDependsOnlyOnRelativePosition) {
    const int hd = 4;
    std::vector<float> inv = {0.7f, 0.05f};
    const std::vector<float> q0 = unit::lcg_values(hd, 3), k0 = unit::lcg_values(hd, 4);
    auto rotated_dot = [&](int pq, int pk) {
        std::vector<float> q = q0, k = k0;
        rope_rows(q.data(), inv.data(), 1, 1, hd, hd, pq, 1, false);
        rope_rows(k.data(), inv.data(), 1, 1, hd, hd, pk, 1, false);
        return cpu_ref::dot(q.data(), k.data(), hd);
    };
    EXPECT_NEAR(rotated_dot(7, 3), rotated_dot(4, 0), 1e-5);
    EXPECT_NEAR(rotated_dot(10, 6), rotated_dot(4, 0), 1e-5);
    EXPECT_GT(std::fabs(rotated_dot(4, 0) - rotated_dot(0, 0)), 1e-3);
}

}  // namespace
}  // namespace dsv4
