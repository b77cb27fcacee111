// Op contract: DeepSeek's reference rounding points as in-place round trips (quantize, then
// back to f32), for the reference numerics modes (docs/numerics.md, "Reference numerics").
#pragma once

#include <cstdint>

namespace dsv4::ops {

enum class RoundTrip : uint8_t {
    kNone,
    // FP8 E4M3 in blocks along the row: scale = pow2ceil(max(amax, 1e-4) * f32(1/448)) (UE8M0),
    // x / scale clamped to +-448, rounded to nearest even.
    kFp8,
    // The row Hadamard-rotated (natural order, times width^-1/2), then E2M1 in blocks: scale =
    // pow2ceil(max(amax, 6 * 2^-126) * f32(1/6)), nearest with ties to the even code.
    kHadamardFp4,
    // The same, with the rotated row rounded to bf16 before the E2M1 rounding (DeepSeek's bf16
    // configuration: its Hadamard returns the input's dtype, bf16).
    kHadamardBf16Fp4,
    // Each value rounded to bf16, nearest even (elementwise: any block dividing dims, e.g. 1).
    kBf16,
};

// Rows of `width` floats; the first `dims` of each row are rounded in blocks of `block` (the
// rest, e.g. the RoPE dims of a KV entry, stay as they are). Hadamard needs dims == width, a
// power of two.
struct RoundTripArgs {
    float* x = nullptr;  // [rows, width]
    int64_t rows = 0;
    int width = 0, dims = 0, block = 0;
    RoundTrip kind = RoundTrip::kNone;
};

}  // namespace dsv4::ops
