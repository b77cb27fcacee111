#include "formats/quant_weight.h"

#include <cstring>

#include "base/fp_codes.h"

namespace dsv4 {

const char* weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::kDense:
            return "dense";
        case WeightFormat::kFp8Block:
            return "fp8-e4m3-block128";
        case WeightFormat::kMxfp4:
            return "mxfp4";
        case WeightFormat::kNvfp4:
            return "nvfp4";
    }
    return "?";
}

size_t QuantWeight::nbytes() const {
    switch (format) {
        case WeightFormat::kDense:
            return static_cast<size_t>(rows * cols) * dtype_size(dtype);
        case WeightFormat::kFp8Block:
            return static_cast<size_t>(rows * cols) +
                   static_cast<size_t>((rows + 127) / 128 * scale_cols) * dtype_size(scale_dtype);
        case WeightFormat::kMxfp4:
        case WeightFormat::kNvfp4:
            return static_cast<size_t>(rows * cols / 2) + static_cast<size_t>(rows * scale_cols);
    }
    return 0;
}

void dequant_row(const QuantWeight& w, int64_t r, float* out) {
    const int64_t n = w.cols;
    switch (w.format) {
        case WeightFormat::kDense: {
            if (w.dtype == DType::kF32) {
                std::memcpy(out, static_cast<const float*>(w.data) + r * n, n * sizeof(float));
            } else if (w.dtype == DType::kBF16) {
                const auto* p = static_cast<const uint16_t*>(w.data) + r * n;
                for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(p[i]);
            } else {
                const auto* p = static_cast<const uint16_t*>(w.data) + r * n;
                for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(p[i]);
            }
            return;
        }
        case WeightFormat::kFp8Block: {
            const auto* p = static_cast<const uint8_t*>(w.data) + r * n;
            const int64_t srow = (r / kFp8Block) * w.scale_cols;
            for (int64_t i = 0; i < n; ++i) {
                const float s = load_as_f32(w.scale, w.scale_dtype, srow + i / kFp8Block);
                out[i] = e4m3_to_f32(p[i]) * s;
            }
            return;
        }
        case WeightFormat::kMxfp4:
        case WeightFormat::kNvfp4: {
            const auto* p = static_cast<const uint8_t*>(w.data) + r * (n / 2);
            const auto* s = static_cast<const uint8_t*>(w.scale) + r * w.scale_cols;
            const bool mx = w.format == WeightFormat::kMxfp4;
            const int block = mx ? kMxfp4Block : kNvfp4Block;
            for (int64_t i = 0; i < n; i += 2) {
                const uint8_t byte = p[i / 2];
                const float scale =
                    mx ? e8m0_to_f32(s[i / block]) : e4m3_to_f32(s[i / block]) * w.global_scale;
                out[i] = e2m1_to_f32(byte & 0xf) * scale;
                out[i + 1] = e2m1_to_f32(byte >> 4) * scale;
            }
            return;
        }
    }
}

namespace {

Status expect_shape(const TensorInfo& t, Shape want) {
    if (!(t.shape == want))
        return error("tensor '", t.name, "' has shape ", t.shape.str(), ", expected ", want.str());
    return Status::ok();
}

Expected<float> scalar_f32(const TensorInfo& t) {
    if (t.dtype != DType::kF32 || t.shape.numel() != 1)
        return error("tensor '", t.name, "' must be one F32 value, got ", dtype_name(t.dtype), " ",
                     t.shape.str());
    return load_as_f32(t.data, DType::kF32, 0);
}

}  // namespace

const char* const* quant_weight_suffixes() {
    static const char* const kSuffixes[] = {
        ".weight",           ".scale", ".weight_scale", ".weight_scale_2", ".input_scale",
        ".weight_scale_inv", nullptr};
    return kSuffixes;
}

