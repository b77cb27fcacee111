#include "base/dtype.h"

#include <cstring>

#include "base/check.h"
#include "base/fp_codes.h"

namespace dsv4 {

size_t dtype_size(DType t) {
    switch (t) {
#define DSV4_DTYPE_SIZE(name, size, str) \
    case DType::name:                    \
        return size;
        DSV4_DTYPES(DSV4_DTYPE_SIZE)
#undef DSV4_DTYPE_SIZE
    }
    DSV4_UNREACHABLE("bad dtype ", static_cast<int>(t));
}

std::string_view dtype_name(DType t) {
    switch (t) {
#define DSV4_DTYPE_NAME(name, size, str) \
    case DType::name:                    \
        return str;
        DSV4_DTYPES(DSV4_DTYPE_NAME)
#undef DSV4_DTYPE_NAME
    }
    DSV4_UNREACHABLE("bad dtype ", static_cast<int>(t));
}

std::optional<DType> dtype_from_name(std::string_view name) {
    for (DType t : kAllDTypes) {
        if (dtype_name(t) == name) return t;
    }
    return std::nullopt;
}

int64_t load_as_i64(const void* data, DType t, size_t i) {
    const auto* p = static_cast<const uint8_t*>(data);
    switch (t) {
        case DType::kI8:
            return static_cast<int8_t>(p[i]);
        case DType::kU8:
            return p[i];
        case DType::kI32: {
            int32_t v;
            std::memcpy(&v, p + 4 * i, 4);
            return v;
        }
        case DType::kI64: {
            int64_t v;
            std::memcpy(&v, p + 8 * i, 8);
            return v;
        }
        default:
            DSV4_UNREACHABLE("load_as_i64 on ", dtype_name(t));
    }
}

float load_as_f32(const void* data, DType t, size_t i) {
    const auto* p = static_cast<const uint8_t*>(data);
    switch (t) {
        case DType::kF32: {
            float v;
            std::memcpy(&v, p + 4 * i, 4);
            return v;
        }
        case DType::kF16: {
            uint16_t v;
            std::memcpy(&v, p + 2 * i, 2);
            return f16_to_f32(v);
        }
        case DType::kBF16: {
            uint16_t v;
            std::memcpy(&v, p + 2 * i, 2);
            return bf16_to_f32(v);
        }
        case DType::kF8E4M3:
            return e4m3_to_f32(p[i]);
        case DType::kF8E8M0:
            return e8m0_to_f32(p[i]);
        case DType::kI8:
        case DType::kU8:
        case DType::kI32:
        case DType::kI64:
            return static_cast<float>(load_as_i64(data, t, i));
    }
    DSV4_UNREACHABLE("bad dtype ", static_cast<int>(t));
}

}  // namespace dsv4
