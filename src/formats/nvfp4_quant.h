// CPU reference quantizers, bit-exact with the Python that made the checkpoints and fixtures
// (quant_nvfp4 / quant_mxfp4 / quant_fp8_block of ../shared/tools/formats.py, run by torch on
// the CPU). nvfp4_quantize is also the oracle for the fused GPU activation quantizer: the
// scalar steps below are DSV4_HD so the kernel can call the very same code.
//
// Every step is a single float32 operation in the same order as the Python (amax, one
// division, one multiplication...), so a CUDA port is bit-exact as long as it compiles with
// IEEE division (no --use_fast_math / -prec-div=false).
#pragma once

#include <cstdint>
#include <vector>

#include "base/fp_codes.h"

namespace dsv4 {

// NVFP4, ModelOpt layout (FORMATS §3.3).
struct Nvfp4Tensor {
    std::vector<uint8_t> packed;  // [rows, cols/2], low nibble = even element
    std::vector<uint8_t> scales;  // E4M3 [rows, cols/16]
    float global_scale;           // weight_scale_2
};

// Quantizes a row-major [rows, cols] float32 matrix; cols must be a multiple of 16. The same
// function serves weights and activations (per-16 blocks along a row, dynamic global scale
// from the amax of the whole matrix):
//   global = amax / (6*448)                       (1.0 when the whole tensor is zero)
//   block  = E4M3_rne(max(block_amax / (6*global), 2^-9))   (1.0 = 0x38 for an all-zero block)
//   code   = E2M1_rne(x / (float(block) * global)), ties to the even code, |.| > 5 -> 6,
//            values that round to zero are stored as +0 (no sign bit)
// All-zero tensor: global 1.0, every scale 0x38, every code 0.
Nvfp4Tensor nvfp4_quantize(const float* x, int64_t rows, int64_t cols);

// ---- The scalar steps of nvfp4_quantize (shared with the CUDA kernel).

inline constexpr float kNvfp4E2m1Max = 6.0f;
inline constexpr float kNvfp4E4m3Max = 448.0f;
inline constexpr float kNvfp4MinBlockScale = 0.001953125f;  // 2^-9, smallest E4M3 subnormal

// weight_scale_2 from the tensor's amax (|x| max over all elements).
DSV4_HD float nvfp4_global_scale(float amax) {
    return amax > 0.0f ? amax / (kNvfp4E2m1Max * kNvfp4E4m3Max) : 1.0f;
}

// The E4M3 code of one block's scale. `global` is nvfp4_global_scale(amax).
DSV4_HD uint8_t nvfp4_block_scale_code(float block_amax, float global) {
    if (!(block_amax > 0.0f)) return 0x38;       // 1.0
    const float denom = kNvfp4E2m1Max * global;  // rounded to float first, as in the Python
    float s = block_amax / denom;
    if (s < kNvfp4MinBlockScale) s = kNvfp4MinBlockScale;
    return f32_to_e4m3(s);
}

// The float32 divisor of a block's elements: float(E4M3 scale) * global.
DSV4_HD float nvfp4_block_divisor(uint8_t scale_code, float global) {
    return e4m3_to_f32(scale_code) * global;
}

// The E2M1 code (4 bits) of one element given its block's divisor.
DSV4_HD uint8_t nvfp4_encode(float x, float divisor) {
    return f32_to_e2m1(x / divisor);
}

// ---- MXFP4, the DeepSeek release routed-expert format.
struct Mxfp4Tensor {
    std::vector<uint8_t> packed;  // [rows, cols/2], low nibble = even element (file dtype I8)
    std::vector<uint8_t> scales;  // E8M0 [rows, cols/32]
};

// cols must be a multiple of 32. Block scale = 2^ceil(log2(block_amax / 6)) (1.0 for a zero
// block), code = E2M1_rne(x / scale).
Mxfp4Tensor mxfp4_quantize(const float* x, int64_t rows, int64_t cols);

// ---- FP8 E4M3 with 128x128 UE8M0 block scales, the DeepSeek release dense format.
struct Fp8BlockTensor {
    std::vector<uint8_t> values;  // E4M3 [rows, cols]
    std::vector<uint8_t> scales;  // E8M0 [ceil(rows/128), ceil(cols/128)]
};

// Any shape; edge blocks are partial. Block scale = 2^ceil(log2(block_amax / 448)) (1.0 for a
// zero block), value = E4M3_rne(x / scale).
Fp8BlockTensor fp8_block_quantize(const float* x, int64_t rows, int64_t cols);

// The power-of-two exponent e = ceil(log2(x)) of an MXFP4 / FP8 block scale for x > 0, as
// torch computes it: log2 rounded to float32 first, so an x a hair above 2^k can give k.
int pow2_scale_exponent(float x);

}  // namespace dsv4
