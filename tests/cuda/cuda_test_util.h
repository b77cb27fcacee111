// Helpers shared by the CUDA backend tests: GPU detection (skip with a message where there is
// none), random checkpoint-format weights, and the dequant_row-based CPU reference of a GEMV.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/common/device.h"
#include "formats/quant_weight.h"

namespace dsv4::cuda::test {

// Skips the calling test unless a Hopper GPU is present (CPU CI builds and runs the binaries).
#define DSV4_REQUIRE_GPU()                                                                     \
    do {                                                                                       \
        if (!::dsv4::cuda::gpu_available())                                                    \
            GTEST_SKIP() << "no CUDA GPU on this machine: GPU test skipped (run on the H200)"; \
        const auto dsv4_dev_ = ::dsv4::cuda::query_device(0);                                  \
        if (!dsv4_dev_) GTEST_SKIP() << dsv4_dev_.status().message();                          \
    } while (0)

// A checkpoint-format weight with its own storage; `w` points into the vectors.
struct OwnedWeight {
    QuantWeight w;
    std::vector<uint8_t> data;
    std::vector<uint8_t> scale;
};

enum class TestFormat { kNvfp4, kMxfp4, kFp8E8m0, kFp8F32, kBf16 };
const char* test_format_name(TestFormat f);

// Random weights covering the awkward codes: every E2M1 code (incl. -0), NVFP4 block scales over
// the whole E4M3 range incl. subnormals, zero blocks and sign-set scales, FP8 values over the
// whole E4M3 range incl. subnormals.
OwnedWeight random_weight(TestFormat f, int64_t rows, int64_t cols, std::mt19937& rng);

// Random activations: normal with a per-row scale spread over a few binades, never zeros.
std::vector<float> random_activations(int64_t n, std::mt19937& rng);

// bf16 round trip of each value (what the kernel sees for bf16 activations).
std::vector<uint16_t> to_bf16(const std::vector<float>& x);
std::vector<float> from_bf16(const std::vector<uint16_t>& x);

// y[m][n] = sum_k dequant(w)[n][k] * x[m][k] in double, plus sum_k |w x| for the error bound.
void reference_gemv(const QuantWeight& w, const float* x, int64_t m, double* y, double* abs_sum);

}  // namespace dsv4::cuda::test
