// Linear (dense and quantized weights, row ranges, strides), SwiGLU clipping, embedding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/fp_codes.h"
#include "unit_util.h"

namespace dsv4 {
namespace {

using unit::dense_f32;

TEST(OpsLinear, DenseByHand) {
    // W = [[1, 2, 3], [-1, 0, 4]], x = [[1, 1, 1], [2, -1, 0.5]].
    std::vector<float> wv = {1, 2, 3, -1, 0, 4};
    const QuantWeight w = dense_f32(wv, 2, 3);
    std::vector<float> x = {1, 1, 1, 2, -1, 0.5f};
    std::vector<float> y(4, -99.0f);
    const ops::Weight h = cpu_ref::wrap(w);
    cpu_ref::linear({x.data(), &h, y.data(), 2, 2, 0, 0, 0});
    EXPECT_FLOAT_EQ(y[0], 6.0f);  // 1 + 2 + 3
    EXPECT_FLOAT_EQ(y[1], 3.0f);  // -1 + 0 + 4
    EXPECT_FLOAT_EQ(y[2], 1.5f);  // 2 - 2 + 1.5
    EXPECT_FLOAT_EQ(y[3], 0.0f);  // -2 + 0 + 2
}

TEST(OpsLinear, RowRangeAndStridesMatchNaiveLoop) {
    const int64_t Ntot = 5, K = 3, M = 3, row0 = 1, N = 3, ldx = 5, ldy = 7;
    std::vector<float> wv = unit::lcg_values(Ntot * K, 1);
    const QuantWeight w = dense_f32(wv, Ntot, K);
    std::vector<float> x = unit::lcg_values(M * ldx, 2);
    const float kSentinel = 12345.0f;
    std::vector<float> y(M * ldy, kSentinel);
    const ops::Weight h = cpu_ref::wrap(w);
    cpu_ref::linear({x.data(), &h, y.data(), M, N, row0, ldx, ldy});
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t c = 0; c < ldy; ++c) {
            if (c >= N) {
                EXPECT_EQ(y[m * ldy + c], kSentinel)
                    << "wrote outside [0, N) at m=" << m << " c=" << c;
                continue;
            }
            double s = 0;
            for (int64_t k = 0; k < K; ++k) s += double(x[m * ldx + k]) * wv[(row0 + c) * K + k];
            EXPECT_NEAR(y[m * ldy + c], s, 1e-6) << "m=" << m << " n=" << c;
        }
    }
}

TEST(OpsLinear, Bf16DenseWeight) {
    // bf16 codes: 0x3F80 = 1, 0x4040 = 3, 0xC000 = -2, 0x3F00 = 0.5.
    std::vector<uint16_t> wv = {0x3F80, 0x4040, 0xC000, 0x3F00};
    QuantWeight w;
    w.dtype = DType::kBF16;
    w.rows = 2;
    w.cols = 2;
    w.data = wv.data();
    std::vector<float> x = {2, 1};
    std::vector<float> y(2);
    const ops::Weight h = cpu_ref::wrap(w);
    cpu_ref::linear({x.data(), &h, y.data(), 1, 2, 0, 0, 0});
    EXPECT_FLOAT_EQ(y[0], 5.0f);   // 2*1 + 1*3
    EXPECT_FLOAT_EQ(y[1], -3.5f);  // 2*-2 + 1*0.5
}

TEST(OpsDequant, Fp8BlockScalesPerRowAndColumnBlock) {
    // 129 x 129 weight of E4M3 1.0 (0x38): scale grid [2, 2] of powers of two 2^0..2^3.
    const int64_t R = 129, C = 129;
    std::vector<uint8_t> wv(R * C, 0x38);
    wv[0] = 0x3C;                                    // 1.5
    wv[1] = 0xB8;                                    // -1.0
    wv[2] = 0x01;                                    // smallest subnormal 2^-9
    wv[3] = 0x40;                                    // 2.0
    std::vector<uint8_t> sc = {127, 128, 129, 130};  // E8M0: 1, 2, 4, 8
    QuantWeight w;
    w.format = WeightFormat::kFp8Block;
    w.dtype = DType::kF8E4M3;
    w.rows = R;
    w.cols = C;
    w.data = wv.data();
    w.scale_dtype = DType::kF8E8M0;
    w.scale = sc.data();
    w.scale_cols = 2;
    std::vector<float> row(C);
    dequant_row(w, 0, row.data());
    EXPECT_EQ(row[0], 1.5f);
    EXPECT_EQ(row[1], -1.0f);
    EXPECT_EQ(row[2], std::ldexp(1.0f, -9));
    EXPECT_EQ(row[3], 2.0f);
    EXPECT_EQ(row[127], 1.0f);
    EXPECT_EQ(row[128], 2.0f);  // column block 1
    dequant_row(w, 128, row.data());
    EXPECT_EQ(row[0], 4.0f);  // row block 1
    EXPECT_EQ(row[128], 8.0f);

    // The same with F32 scales, and a linear through it.
    std::vector<float> scf = {0.5f, 3.0f, 1.0f, 1.0f};
    w.scale_dtype = DType::kF32;
    w.scale = scf.data();
    dequant_row(w, 0, row.data());
    EXPECT_EQ(row[0], 0.75f);
    EXPECT_EQ(row[128], 3.0f);
    std::vector<float> x(C, 0.0f);
    x[0] = 2.0f;
    x[128] = 1.0f;
    std::vector<float> y(1);
    const ops::Weight h = cpu_ref::wrap(w);
    cpu_ref::linear({x.data(), &h, y.data(), 1, 1, 0, 0, 0});
    EXPECT_FLOAT_EQ(y[0], 2.0f * 0.75f + 3.0f);
}

