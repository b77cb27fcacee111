// A 2-D weight matrix [rows, cols] (out × in) in one of the storage formats DeepSeek-V4
// checkpoints use, plus exact dequantization of a row. The format is detected from the tensors
// present and their dtypes/shapes, never from config prose.
#pragma once

#include <cstdint>
#include <string>

#include "base/dtype.h"
#include "base/status.h"
#include "formats/safetensors.h"

namespace dsv4 {

enum class WeightFormat : uint8_t {
    kDense,     // F32 / BF16 / F16 values [rows, cols]
    kFp8Block,  // F8_E4M3 [rows, cols] + scale [ceil(rows/128), ceil(cols/128)] (E8M0 or F32)
    kMxfp4,     // E2M1 x2 (I8/U8) [rows, cols/2] + E8M0 scale [rows, cols/32]
    kNvfp4,     // E2M1 x2 (U8) [rows, cols/2] + E4M3 scale [rows, cols/16] + F32 global scale
};

const char* weight_format_name(WeightFormat f);

inline constexpr int kFp8Block = 128;
inline constexpr int kMxfp4Block = 32;
inline constexpr int kNvfp4Block = 16;

struct QuantWeight {
    WeightFormat format = WeightFormat::kDense;
    int64_t rows = 0, cols = 0;  // logical shape [out, in]
    DType dtype = DType::kF32;   // of data: dense value type, F8_E4M3, or I8/U8 packed FP4
    const void* data = nullptr;  // see WeightFormat for the layout
    DType scale_dtype = DType::kF8E8M0;
    const void* scale = nullptr;  // block scales; nullptr for kDense
    int64_t scale_cols = 0;       // row stride of the scale matrix (elements)
    float global_scale = 1.0f;    // NVFP4 weight_scale_2
    float input_scale = 0.0f;     // NVFP4 input_scale if present (calibration), else 0

    bool valid() const { return data != nullptr; }
    // Bytes the weight occupies in memory (values + scales).
    size_t nbytes() const;
};

// Writes row r (cols values) of W as float32. Exact: every format's value × scale is
// representable in float32.
void dequant_row(const QuantWeight& w, int64_t r, float* out);

// Finds the weight stored under `prefix` ("layers.3.attn.wq_a"): `prefix.weight` plus the
// scale tensors that make its format, checked against the logical shape [rows, cols].
// Errors name the tensor and what is wrong.
Expected<QuantWeight> bind_quant_weight(const TensorStore& store, const std::string& prefix,
                                        int64_t rows, int64_t cols);

// The tensor names bind_quant_weight may use for `prefix` (for the unused-tensor report).
const char* const* quant_weight_suffixes();

}  // namespace dsv4
