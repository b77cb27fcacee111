// Helpers shared by the CUDA backend tests: GPU detection (skip with a message where there is
// none, fail where DSV4_EXPECT_GPU says there must be one), random checkpoint-format weights,
// and the dequant_row-based CPU reference of a GEMV.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/common/device.h"
#include "formats/quant_weight.h"

namespace dsv4::cuda::test {

// What a GPU test does on this machine. Without a usable GPU it skips (CPU CI builds and runs
// the binaries) unless DSV4_EXPECT_GPU is set (to anything but "" or "0"), as on the GPU machine:
// there a test that cannot reach the GPU fails, so a broken driver or a non-Hopper device cannot
// pass as a run of skipped tests.
enum class GpuTestDecision { kRun, kSkip, kFail };
GpuTestDecision gpu_test_decision(bool gpu_usable, const char* expect_env);

// Why the GPU cannot run the tests ("" when it can): no CUDA device, or query_device's error.
std::string gpu_unusable_reason();

// Runs, skips or fails the calling test as gpu_test_decision says.
#define DSV4_REQUIRE_GPU()                                                                       \
    do {                                                                                         \
        const std::string dsv4_why_ = ::dsv4::cuda::test::gpu_unusable_reason();                 \
        switch (::dsv4::cuda::test::gpu_test_decision(dsv4_why_.empty(),                         \
                                                      std::getenv("DSV4_EXPECT_GPU"))) {         \
            case ::dsv4::cuda::test::GpuTestDecision::kRun:                                      \
                break;                                                                           \
            case ::dsv4::cuda::test::GpuTestDecision::kSkip:                                     \
                GTEST_SKIP() << dsv4_why_ << ": GPU test skipped (run on the H200)";             \
            case ::dsv4::cuda::test::GpuTestDecision::kFail:                                     \
                FAIL() << dsv4_why_ << ", but DSV4_EXPECT_GPU is set: a GPU test must run here"; \
        }                                                                                        \
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
