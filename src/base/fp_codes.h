// Exact scalar conversions between float32 and the narrow number formats of DeepSeek-V4
// checkpoints (BF16, F16, FP8 E4M3, UE8M0, E2M1). Shared by the CPU reference and CUDA
// kernels, hence DSV4_HD and no library calls beyond bit casts.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/host_device.h"

namespace dsv4 {

DSV4_HD float bits_to_f32(uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(b);
#else
    float f;
    std::memcpy(&f, &b, 4);
    return f;
#endif
}

DSV4_HD uint32_t f32_to_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
#endif
}

// ---- BF16: the top 16 bits of an IEEE float32.
DSV4_HD float bf16_to_f32(uint16_t h) {
    return bits_to_f32(static_cast<uint32_t>(h) << 16);
}

// Round to nearest, ties to even; NaN stays a (quiet) NaN.
DSV4_HD uint16_t f32_to_bf16(float f) {
    uint32_t b = f32_to_bits(f);
    if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0) {
        return static_cast<uint16_t>((b >> 16) | 0x0040u);
    }
    uint32_t rounding = 0x7fffu + ((b >> 16) & 1u);
    return static_cast<uint16_t>((b + rounding) >> 16);
}

// f rounded to the nearest bf16 (ties to even), as a float: a cast to bf16 and back.
DSV4_HD float bf16_round(float f) {
    return bf16_to_f32(f32_to_bf16(f));
}

