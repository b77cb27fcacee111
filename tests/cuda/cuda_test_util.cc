#include "cuda_test_util.h"

#include <cmath>
#include <cstring>

#include "base/fp_codes.h"

namespace dsv4::cuda::test {

GpuTestDecision gpu_test_decision(bool gpu_usable, const char* expect_env) {
    if (gpu_usable) return GpuTestDecision::kRun;
    const bool expected = expect_env != nullptr && std::strcmp(expect_env, "") != 0 &&
                          std::strcmp(expect_env, "0") != 0;
    return expected ? GpuTestDecision::kFail : GpuTestDecision::kSkip;
}

std::string gpu_unusable_reason() {
    if (!gpu_available()) return "no CUDA GPU on this machine";
    const auto dev = query_device(0);
    if (dev) return {};
    // An empty reason would read as "usable" to the caller.
    const std::string& why = dev.status().message();
    return why.empty() ? "query_device(0) failed" : why;
}

const char* test_format_name(TestFormat f) {
    switch (f) {
        case TestFormat::kNvfp4:
            return "nvfp4";
        case TestFormat::kMxfp4:
            return "mxfp4";
        case TestFormat::kFp8E8m0:
            return "fp8-e8m0";
        case TestFormat::kFp8F32:
            return "fp8-f32";
        case TestFormat::kBf16:
            return "bf16";
    }
    return "?";
}

namespace {

uint8_t random_e4m3_scale(std::mt19937& rng) {
    // Mostly ordinary block scales, with subnormals, zero blocks and sign-set scales mixed in.
    std::uniform_int_distribution<int> pick(0, 99);
    const int p = pick(rng);
    if (p < 3) return 0x00;                                                   // all-zero block
    if (p < 8) return static_cast<uint8_t>(1 + pick(rng) % 7);                // subnormal 2^-9..
    if (p < 11) return static_cast<uint8_t>(0x80 | (0x30 + pick(rng) % 24));  // negative
    if (p < 13) return 0x7e;                                                  // 448, the largest
    return static_cast<uint8_t>(0x20 + pick(rng) % 48);                       // 2^-3 .. 2^3
}

}  // namespace

OwnedWeight random_weight(TestFormat f, int64_t rows, int64_t cols, std::mt19937& rng) {
    OwnedWeight o;
    QuantWeight& w = o.w;
    w.rows = rows;
    w.cols = cols;
    std::uniform_int_distribution<int> byte(0, 255);
    switch (f) {
        case TestFormat::kNvfp4:
        case TestFormat::kMxfp4: {
            const bool mx = f == TestFormat::kMxfp4;
            const int block = mx ? kMxfp4Block : kNvfp4Block;
            o.data.resize(static_cast<size_t>(rows * cols / 2));
            for (auto& b : o.data) b = static_cast<uint8_t>(byte(rng));
            o.scale.resize(static_cast<size_t>(rows * cols / block));
            std::uniform_int_distribution<int> e8(112, 132);
            for (auto& s : o.scale) s = mx ? static_cast<uint8_t>(e8(rng)) : random_e4m3_scale(rng);
            w.format = mx ? WeightFormat::kMxfp4 : WeightFormat::kNvfp4;
            w.dtype = DType::kU8;
            w.scale_dtype = mx ? DType::kF8E8M0 : DType::kF8E4M3;
            w.scale_cols = cols / block;
            w.global_scale = mx ? 1.0f : 3.0517578e-05f * 1.7f;
            break;
        }
        case TestFormat::kFp8E8m0:
        case TestFormat::kFp8F32: {
            o.data.resize(static_cast<size_t>(rows * cols));
            for (auto& b : o.data) {
                int v = byte(rng);
                if ((v & 0x7f) == 0x7f) v &= 0xfe;  // no NaN codes
                b = static_cast<uint8_t>(v);
            }
            const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
            w.format = WeightFormat::kFp8Block;
            w.dtype = DType::kF8E4M3;
            w.scale_cols = sc;
            if (f == TestFormat::kFp8E8m0) {
                std::uniform_int_distribution<int> e8(118, 130);
                o.scale.resize(static_cast<size_t>(sr * sc));
                for (auto& s : o.scale) s = static_cast<uint8_t>(e8(rng));
                w.scale_dtype = DType::kF8E8M0;
            } else {
                std::uniform_real_distribution<float> u(0.001f, 0.01f);
                o.scale.resize(static_cast<size_t>(sr * sc * 4));
                for (int64_t i = 0; i < sr * sc; ++i) {
                    const float v = u(rng);
                    std::memcpy(o.scale.data() + 4 * i, &v, 4);
                }
                w.scale_dtype = DType::kF32;
            }
            break;
        }
        case TestFormat::kBf16: {
            std::normal_distribution<float> nd(0.0f, 0.05f);
            o.data.resize(static_cast<size_t>(rows * cols * 2));
            for (int64_t i = 0; i < rows * cols; ++i) {
                const uint16_t v = f32_to_bf16(nd(rng));
                std::memcpy(o.data.data() + 2 * i, &v, 2);
            }
            w.format = WeightFormat::kDense;
            w.dtype = DType::kBF16;
            break;
        }
    }
    w.data = o.data.data();
    w.scale = o.scale.empty() ? nullptr : o.scale.data();
    return o;
}

std::vector<float> random_activations(int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_int_distribution<int> e(-3, 3);
    std::vector<float> x(static_cast<size_t>(n));
    float scale = std::ldexp(1.0f, e(rng));
    for (int64_t i = 0; i < n; ++i) {
        if (i % 512 == 0) scale = std::ldexp(1.0f, e(rng));
        float v = nd(rng) * scale;
        if (v == 0.0f) v = scale;
        x[static_cast<size_t>(i)] = v;
    }
    return x;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
    std::vector<uint16_t> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = f32_to_bf16(x[i]);
    return out;
}

std::vector<float> from_bf16(const std::vector<uint16_t>& x) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_f32(x[i]);
    return out;
}

void reference_gemv(const QuantWeight& w, const float* x, int64_t m, double* y, double* abs_sum) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t n = 0; n < w.rows; ++n) {
        dequant_row(w, n, row.data());
        for (int64_t t = 0; t < m; ++t) {
            double s = 0.0, a = 0.0;
            const float* xt = x + t * w.cols;
            for (int64_t k = 0; k < w.cols; ++k) {
                const double p = static_cast<double>(row[static_cast<size_t>(k)]) * xt[k];
                s += p;
                a += std::fabs(p);
            }
            y[t * w.rows + n] = s;
            abs_sum[t * w.rows + n] = a;
        }
    }
}

}  // namespace dsv4::cuda::test
