// The numerics modes of a forward pass (docs/numerics.md) and their names on the command line.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

// kFloat: plain float32 (transformers' numerics).
// kReferenceFp32: DeepSeek's reference rounding points (FP8 activations into FP8/FP4 weights,
//   FP8 KV NoPE dims per 64, Hadamard + FP4 indexer queries and keys per 32), float32
//   everywhere else (the dsref fixtures' `*_q32` outputs).
// kReference: DeepSeek's bf16 configuration itself: the same rounding points, plus bf16
//   wherever its code holds a tensor in bf16 (activations between ops, linear outputs, the mHC
//   streams, index scores, attention probabilities; the dsref fixtures' plain outputs).
// clang-format off
#define DSV4_NUMERICS(X)                     \
    X(kFloat,         "float")               \
    X(kReferenceFp32, "reference-fp32")      \
    X(kReference,     "reference")
// clang-format on

enum class Numerics : uint8_t {
#define DSV4_NUMERICS_ENUM(name, str) name,
    DSV4_NUMERICS(DSV4_NUMERICS_ENUM)
#undef DSV4_NUMERICS_ENUM
};

inline std::string_view numerics_name(Numerics n) {
    switch (n) {
#define DSV4_NUMERICS_CASE(name, str) \
    case Numerics::name:              \
        return str;
        DSV4_NUMERICS(DSV4_NUMERICS_CASE)
#undef DSV4_NUMERICS_CASE
    }
    return "?";
}

inline std::optional<Numerics> numerics_from_name(std::string_view s) {
#define DSV4_NUMERICS_MATCH(name, str) \
    if (s == str) return Numerics::name;
    DSV4_NUMERICS(DSV4_NUMERICS_MATCH)
#undef DSV4_NUMERICS_MATCH
    return std::nullopt;
}

}  // namespace dsv4
