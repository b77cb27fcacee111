// Helpers of the bf16 reference mode's CUDA op tests (bf16_*_gpu_test.cc): the bound every
// output is held to, and inputs that are already bf16 values (the mode's activations).
#pragma once

#include <cstdio>
#include <vector>

#include "base/fp_codes.h"
#include "ops_gpu_util.h"

namespace dsv4::ops_gpu_test {

// |gpu - ref| <= 2^-7 |ref| + atol on every element (one bf16 step of the value, plus what the
// op's fp32 arithmetic allows before its rounding) and at least `min_identical` of them
// bit-identical (printed).
inline void bf16_check(const char* what, const std::vector<float>& gpu,
                       const std::vector<float>& ref, double atol, double min_identical) {
    expect_close(what, gpu, ref, 1.0 / 128, atol);
    size_t same = 0;
    for (size_t i = 0; i < ref.size() && i < gpu.size(); ++i) same += gpu[i] == ref[i];
    const double frac = ref.empty() ? 1.0 : static_cast<double>(same) / ref.size();
    std::printf("[bf16] %-52s %zu of %zu bit-identical (%.4f)\n", what, same, ref.size(), frac);
    EXPECT_GE(frac, min_identical) << what;
}

// Every element rounded to a bf16 value.
inline std::vector<float> bf16_values(std::vector<float> v) {
    for (float& x : v) x = bf16_round(x);
    return v;
}

}  // namespace dsv4::ops_gpu_test
