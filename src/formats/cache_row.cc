#include "formats/cache_row.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/fp_codes.h"

namespace dsv4 {
namespace {

constexpr CacheType kAllCacheTypes[] = {
#define DSV4_CACHE_TYPE_LIST(name, str) CacheType::name,
    DSV4_CACHE_TYPES(DSV4_CACHE_TYPE_LIST)
#undef DSV4_CACHE_TYPE_LIST
};

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}
int64_t pad4(int64_t bytes) {
    return (bytes + 3) / 4 * 4;
}
float amax_of(const float* x, int n) {
    float amax = 0;
    for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    return amax;
}

void encode_fp8(const CacheRowFormat& f, int width, const float* x, uint8_t* out) {
    const int nope = width - f.rope_dim;
    uint8_t* scales = out + nope + 2 * int64_t{f.rope_dim};
    for (int b = 0, k = 0; b < nope; b += f.block, ++k) {
        const int n = std::min(f.block, nope - b);
        const float s = fp8_block_scale(amax_of(x + b, n));
        scales[k] = ue8m0_of(s);
        for (int i = b; i < b + n; ++i) out[i] = fp8_code(x[i], s);
    }
    for (int i = 0; i < f.rope_dim; ++i) {
        const uint16_t h = f32_to_bf16(x[nope + i]);
        std::memcpy(out + nope + 2 * int64_t{i}, &h, 2);
    }
}

void decode_fp8(const CacheRowFormat& f, int width, const uint8_t* in, float* x) {
    const int nope = width - f.rope_dim;
    const uint8_t* scales = in + nope + 2 * int64_t{f.rope_dim};
    for (int b = 0, k = 0; b < nope; b += f.block, ++k) {
        const float s = e8m0_to_f32(scales[k]);
        for (int i = b; i < std::min(b + f.block, nope); ++i) x[i] = e4m3_to_f32(in[i]) * s;
    }
    for (int i = 0; i < f.rope_dim; ++i) {
        uint16_t h;
        std::memcpy(&h, in + nope + 2 * int64_t{i}, 2);
        x[nope + i] = bf16_to_f32(h);
    }
}

void encode_fp4(const CacheRowFormat& f, int width, const float* x, uint8_t* out) {
    std::vector<float> r(x, x + width);
    hadamard_rotate(r.data(), width);
    const int64_t packed = ceil_div(width, 2);
    std::fill(out, out + packed, uint8_t{0});
    uint8_t* scales = out + packed;
    for (int b = 0, k = 0; b < width; b += f.block, ++k) {
        const int n = std::min(f.block, width - b);
        const float s = fp4_block_scale(amax_of(r.data() + b, n));
        scales[k] = ue8m0_of(s);
        for (int i = b; i < b + n; ++i) {
            const uint8_t code = fp4_code(r[i], s);
            out[i / 2] |= static_cast<uint8_t>(code << (4 * (i & 1)));
        }
    }
}

void decode_fp4(const CacheRowFormat& f, int width, const uint8_t* in, float* x) {
    const uint8_t* scales = in + ceil_div(width, 2);
    for (int i = 0; i < width; ++i) {
        const uint8_t code = (in[i / 2] >> (4 * (i & 1))) & 0xf;
        x[i] = e2m1_to_f32(code) * e8m0_to_f32(scales[i / f.block]);
    }
}

}  // namespace

std::string_view cache_type_name(CacheType t) {
    switch (t) {
#define DSV4_CACHE_TYPE_NAME(name, str) \
    case CacheType::name:               \
        return str;
        DSV4_CACHE_TYPES(DSV4_CACHE_TYPE_NAME)
#undef DSV4_CACHE_TYPE_NAME
    }
    DSV4_UNREACHABLE("bad cache type ", static_cast<int>(t));
}

std::optional<CacheType> cache_type_from_name(std::string_view name) {
    for (CacheType t : kAllCacheTypes)
        if (cache_type_name(t) == name) return t;
    return std::nullopt;
}

std::string cache_row_unsupported(const CacheRowFormat& f, int width) {
    const std::string w = std::to_string(width);
    switch (f.type) {
        case CacheType::kF32:
        case CacheType::kBf16:
            return {};
        case CacheType::kFp8:
            if (f.block <= 0 || f.rope_dim < 0 || f.rope_dim >= width)
                return "fp8 rows of width " + w + " with " + std::to_string(f.rope_dim) +
                       " RoPE dims";
            return {};
        case CacheType::kFp4:
            if (f.block <= 0 || f.rope_dim != 0 || width <= 0 || (width & (width - 1)) != 0)
                return "fp4 rows (Hadamard + E2M1) need a power-of-two width and no RoPE split, "
                       "got width " +
                       w;
            return {};
    }
    DSV4_UNREACHABLE("bad cache type ", static_cast<int>(f.type));
}

int64_t cache_row_bytes(const CacheRowFormat& f, int width) {
    switch (f.type) {
        case CacheType::kF32:
            return 4 * int64_t{width};
        case CacheType::kBf16:
            return pad4(2 * int64_t{width});
        case CacheType::kFp8: {
            const int64_t nope = width - f.rope_dim;
            return pad4(nope + 2 * int64_t{f.rope_dim} + ceil_div(nope, f.block));
        }
        case CacheType::kFp4:
            return pad4(ceil_div(width, 2) + ceil_div(width, f.block));
    }
    DSV4_UNREACHABLE("bad cache type ", static_cast<int>(f.type));
}

void encode_cache_row(const CacheRowFormat& f, int width, const float* x, uint8_t* out) {
    DSV4_DASSERT(cache_row_unsupported(f, width).empty(), cache_row_unsupported(f, width));
    switch (f.type) {
        case CacheType::kF32:
            std::memcpy(out, x, 4 * static_cast<size_t>(width));
            return;
        case CacheType::kBf16:
            for (int i = 0; i < width; ++i) {
                const uint16_t h = f32_to_bf16(x[i]);
                std::memcpy(out + 2 * int64_t{i}, &h, 2);
            }
            return;
        case CacheType::kFp8:
            return encode_fp8(f, width, x, out);
        case CacheType::kFp4:
            return encode_fp4(f, width, x, out);
    }
}

void decode_cache_row(const CacheRowFormat& f, int width, const uint8_t* in, float* x) {
    switch (f.type) {
        case CacheType::kF32:
            std::memcpy(x, in, 4 * static_cast<size_t>(width));
            return;
        case CacheType::kBf16:
            for (int i = 0; i < width; ++i) {
                uint16_t h;
                std::memcpy(&h, in + 2 * int64_t{i}, 2);
                x[i] = bf16_to_f32(h);
            }
            return;
        case CacheType::kFp8:
            return decode_fp8(f, width, in, x);
        case CacheType::kFp4:
            return decode_fp4(f, width, in, x);
    }
}

void store_and_load_row(const CacheRowFormat& f, int width, const float* x, float* out) {
    if (f.type == CacheType::kF32) {
        std::memmove(out, x, 4 * static_cast<size_t>(width));
        return;
    }
    std::vector<uint8_t> row(static_cast<size_t>(cache_row_bytes(f, width)));
    encode_cache_row(f, width, x, row.data());
    decode_cache_row(f, width, row.data(), out);
}

void hadamard_rotate(float* x, int n) {
    for (int h = 1; h < n; h *= 2)
        for (int i = 0; i < n; i += 2 * h)
            for (int j = i; j < i + h; ++j) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
    for (int i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace dsv4
