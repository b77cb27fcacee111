// Every code of the narrow formats (256 E4M3, 256 E8M0, 16 E2M1) against values derived here
// from the spec's definitions (FORMATS §1.4, §3.3), independently of fp_codes.h, plus the
// round-to-nearest-even behaviour of the encoders at every tie.
#include "base/fp_codes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "formats/nvfp4_quant.h"

namespace dsv4 {
namespace {

// E4M3 "fn": sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal
// (m/8 * 2^-6); S.1111.111 is NaN; no infinities.
double spec_e4m3(int code) {
    const int s = code >> 7, e = (code >> 3) & 0xf, m = code & 7;
    if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
    const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    return s ? -mag : mag;
}

// E2M1: sign in bit 3, magnitude {0, .5, 1, 1.5, 2, 3, 4, 6} = exponent 2 bits (bias 1),
// mantissa 1 bit, exponent 0 subnormal (m * 0.5).
double spec_e2m1(int code) {
    const int s = code >> 3, e = (code >> 1) & 3, m = code & 1;
    const double mag = e == 0 ? m * 0.5 : std::ldexp(1.0 + m / 2.0, e - 1);
    return s ? -mag : mag;
}

// The bigger-magnitude neighbour of a positive code, or -1 at the top.
int next_e4m3(int code) {
    return code + 1 < 0x7f ? code + 1 : -1;
}

TEST(E4m3, DecodesAll256Codes) {
    for (int c = 0; c < 256; ++c) {
        const double want = spec_e4m3(c);
        const float got = e4m3_to_f32(static_cast<uint8_t>(c));
        if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got)) << "code " << c;
        } else {
            EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
            EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code " << c;
        }
    }
    EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
    EXPECT_EQ(e4m3_to_f32(0x01), 0.001953125f);  // 2^-9
    EXPECT_EQ(e4m3_to_f32(0x08), 0.015625f);     // 2^-6, smallest normal
    EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
}

TEST(E4m3, EncodeRoundTripsEveryCode) {
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue;
        EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(c))), c) << "code " << c;
    }
    EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
}

TEST(E4m3, RoundsToNearestTiesToEven) {
    for (int c = 0; c < 0x7f; ++c) {
        const int n = next_e4m3(c);
        if (n < 0) break;
        const float lo = static_cast<float>(spec_e4m3(c)), hi = static_cast<float>(spec_e4m3(n));
        const float mid = (lo + hi) / 2;  // exact: the grids are 4 significant bits
        ASSERT_EQ(static_cast<double>(mid), (spec_e4m3(c) + spec_e4m3(n)) / 2);
        const int even = (c & 1) == 0 ? c : n;
        EXPECT_EQ(f32_to_e4m3(mid), even) << "tie between codes " << c << " and " << n;
        EXPECT_EQ(f32_to_e4m3(-mid), even | 0x80) << "negative tie at code " << c;
        EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 0.0f)), c) << "below the tie at " << c;
        EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, 1e9f)), n) << "above the tie at " << c;
    }
}

TEST(E4m3, SaturatesAndUnderflows) {
    // 464 is the midpoint of 448 and the absent 480: even (448) wins; fp_codes.h saturates
    // everything beyond (torch would give NaN above 464; no quantizer produces such values).
    EXPECT_EQ(f32_to_e4m3(464.0f), 0x7e);
    EXPECT_EQ(f32_to_e4m3(1e6f), 0x7e);
    EXPECT_EQ(f32_to_e4m3(-1e6f), 0xfe);
    EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
    EXPECT_EQ(f32_to_e4m3(0.0009765625f), 0x00);  // 2^-10: tie between 0 and 2^-9 -> 0
    EXPECT_EQ(f32_to_e4m3(std::nextafter(0.0009765625f, 1.0f)), 0x01);
    EXPECT_EQ(f32_to_e4m3(-1e-30f), 0x80);  // negative values that round to zero keep the sign
    EXPECT_EQ(f32_to_e4m3(1e-45f), 0x00);
}

TEST(E8m0, DecodesAll256Codes) {
    for (int c = 0; c < 256; ++c) {
        const float got = e8m0_to_f32(static_cast<uint8_t>(c));
        if (c == 0xff) {
            EXPECT_TRUE(std::isnan(got));
        } else {
            EXPECT_EQ(static_cast<double>(got), std::ldexp(1.0, c - 127)) << "code " << c;
        }
    }
    EXPECT_EQ(e8m0_to_f32(127), 1.0f);
}

TEST(E8m0, ScaleExponentIsCeilLog2) {
    for (int e = -126; e <= 127; ++e) {
        const float p = std::ldexp(1.0f, e);
        EXPECT_EQ(pow2_scale_exponent(p), e) << "exact power 2^" << e;
        EXPECT_EQ(pow2_scale_exponent(p * 1.5f), e + 1) << "1.5 * 2^" << e;
        if (e < 127) {
            EXPECT_EQ(pow2_scale_exponent(std::nextafter(p, 0.0f)), e);
        }
    }
    // Just above a power of two the float32 log2 of torch rounds back onto the integer when
    // the integer is large enough that its ulp swallows log2(1 + 2^-23) = 1.7e-7.
    EXPECT_EQ(pow2_scale_exponent(std::nextafter(1.0f, 2.0f)), 1);
    EXPECT_EQ(pow2_scale_exponent(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), -10);
}