TEST(OpsDequant, Mxfp4LowNibbleFirstE8m0BlockOf32) {
    const int64_t C = 64;
    std::vector<uint8_t> wv(C / 2, 0x00);
    wv[0] = 0x72;                          // low nibble 0x2 = 1.0 first, then 0x7 = 6.0
    wv[1] = 0x9B;                          // 0xB = -1.5, 0x9 = -0.5
    wv[16] = 0x41;                         // element 32: 0x1 = 0.5, element 33: 0x4 = 2.0
    std::vector<uint8_t> sc = {127, 129};  // block scales 1 and 4
    QuantWeight w;
    w.format = WeightFormat::kMxfp4;
    w.dtype = DType::kU8;
    w.rows = 1;
    w.cols = C;
    w.data = wv.data();
    w.scale_dtype = DType::kF8E8M0;
    w.scale = sc.data();
    w.scale_cols = 2;
    std::vector<float> row(C, -7.0f);
    dequant_row(w, 0, row.data());
    EXPECT_EQ(row[0], 1.0f);
    EXPECT_EQ(row[1], 6.0f);
    EXPECT_EQ(row[2], -1.5f);
    EXPECT_EQ(row[3], -0.5f);
    EXPECT_EQ(row[4], 0.0f);
    EXPECT_EQ(row[31], 0.0f);
    EXPECT_EQ(row[32], 2.0f);  // 0.5 * 4
    EXPECT_EQ(row[33], 8.0f);  // 2.0 * 4
}

TEST(OpsDequant, Nvfp4E4m3BlockOf16TimesGlobal) {
    const int64_t C = 32;
    std::vector<uint8_t> wv(2 * C / 2, 0x00);            // two rows
    wv[0] = 0x53;                                        // 0x3 = 1.5, 0x5 = 3.0
    wv[8] = 0x0E;                                        // element 16: 0xE = -4.0, element 17: 0
    wv[16] = 0x22;                                       // row 1, elements 0,1: 1.0, 1.0
    std::vector<uint8_t> sc = {0x38, 0x48, 0x30, 0x38};  // E4M3: 1, 4 | 0.5, 1
    QuantWeight w;
    w.format = WeightFormat::kNvfp4;
    w.dtype = DType::kU8;
    w.rows = 2;
    w.cols = C;
    w.data = wv.data();
    w.scale_dtype = DType::kF8E4M3;
    w.scale = sc.data();
    w.scale_cols = 2;
    w.global_scale = 0.5f;
    std::vector<float> row(C);
    dequant_row(w, 0, row.data());
    EXPECT_EQ(row[0], 0.75f);   // 1.5 * 1 * 0.5
    EXPECT_EQ(row[1], 1.5f);    // 3.0 * 1 * 0.5
    EXPECT_EQ(row[16], -8.0f);  // -4 * 4 * 0.5
    EXPECT_EQ(row[17], 0.0f);
    dequant_row(w, 1, row.data());
    EXPECT_EQ(row[0], 0.25f);  // 1.0 * 0.5 * 0.5
    EXPECT_EQ(row[1], 0.25f);
}

TEST(OpsSwiglu, ClipGateAboveOnlyUpBothSides) {
    const float L = 10.0f;
    std::vector<float> g = {15.0f, -20.0f, 1.0f, 3.0f, -2.0f};
    std::vector<float> u = {1.0f, 1.0f, 12.0f, -12.0f, 0.5f};
    std::vector<float> out(5);
    cpu_ref::swiglu({g.data(), u.data(), out.data(), 5, L});
    EXPECT_NEAR(out[0], unit::silu(10.0), 1e-5);   // gate clipped to 10
    EXPECT_NEAR(out[1], unit::silu(-20.0), 1e-9);  // gate has no lower bound
    EXPECT_NE(out[1], static_cast<float>(unit::silu(-10.0)));
    EXPECT_NEAR(out[2], unit::silu(1.0) * 10.0, 1e-5);   // up clipped to +10
    EXPECT_NEAR(out[3], unit::silu(3.0) * -10.0, 1e-5);  // up clipped to -10
    EXPECT_NEAR(out[4], unit::silu(-2.0) * 0.5, 1e-6);
}

TEST(OpsSwiglu, LimitZeroMeansNoClipAndOutMayAliasGate) {
    std::vector<float> g = {15.0f, 2.0f};
    std::vector<float> u = {12.0f, -30.0f};
    cpu_ref::swiglu({g.data(), u.data(), g.data(), 2, 0.0f});
    EXPECT_NEAR(g[0], unit::silu(15.0) * 12.0, 1e-4);
    EXPECT_NEAR(g[1], unit::silu(2.0) * -30.0, 1e-4);
}

TEST(OpsEmbed, RowReplicatedIntoStreams) {
    std::vector<float> tv = {0, 1, 10, 11, 20, 21};  // V = 3, D = 2
    const QuantWeight table = dense_f32(tv, 3, 2);
    std::vector<int32_t> ids = {2, 0};
    std::vector<float> out(2 * 3 * 2, -1.0f);
    const ops::Weight h = cpu_ref::wrap(table);
    cpu_ref::embed({ids.data(), &h, out.data(), 2, 3});
    const std::vector<float> want = {20, 21, 20, 21, 20, 21, 0, 1, 0, 1, 0, 1};
    EXPECT_EQ(out, want);
}

}  // namespace
}  // namespace dsv4
