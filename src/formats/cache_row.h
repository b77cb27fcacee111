// How one cache row is stored: a window-ring row or compressed K=V entry (`hd` wide, the last
// `rope_dim` of them RoPE dims) and an indexer key (`index_head_dim` wide). Writers encode a
// float32 row, readers decode it back; the byte count of a row is a function of its width,
// its RoPE dims and the type only (docs/kv-cache.md gives it for V4-Flash and V4-Pro).
//
// Row layouts (all rows padded to a multiple of 4 bytes, so rows and scales stay aligned):
//   kF32   width float32                                          4 * width
//   kBf16  width bf16, nearest even                               2 * width
//   kFp8   [nope E4M3][rope_dim bf16][ceil(nope / block) UE8M0]   nope = width - rope_dim;
//          K=V rows: block 64 (DeepSeek's layout, 448 + 128 + 7 + 1 pad = 584 B at hd 512,
//          rope 64); indexer keys: rope_dim 0, block 128 (one scale per 128-wide key).
//   kFp4   Hadamard-rotated row, [E2M1 packed two per byte, element 2i in the low nibble]
//          [ceil(width / block) UE8M0], block 32; width a power of two, no RoPE split. A
//          decoded row stays rotated: a query must be rotated the same way (the dot product is
//          unchanged, the rotation being orthonormal).
// A UE8M0 scale is pow2ceil(max(amax, floor) * f32(1 / max)) (FP8: floor 1e-4, max 448; FP4:
// floor 6 * 2^-126, max 6), exactly ops::RoundTrip's rule, so encode + decode of a block is
// bit for bit the reference round trip of that block.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dsv4 {

// clang-format off
#define DSV4_CACHE_TYPES(X) \
    X(kF32,  "f32")         \
    X(kBf16, "bf16")        \
    X(kFp8,  "fp8")         \
    X(kFp4,  "fp4")
// clang-format on

enum class CacheType : uint8_t {
#define DSV4_CACHE_TYPE_ENUM(name, str) name,
    DSV4_CACHE_TYPES(DSV4_CACHE_TYPE_ENUM)
#undef DSV4_CACHE_TYPE_ENUM
};

std::string_view cache_type_name(CacheType t);
std::optional<CacheType> cache_type_from_name(std::string_view name);

// The format of a row; the width comes from the op (hd or index_head_dim). The default is
// float32, the only format that needs no other field.
struct CacheRowFormat {
    CacheType type = CacheType::kF32;
    int rope_dim = 0;  // kFp8: trailing dims kept bf16
    int block = 0;     // kFp8 / kFp4: values per UE8M0 scale
};

inline constexpr int kKvFp8Block = 64;
inline constexpr int kIndexFp8Block = 128;
inline constexpr int kIndexFp4Block = 32;

// Window-ring rows and compressed K=V entries (f32, bf16 or fp8).
inline CacheRowFormat kv_row_format(CacheType t, int rope_dim) {
    return {t, t == CacheType::kFp8 ? rope_dim : 0, t == CacheType::kFp8 ? kKvFp8Block : 0};
}
// Indexer keys (f32, bf16, fp8 or fp4).
inline CacheRowFormat index_key_format(CacheType t) {
    const int block = t == CacheType::kFp8   ? kIndexFp8Block
                      : t == CacheType::kFp4 ? kIndexFp4Block
                                             : 0;
    return {t, 0, block};
}

// Empty when a row of `width` can take the format, else why not (one line).
std::string cache_row_unsupported(const CacheRowFormat& f, int width);
int64_t cache_row_bytes(const CacheRowFormat& f, int width);
// x [width] -> out [cache_row_bytes]. kFp4 rotates a copy of x first.
void encode_cache_row(const CacheRowFormat& f, int width, const float* x, uint8_t* out);
// in [cache_row_bytes] -> x [width].
void decode_cache_row(const CacheRowFormat& f, int width, const uint8_t* in, float* x);
// x as the cache would give it back: decode(encode(x)) into out [width] (may alias x).
void store_and_load_row(const CacheRowFormat& f, int width, const float* x, float* out);

// The scale rules (pow2_ceil, fp8_block_scale, fp4_block_scale) are base/fp_codes.h's, shared
// with the round trips on both backends.
// Natural-order (Sylvester) Walsh-Hadamard in fp32 butterflies, then times n^-1/2 (in fp32).
void hadamard_rotate(float* x, int n);

}  // namespace dsv4