TEST(E2m1, DecodesAll16Codes) {
    const float table[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (int c = 0; c < 16; ++c) {
        const float got = e2m1_to_f32(static_cast<uint8_t>(c));
        EXPECT_EQ(static_cast<double>(got), spec_e2m1(c)) << "code " << c;
        EXPECT_EQ(std::fabs(got), table[c & 7]) << "code " << c;
        EXPECT_EQ(std::signbit(got), c >= 8) << "code " << c;
    }
}

TEST(E2m1, EncodeRoundTripsEveryCode) {
    for (int c = 0; c < 16; ++c) {
        const uint8_t want = c == 8 ? 0 : static_cast<uint8_t>(c);  // -0 is stored as +0
        EXPECT_EQ(f32_to_e2m1(e2m1_to_f32(static_cast<uint8_t>(c))), want) << "code " << c;
    }
}

TEST(E2m1, RoundsToNearestTiesToEvenCode) {
    // FORMATS §3.3: 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2.0, 2.5->2.0, 3.5->4.0, 5->4.0.
    const float ties[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    const uint8_t even[7] = {0, 2, 2, 4, 4, 6, 6};
    for (int i = 0; i < 7; ++i) {
        EXPECT_EQ(f32_to_e2m1(ties[i]), even[i]) << ties[i];
        const uint8_t neg = even[i] == 0 ? 0 : static_cast<uint8_t>(even[i] | 8);
        EXPECT_EQ(f32_to_e2m1(-ties[i]), neg) << -ties[i];
        EXPECT_EQ(f32_to_e2m1(std::nextafter(ties[i], 0.0f)), i) << "below " << ties[i];
        EXPECT_EQ(f32_to_e2m1(std::nextafter(ties[i], 9.0f)), i + 1) << "above " << ties[i];
    }
    EXPECT_EQ(f32_to_e2m1(6.0f), 7);
    EXPECT_EQ(f32_to_e2m1(100.0f), 7);
    EXPECT_EQ(f32_to_e2m1(-1e30f), 15);
    EXPECT_EQ(f32_to_e2m1(-0.1f), 0);  // rounds to zero: no sign bit, as formats.py stores it
    EXPECT_EQ(f32_to_e2m1(-0.0f), 0);
}

TEST(Nvfp4, NibbleOrderIsLowNibbleEvenElement) {
    std::vector<float> x(16, 0.0f);
    x[0] = 6.0f;   // code 7 in the low nibble of byte 0
    x[1] = -1.0f;  // code 10 in the high nibble of byte 0
    x[14] = 0.5f;
    x[15] = 3.0f;
    const Nvfp4Tensor t = nvfp4_quantize(x.data(), 1, 16);
    ASSERT_EQ(t.packed.size(), 8u);
    ASSERT_EQ(t.scales.size(), 1u);
    EXPECT_EQ(t.global_scale, 6.0f / 2688.0f);
    EXPECT_EQ(t.scales[0], 0x7e);  // 448: the block holding the amax
    EXPECT_EQ(t.packed[0], 0xa7);
    EXPECT_EQ(t.packed[7], 0x51);
}

TEST(Nvfp4, AllZeroTensor) {
    std::vector<float> x(64, 0.0f);
    x[5] = -0.0f;
    const Nvfp4Tensor t = nvfp4_quantize(x.data(), 2, 32);
    EXPECT_EQ(t.global_scale, 1.0f);
    for (uint8_t s : t.scales) EXPECT_EQ(s, 0x38);
    for (uint8_t p : t.packed) EXPECT_EQ(p, 0);
}

TEST(Nvfp4, ScalarStepsMatchTheRecipe) {
    EXPECT_EQ(nvfp4_global_scale(2688.0f), 1.0f);
    EXPECT_EQ(nvfp4_global_scale(0.0f), 1.0f);
    EXPECT_EQ(nvfp4_block_scale_code(0.0f, 0.5f), 0x38);            // zero block -> 1.0
    EXPECT_EQ(nvfp4_block_scale_code(1e-9f, 1.0f), 0x01);           // clamped to 2^-9
    EXPECT_EQ(nvfp4_block_scale_code(6.0f * 448.0f, 1.0f), 0x7e);   // 448
    EXPECT_EQ(nvfp4_block_scale_code(6.0f * 1.0625f, 1.0f), 0x38);  // tie 1.0 / 1.125 -> 1.0
    EXPECT_EQ(nvfp4_block_divisor(0x38, 0.25f), 0.25f);
    EXPECT_EQ(nvfp4_encode(-0.75f, 0.5f), 0xb);  // -1.5
}

}  // namespace
}  // namespace dsv4