Expected<QuantWeight> bind_quant_weight(const TensorStore& store, const std::string& prefix,
                                        int64_t rows, int64_t cols) {
    const TensorInfo* w = store.find(prefix + ".weight");
    if (w == nullptr) return error("missing tensor '", prefix, ".weight'");
    const TensorInfo* scale = store.find(prefix + ".scale");
    if (scale == nullptr) scale = store.find(prefix + ".weight_scale_inv");
    const TensorInfo* nv_scale = store.find(prefix + ".weight_scale");
    const TensorInfo* nv_global = store.find(prefix + ".weight_scale_2");
    const TensorInfo* input_scale = store.find(prefix + ".input_scale");
    QuantWeight q;
    q.rows = rows;
    q.cols = cols;
    q.data = w->data;
    q.dtype = w->dtype;
    switch (w->dtype) {
        case DType::kF32:
        case DType::kBF16:
        case DType::kF16:
            if (scale || nv_scale || nv_global)
                return error("tensor '", w->name, "' is ", dtype_name(w->dtype),
                             " but has quantization scales beside it");
            DSV4_RETURN_IF_ERROR(expect_shape(*w, {rows, cols}));
            q.format = WeightFormat::kDense;
            return q;
        case DType::kF8E4M3: {
            DSV4_RETURN_IF_ERROR(expect_shape(*w, {rows, cols}));
            if (scale == nullptr)
                return error("FP8 tensor '", w->name, "' has no '", prefix, ".scale' block scales");
            if (scale->dtype != DType::kF8E8M0 && scale->dtype != DType::kF32)
                return error("tensor '", scale->name, "' must be F8_E8M0 or F32, got ",
                             dtype_name(scale->dtype));
            const int64_t sr = (rows + kFp8Block - 1) / kFp8Block;
            const int64_t sc = (cols + kFp8Block - 1) / kFp8Block;
            DSV4_RETURN_IF_ERROR(expect_shape(*scale, {sr, sc}));
            q.format = WeightFormat::kFp8Block;
            q.scale = scale->data;
            q.scale_dtype = scale->dtype;
            q.scale_cols = sc;
            return q;
        }
        case DType::kI8:
        case DType::kU8: {
            if (cols % 2 != 0)
                return error("tensor '", w->name, "': packed FP4 needs an even width");
            DSV4_RETURN_IF_ERROR(expect_shape(*w, {rows, cols / 2}));
            if (nv_scale != nullptr || nv_global != nullptr) {
                if (nv_scale == nullptr)
                    return error("NVFP4 tensor '", w->name, "' has no '", prefix, ".weight_scale'");
                if (nv_global == nullptr)
                    return error("NVFP4 tensor '", w->name, "' has no '", prefix,
                                 ".weight_scale_2' (per-tensor global scale)");
                if (nv_scale->dtype != DType::kF8E4M3)
                    return error("tensor '", nv_scale->name, "' must be F8_E4M3, got ",
                                 dtype_name(nv_scale->dtype));
                if (cols % kNvfp4Block != 0)
                    return error("tensor '", w->name, "': NVFP4 width ", cols,
                                 " is not a multiple of 16");
                DSV4_RETURN_IF_ERROR(expect_shape(*nv_scale, {rows, cols / kNvfp4Block}));
                DSV4_ASSIGN_OR_RETURN(q.global_scale, scalar_f32(*nv_global));
                if (input_scale != nullptr) {
                    DSV4_ASSIGN_OR_RETURN(q.input_scale, scalar_f32(*input_scale));
                }
                q.format = WeightFormat::kNvfp4;
                q.scale = nv_scale->data;
                q.scale_dtype = DType::kF8E4M3;
                q.scale_cols = cols / kNvfp4Block;
                return q;
            }
            if (scale == nullptr)
                return error("packed FP4 tensor '", w->name, "' has no '", prefix,
                             ".scale' (MXFP4) or '.weight_scale' (NVFP4)");
            if (scale->dtype != DType::kF8E8M0)
                return error("tensor '", scale->name, "' must be F8_E8M0 for MXFP4, got ",
                             dtype_name(scale->dtype));
            if (cols % kMxfp4Block != 0)
                return error("tensor '", w->name, "': MXFP4 width ", cols,
                             " is not a multiple of 32");
            DSV4_RETURN_IF_ERROR(expect_shape(*scale, {rows, cols / kMxfp4Block}));
            q.format = WeightFormat::kMxfp4;
            q.scale = scale->data;
            q.scale_dtype = DType::kF8E8M0;
            q.scale_cols = cols / kMxfp4Block;
            return q;
        }
        default:
            return error("tensor '", w->name, "' has dtype ", dtype_name(w->dtype),
                         ", which is not a weight format dsv4 reads");
    }
}

}  // namespace dsv4
