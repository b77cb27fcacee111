#include "formats/synth_weight.h"

#include <cmath>

#include "base/fp_codes.h"

namespace dsv4 {

namespace {

// rms of a uniformly drawn E2M1 code (values 0, .5, 1, 1.5, 2, 3, 4, 6, either sign).
constexpr double kE2m1Rms = 2.926;

void fill_random(std::vector<uint8_t>& v, uint64_t seed) {
    for (size_t i = 0; i < v.size(); i += 8) {
        const uint64_t r = synth_bits(seed, i / 8);
        for (size_t b = 0; b < 8 && i + b < v.size(); ++b)
            v[i + b] = static_cast<uint8_t>(r >> (8 * b));
    }
}

}  // namespace

int synth_mxfp4_exponent(int64_t cols) {
    return 127 +
           static_cast<int>(std::lround(std::log2(1.0 / (kE2m1Rms * std::sqrt(double(cols))))));
}

float synth_nvfp4_global(int64_t cols) {
    // Block scales drawn in [0.5, 2] have an rms near 1.2.
    return static_cast<float>(1.0 / (kE2m1Rms * 1.2 * std::sqrt(static_cast<double>(cols))));
}

std::unique_ptr<SynthWeight> synth_weight(WeightFormat format, int64_t rows, int64_t cols,
                                          uint64_t seed) {
    auto s = std::make_unique<SynthWeight>();
    QuantWeight& q = s->w;
    q.format = format;
    q.rows = rows;
    q.cols = cols;
    const double target = 1.0 / std::sqrt(static_cast<double>(cols));
    switch (format) {
        case WeightFormat::kDense: {
            // Uniform in [-a, a] has rms a / sqrt(3).
            const float a = static_cast<float>(target * std::sqrt(3.0));
            s->data.resize(static_cast<size_t>(rows * cols) * 2);
            auto* v = reinterpret_cast<uint16_t*>(s->data.data());
            for (int64_t i = 0; i < rows * cols; ++i) {
                const double u = synth_uniform(seed, i);
                v[i] = f32_to_bf16(static_cast<float>((2 * u - 1) * a));
            }
            q.dtype = DType::kBF16;
            break;
        }
        case WeightFormat::kFp8Block: {
            // E4M3 with exponent fields 5..8: |v| in [0.25, 3.75], rms about 1.6; never NaN.
            s->data.resize(static_cast<size_t>(rows * cols));
            fill_random(s->data, seed);
            for (uint8_t& b : s->data)
                b = static_cast<uint8_t>((b & 0x87) | ((5 + ((b >> 3) & 3)) << 3));
            const int64_t sr = (rows + kFp8Block - 1) / kFp8Block,
                          sc = (cols + kFp8Block - 1) / kFp8Block;
            s->scale.assign(static_cast<size_t>(sr * sc),
                            static_cast<uint8_t>(127 + std::lround(std::log2(target / 1.6))));
            q.dtype = DType::kF8E4M3;
            q.scale_dtype = DType::kF8E8M0;
            q.scale_cols = sc;
            break;
        }
        case WeightFormat::kMxfp4:
        case WeightFormat::kNvfp4: {
            const bool mx = format == WeightFormat::kMxfp4;
            const int block = mx ? kMxfp4Block : kNvfp4Block;
            s->data.resize(static_cast<size_t>(rows * cols / 2));
            fill_random(s->data, seed);
            s->scale.resize(static_cast<size_t>(rows * (cols / block)));
            fill_random(s->scale, ~seed);
            const int e = synth_mxfp4_exponent(cols);
            for (uint8_t& b : s->scale)
                b = mx ? static_cast<uint8_t>(e - 1 + b % 3)
                       : static_cast<uint8_t>(kSynthNvfp4ScaleLo +
                                              b % (kSynthNvfp4ScaleHi - kSynthNvfp4ScaleLo + 1));
            q.dtype = mx ? DType::kI8 : DType::kU8;
            q.scale_dtype = mx ? DType::kF8E8M0 : DType::kF8E4M3;
            q.scale_cols = cols / block;
            if (!mx) q.global_scale = synth_nvfp4_global(cols);
            break;
        }
    }
    q.data = s->data.data();
    q.scale = s->scale.empty() ? nullptr : s->scale.data();
    return s;
}

}  // namespace dsv4