// ---- F16 (IEEE binary16).
DSV4_HD float f16_to_f32(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        // Subnormal (or zero): man * 2^-24, exact in float32.
        float v = static_cast<float>(man) * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    return bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

// Round to nearest, ties to even; overflow to infinity.
DSV4_HD uint16_t f32_to_f16(float f) {
    uint32_t b = f32_to_bits(f);
    uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
    uint32_t absb = b & 0x7fffffffu;
    if (absb >= 0x7f800000u) return sign | (absb > 0x7f800000u ? 0x7e00u : 0x7c00u);
    if (absb >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: infinity
    if (absb < 0x38800000u) {
        // Result is subnormal in f16: value / 2^-24, rounded to nearest even integer.
        float v = bits_to_f32(absb) * 16777216.0f;
        uint32_t i = static_cast<uint32_t>(v);
        float frac = v - static_cast<float>(i);
        if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;
        return sign | static_cast<uint16_t>(i);
    }
    uint32_t rounding = 0xfffu + ((absb >> 13) & 1u);
    absb += rounding;
    return sign | static_cast<uint16_t>(((absb >> 13) - (112u << 10)) & 0x7fffu);
}

// ---- FP8 E4M3 ("fn": no infinities, 0x7f/0xff are NaN, max 448, bias 7).
DSV4_HD float e4m3_to_f32(uint8_t v) {
    uint32_t sign = v >> 7;
    uint32_t exp = (v >> 3) & 0xfu;
    uint32_t man = v & 0x7u;
    float r;
    if (exp == 0xf && man == 0x7) {
        r = bits_to_f32(0x7fc00000u);
    } else if (exp == 0) {
        r = static_cast<float>(man) * 0.001953125f;  // man/8 * 2^-6
    } else {
        r = bits_to_f32(((exp + 120u) << 23) | (man << 20));
    }
    return sign ? -r : r;
}

// Round to nearest, ties to even. Magnitudes beyond 448 saturate to 448 (the checkpoint
// formats never store NaN on purpose); NaN input gives NaN (0x7f).
DSV4_HD uint8_t f32_to_e4m3(float f) {
    uint32_t b = f32_to_bits(f);
    uint8_t sign = static_cast<uint8_t>((b >> 24) & 0x80u);
    uint32_t absb = b & 0x7fffffffu;
    if (absb > 0x7f800000u) return 0x7f;
    float a = bits_to_f32(absb);
    if (a >= 464.0f) return sign | 0x7e;  // 464 is the midpoint of 448 and (absent) 480
    if (a < 0.015625f) {
        // Subnormal range: multiples of 2^-9; round a / 2^-9 to nearest even integer.
        float v = a * 512.0f;
        uint32_t i = static_cast<uint32_t>(v);
        float frac = v - static_cast<float>(i);
        if (frac > 0.5f || (frac == 0.5f && (i & 1u))) ++i;
        return sign | static_cast<uint8_t>(i);  // i == 8 is exactly the smallest normal
    }
    uint32_t rounding = 0x7ffffu + ((absb >> 20) & 1u);
    absb += rounding;
    uint32_t exp = (absb >> 23) - 120u;
    uint32_t man = (absb >> 20) & 0x7u;
    return sign | static_cast<uint8_t>((exp << 3) | man);
}

// ---- UE8M0: an unsigned power of two 2^(v-127); 0xff is NaN.
DSV4_HD float e8m0_to_f32(uint8_t v) {
    if (v == 0xff) return bits_to_f32(0x7fc00000u);
    if (v == 0) return bits_to_f32(0x00400000u);  // 2^-127 is a float32 subnormal
    return bits_to_f32(static_cast<uint32_t>(v) << 23);
}

// A power-of-two scale (the block scales' pow2_ceil) as its UE8M0 byte: the exponent field.
DSV4_HD uint8_t ue8m0_of(float pow2) {
    return static_cast<uint8_t>(f32_to_bits(pow2) >> 23);
}

// ---- E2M1 (FP4): sign in bit 3, magnitude code in bits 0..2 -> {0,.5,1,1.5,2,3,4,6}.
DSV4_HD float e2m1_to_f32(uint8_t code) {
    const uint32_t c = code & 0x7u;
    // 2 * magnitude = {0,1,2,3,4,6,8,12}
    const float twice = c < 4 ? static_cast<float>(c)
                              : static_cast<float>(4u << ((c - 4) >> 1)) * ((c & 1u) ? 1.5f : 1.0f);
    const float mag = 0.5f * twice;
    return (code & 0x8u) ? -mag : mag;
}

// Round to the E2M1 grid: nearest, exact ties to the even code; |x| > 5 saturates to 6.
// Thresholds: 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5 (ties go to codes 0,2,2,4,4,6,6).
DSV4_HD uint8_t f32_to_e2m1(float x) {
    float a = x < 0.0f ? -x : x;
    uint8_t c;
    if (a <= 0.25f)
        c = 0;
    else if (a < 0.75f)
        c = 1;
    else if (a <= 1.25f)
        c = 2;
    else if (a < 1.75f)
        c = 3;
    else if (a <= 2.5f)
        c = 4;
    else if (a < 3.5f)
        c = 5;
    else if (a <= 5.0f)
        c = 6;
    else
        c = 7;
    // NaN compares false everywhere and lands in code 7; callers never pass NaN.
    const bool negative = x < 0.0f && c != 0;
    return static_cast<uint8_t>(c | (negative ? 0x8u : 0u));
}

// ---- DeepSeek's reference-numerics block round trips (ops/quant.h), one value at a time so the
// CPU reference and the CUDA kernels run the same float operations: the UE8M0 block scale from
// the block amax, then x / scale (exact: a power of two) clamped, rounded and scaled back.

// 2^ceil(log2(v)) for positive normal v, from the exponent bits (the reference's
// fast_round_scale).
DSV4_HD float pow2_ceil(float v) {
    const uint32_t bits = f32_to_bits(v);
    const int e = static_cast<int>((bits >> 23) & 0xff) - 127 + ((bits & 0x7fffff) != 0);
    return bits_to_f32(static_cast<uint32_t>(e + 127) << 23);
}

DSV4_HD float fp8_block_scale(float amax) {
    return pow2_ceil((amax < 1e-4f ? 1e-4f : amax) * static_cast<float>(1.0 / 448.0));
}
// x / scale clamped to the format's range (std::clamp's order), as a code; the round trip
// decodes it again (the cache rows store the code and the scale).
DSV4_HD uint8_t fp8_code(float x, float scale) {
    float q = x / scale;
    q = q < -448.0f ? -448.0f : (448.0f < q ? 448.0f : q);
    return f32_to_e4m3(q);
}
DSV4_HD float fp8_round_trip(float x, float scale) {
    return e4m3_to_f32(fp8_code(x, scale)) * scale;
}

DSV4_HD float fp4_block_scale(float amax) {
    const float lo = 6.0f * 0x1p-126f;
    return pow2_ceil((amax < lo ? lo : amax) * static_cast<float>(1.0 / 6.0));
}
DSV4_HD uint8_t fp4_code(float x, float scale) {
    float q = x / scale;
    q = q < -6.0f ? -6.0f : (6.0f < q ? 6.0f : q);
    return f32_to_e2m1(q);
}
DSV4_HD float fp4_round_trip(float x, float scale) {
    return e2m1_to_f32(fp4_code(x, scale)) * scale;
}

}  // namespace dsv4
