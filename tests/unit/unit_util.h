// Small helpers shared by the unit tests: dense float32 weights and a deterministic
// pseudo-random filler (no std::random distribution, so values are identical everywhere).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "formats/quant_weight.h"

namespace dsv4::unit {

// A dense F32 QuantWeight viewing `v` ([rows, cols], row-major); `v` must outlive it.
inline QuantWeight dense_f32(const std::vector<float>& v, int64_t rows, int64_t cols) {
    QuantWeight w;
    w.format = WeightFormat::kDense;
    w.dtype = DType::kF32;
    w.rows = rows;
    w.cols = cols;
    w.data = v.data();
    w.scale = nullptr;
    return w;
}

// Values in [-1, 1) from a 64-bit LCG; same sequence on every platform.
inline std::vector<float> lcg_values(int64_t n, uint64_t seed) {
    std::vector<float> v(static_cast<size_t>(n));
    uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (auto& x : v) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x = static_cast<float>(static_cast<double>(s >> 11) * 0x1.0p-52 - 1.0);
    }
    return v;
}

inline double silu(double x) {
    return x / (1.0 + std::exp(-x));
}
inline double sigmoid(double x) {
    return 1.0 / (1.0 + std::exp(-x));
}

}  // namespace dsv4::unit
