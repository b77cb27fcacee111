// The element types dsv4 reads and writes, generated from one table (name, size, safetensors
// spelling), with exact conversion of one element to float32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

// clang-format off
#define DSV4_DTYPES(X)                  \
    X(kF32,     4, "F32")               \
    X(kF16,     2, "F16")               \
    X(kBF16,    2, "BF16")              \
    X(kF8E4M3,  1, "F8_E4M3")           \
    X(kF8E8M0,  1, "F8_E8M0")           \
    X(kI8,      1, "I8")                \
    X(kU8,      1, "U8")                \
    X(kI32,     4, "I32")               \
    X(kI64,     8, "I64")
// clang-format on

enum class DType : uint8_t {
#define DSV4_DTYPE_ENUM(name, size, str) name,
    DSV4_DTYPES(DSV4_DTYPE_ENUM)
#undef DSV4_DTYPE_ENUM
};

inline constexpr DType kAllDTypes[] = {
#define DSV4_DTYPE_LIST(name, size, str) DType::name,
    DSV4_DTYPES(DSV4_DTYPE_LIST)
#undef DSV4_DTYPE_LIST
};

size_t dtype_size(DType t);
// The safetensors spelling, e.g. "F8_E4M3".
std::string_view dtype_name(DType t);
// Parses a safetensors dtype string; nullopt for types dsv4 does not handle.
std::optional<DType> dtype_from_name(std::string_view name);

// Element i of an integer buffer (I8, U8, I32, I64) as int64; aborts on a float type.
int64_t load_as_i64(const void* data, DType t, size_t i);

// Element i of a buffer of type t as float32 (exact for every type whose values float32 holds;
// I64 values beyond 2^24 are rounded).
float load_as_f32(const void* data, DType t, size_t i);

}  // namespace dsv4
