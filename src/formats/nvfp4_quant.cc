#include "formats/nvfp4_quant.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace dsv4 {

namespace {

float abs_max(const float* x, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
    return m;
}

// E8M0 code of 2^e. The quantizers only produce exponents inside the E8M0 range for finite
// inputs whose block amax is a normal float; clamping keeps degenerate inputs well defined.
uint8_t e8m0_code(int e) {
    return static_cast<uint8_t>(std::clamp(e + 127, 0, 254));
}

// 2^e as a float (exact; ldexp handles the subnormal end).
float pow2f(int e) {
    return std::ldexp(1.0f, e);
}

}  // namespace

int pow2_scale_exponent(float x) {
    // torch.log2 on float32 returns the float32 rounding of log2(x); its ceil is what
    // formats.py uses. Rounding the double log2 to float reproduces that, including the
    // inputs just above a power of two whose log2 rounds down onto the integer.
    return static_cast<int>(std::ceil(static_cast<float>(std::log2(static_cast<double>(x)))));
}

Nvfp4Tensor nvfp4_quantize(const float* x, int64_t rows, int64_t cols) {
    DSV4_ASSERT(rows >= 0 && cols >= 0 && cols % 16 == 0, "NVFP4 needs a width that is a ",
                "multiple of 16, got [", rows, ", ", cols, "]");
    Nvfp4Tensor t;
    const int64_t nblocks = cols / 16;
    t.packed.resize(static_cast<size_t>(rows * cols / 2));
    t.scales.resize(static_cast<size_t>(rows * nblocks));
    t.global_scale = nvfp4_global_scale(abs_max(x, rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < nblocks; ++b) {
            const float* blk = x + r * cols + b * 16;
            const uint8_t sc = nvfp4_block_scale_code(abs_max(blk, 16), t.global_scale);
            t.scales[static_cast<size_t>(r * nblocks + b)] = sc;
            const float divisor = nvfp4_block_divisor(sc, t.global_scale);
            uint8_t* out = t.packed.data() + r * (cols / 2) + b * 8;
            for (int i = 0; i < 8; ++i) {
                const uint8_t lo = nvfp4_encode(blk[2 * i], divisor);
                const uint8_t hi = nvfp4_encode(blk[2 * i + 1], divisor);
                out[i] = static_cast<uint8_t>(lo | (hi << 4));
            }
        }
    }
    return t;
}

Mxfp4Tensor mxfp4_quantize(const float* x, int64_t rows, int64_t cols) {
    DSV4_ASSERT(rows >= 0 && cols >= 0 && cols % 32 == 0, "MXFP4 needs a width that is a ",
                "multiple of 32, got [", rows, ", ", cols, "]");
    Mxfp4Tensor t;
    const int64_t nblocks = cols / 32;
    t.packed.resize(static_cast<size_t>(rows * cols / 2));
    t.scales.resize(static_cast<size_t>(rows * nblocks));
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < nblocks; ++b) {
            const float* blk = x + r * cols + b * 32;
            const float amax = abs_max(blk, 32);
            const int e = amax > 0.0f ? pow2_scale_exponent(amax / 6.0f) : 0;
            t.scales[static_cast<size_t>(r * nblocks + b)] = e8m0_code(e);
            const float scale = pow2f(e);
            uint8_t* out = t.packed.data() + r * (cols / 2) + b * 16;
            for (int i = 0; i < 16; ++i) {
                const uint8_t lo = f32_to_e2m1(blk[2 * i] / scale);
                const uint8_t hi = f32_to_e2m1(blk[2 * i + 1] / scale);
                out[i] = static_cast<uint8_t>(lo | (hi << 4));
            }
        }
    }
    return t;
}

Fp8BlockTensor fp8_block_quantize(const float* x, int64_t rows, int64_t cols) {
    DSV4_ASSERT(rows >= 0 && cols >= 0, "bad FP8 shape [", rows, ", ", cols, "]");
    constexpr int64_t kB = 128;
    Fp8BlockTensor t;
    const int64_t br = (rows + kB - 1) / kB, bc = (cols + kB - 1) / kB;
    t.values.resize(static_cast<size_t>(rows * cols));
    t.scales.resize(static_cast<size_t>(br * bc));
    for (int64_t i = 0; i < br; ++i) {
        const int64_t r0 = i * kB, r1 = std::min(rows, r0 + kB);
        for (int64_t j = 0; j < bc; ++j) {
            const int64_t c0 = j * kB, c1 = std::min(cols, c0 + kB);
            float amax = 0.0f;
            for (int64_t r = r0; r < r1; ++r)
                amax = std::max(amax, abs_max(x + r * cols + c0, c1 - c0));
            const int e = amax > 0.0f ? pow2_scale_exponent(amax / 448.0f) : 0;
            t.scales[static_cast<size_t>(i * bc + j)] = e8m0_code(e);
            const float scale = pow2f(e);
            for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = c0; c < c1; ++c)
                    t.values[static_cast<size_t>(r * cols + c)] =
                        f32_to_e4m3(x[r * cols + c] / scale);
        }
    }
    return t;
}

}  // namespace dsv4
