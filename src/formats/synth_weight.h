// Random weights in the checkpoint formats, for synthetic benchmark models (`--synthetic`):
// codes drawn uniformly at random, block scales chosen so that a row's values have an rms of
// about 1/sqrt(cols) (the magnitude of a trained model's projections, which keeps the synthetic
// forward finite through 43 layers). The same (seed, index) always gives the same bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/host_device.h"
#include "formats/quant_weight.h"

namespace dsv4 {

// splitmix64 of a counter: 64 random bits for (seed, i), the same on host and device.
DSV4_HD uint64_t synth_bits(uint64_t seed, uint64_t i) {
    uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// A uniform draw in [0, 1) for (seed, i): the top 53 bits of synth_bits.
inline double synth_uniform(uint64_t seed, uint64_t i) {
    return static_cast<double>(synth_bits(seed, i) >> 11) * 0x1.0p-53;
}

// A weight and the bytes it points into.
struct SynthWeight {
    QuantWeight w;
    std::vector<uint8_t> data, scale;
};

// rows x cols in `format` (kDense: BF16 values); the FP4 formats need cols % 32 == 0.
std::unique_ptr<SynthWeight> synth_weight(WeightFormat format, int64_t rows, int64_t cols,
                                          uint64_t seed);

// Scale codes of the FP4 formats for a K-wide matrix: MXFP4's E8M0 exponent around which the
// block scales are drawn, and NVFP4's per-tensor global scale (the E4M3 block scales are drawn
// in [0.5, 2]). Shared by the device generator of routed experts (CUDA backend).
int synth_mxfp4_exponent(int64_t cols);
float synth_nvfp4_global(int64_t cols);
inline constexpr uint8_t kSynthNvfp4ScaleLo = 0x30, kSynthNvfp4ScaleHi = 0x40;  // E4M3 0.5, 2

}  // namespace dsv4
