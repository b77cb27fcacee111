#include "backend/cuda/kernels/gemv/gemv_repack.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/fp_codes.h"

namespace dsv4::cuda {
namespace {

// spread[o][h][code]: the bits of E2M1 `code` placed for word o, half h of e2m1x8_to_bf16x2.
struct E2m1Spread {
    std::array<std::array<std::array<uint32_t, 16>, 2>, 4> bits{};
    E2m1Spread() {
        for (int o = 0; o < 4; ++o)
            for (int h = 0; h < 2; ++h)
                for (int code = 0; code < 16; ++code)
                    for (int b = 0; b < 4; ++b)
                        if ((code >> b) & 1) bits[o][h][code] |= 1u << e2m1_source_bit(o, h, b);
    }
};
const E2m1Spread& spread() {
    static const E2m1Spread s;
    return s;
}

uint8_t fp4_code(const QuantWeight& w, int64_t r, int64_t k) {
    const uint8_t byte = static_cast<const uint8_t*>(w.data)[r * (w.cols / 2) + k / 2];
    return (k & 1) ? (byte >> 4) : (byte & 0xf);
}

float bf16_bits_value(uint32_t bits) {
    return bf16_to_f32(static_cast<uint16_t>(bits));
}

struct PartInfo {
    const QuantWeight* w;
    int64_t row_offset;
};

Status check_parts(const QuantWeight* const* parts, int n_experts, int ppe, GemvShape* shape) {
    if (n_experts < 1 || ppe < 1) return error("gemv_repack: ", n_experts, " experts x ", ppe);
    const QuantWeight& first = *parts[0];
    DSV4_ASSIGN_OR_RETURN(const GemvFormat format, gemv_format_of(first));
    const int64_t block_rows = kGemvRowBlock;
    int64_t n = 0;
    for (int p = 0; p < ppe; ++p) {
        const int64_t rows = parts[p]->rows;
        if (p + 1 < ppe && rows % block_rows != 0)
            return error("gemv_repack: part ", p, " has ", rows, " rows, not a multiple of ",
                         block_rows, " (needed to concatenate ", weight_format_name(first.format),
                         " parts)");
        n += rows;
    }
    for (int e = 0; e < n_experts; ++e) {
        for (int p = 0; p < ppe; ++p) {
            const QuantWeight& w = *parts[e * ppe + p];
            DSV4_ASSIGN_OR_RETURN(const GemvFormat f, gemv_format_of(w));
            if (f != format || w.cols != first.cols || w.rows != parts[p]->rows)
                return error("gemv_repack: expert ", e, " part ", p, " is ",
                             weight_format_name(w.format), " [", w.rows, ", ", w.cols,
                             "], expected ", weight_format_name(first.format), " [", parts[p]->rows,
                             ", ", first.cols, "]");
        }
    }
    const int lane_k = gemv_lane_k(format);
    if (first.cols % lane_k != 0)
        return error("gemv_repack: k = ", first.cols, " must be a multiple of ", lane_k, " for ",
                     weight_format_name(first.format));
    shape->format = format;
    shape->n = n;
    shape->k = first.cols;
    shape->n_experts = n_experts;
    return Status::ok();
}

Status pack_fp4(const QuantWeight& w, int64_t row_offset, int64_t expert, GemvPacked* out) {
    const GemvShape& s = out->shape;
    const bool mx = s.format == GemvFormat::kMxfp4;
    const int64_t T = s.k_tiles();
    const int64_t tile_base = expert * s.row_blocks() * T;
    const int64_t rb_base = expert * s.row_blocks();
    const int tile_scale_bytes = gemv_tile_scale_bytes(s.format);
    const auto& sp = spread().bits;
    const auto* scale = static_cast<const uint8_t*>(w.scale);
    // MXFP4: one shift c per part keeps every S = 2^(e - 127 + c) and every product normal.
    int mx_shift = 0;
    if (mx) {
        int e_min = 255, e_max = -1;
        for (int64_t i = 0; i < w.rows * w.scale_cols; ++i) {
            const int e = scale[i];
            if (e == 0xff) return error("MXFP4 weight has a NaN (0xff) E8M0 scale at ", i);
            e_min = std::min(e_min, e);
            e_max = std::max(e_max, e);
        }
        if (e_max - e_min > 126)
            return error("MXFP4 weight scales span 2^", e_min - 127, "..2^", e_max - 127,
                         ", wider than the 126 binades the bf16 decode can hold");
        mx_shift = mxfp4_code_shift(e_max);
    } else if (!std::isfinite(w.global_scale)) {
        return error("NVFP4 weight has a non-finite global scale");
    }
    for (int64_t r = 0; r < w.rows; ++r) {
        const int64_t row = row_offset + r;
        const int64_t lrb = row / kGemvRowBlock;
        const int64_t rb = rb_base + lrb;
        const int rr = static_cast<int>(row % kGemvRowBlock);
        const int g = rr % 8, hr = rr / 8;
        for (int64_t k16 = 0; k16 < w.cols / 16; ++k16) {
            const int64_t t = k16 / 4;
            const int c = static_cast<int>(k16 % 4);
            const int lane = 4 * g + c;
            const int64_t sblock = mx ? k16 / 2 : k16;
            const uint8_t sv = scale[r * w.scale_cols + sblock];
            uint8_t code;
            bool zero = false, flip = false;
            if (mx) {
                code = static_cast<uint8_t>(sv + mx_shift);
            } else {
                if ((sv & 0x7f) == 0x7f) return error("NVFP4 weight has a NaN E4M3 scale");
                flip = (sv & 0x80) != 0;
                zero = (sv & 0x7f) == 0;
                code = zero ? 0 : nvfp4_scale_code(sv & 0x7f);
            }
            const int64_t tile = tile_base + gemv_tile_index(lrb, t, T);
            uint8_t* sdst = out->scales.data() + tile * tile_scale_bytes +
                            gemv_lane_scale_offset(s.format, lane);
            sdst[hr] = code;
            uint32_t* words = reinterpret_cast<uint32_t*>(
                out->tiles.data() + tile * kGemvTileBytes + lane * kGemvLaneBytes);
            for (int kw = 0; kw < 16; ++kw) {
                uint8_t nib = zero ? 0 : fp4_code(w, r, k16 * 16 + kw);
                if (flip) nib ^= 0x8;
                const int j = kw / 4, pos = kw % 4;
                words[j] |= sp[(pos >> 1) * 2 + hr][pos & 1][nib];
            }
        }
        const float os =
            mx ? fp4_out_scale(mx_shift, 1.0f) : fp4_out_scale(kNvfp4ScaleExp, w.global_scale);
        out->out_scale[rb] = os;
    }
    return Status::ok();
}

// Where element (row, k) of an expert goes in the 8- and 16-bit layouts: the 16 bytes of its
// lane in its tile, its half of the row block (hr: row g or g + 8) and its index kw inside the
// lane's k range (gemv_layout.h).
struct LaneSlot {
    uint8_t* bytes;
    int hr;
    int kw;
};

LaneSlot lane_slot(GemvPacked* out, int64_t tile_base, int64_t row, int64_t k) {
    const int tile_k = gemv_tile_k(out->shape.format);
    const int lane_k = gemv_lane_k(out->shape.format);
    const int rr = static_cast<int>(row % kGemvRowBlock);
    const int kk = static_cast<int>(k % tile_k);
    const int lane = 4 * (rr % 8) + kk / lane_k;
    const int64_t tile =
        tile_base + gemv_tile_index(row / kGemvRowBlock, k / tile_k, out->shape.k_tiles());
    return {out->tiles.data() + tile * kGemvTileBytes + lane * kGemvLaneBytes, rr / 8, kk % lane_k};
}

void pack_fp8(const QuantWeight& w, int64_t row_offset, int64_t expert, GemvPacked* out) {
    const GemvShape& s = out->shape;
    const int64_t T = s.k_tiles();
    const int64_t tile_base = expert * s.row_blocks() * T;
    float* sdst = reinterpret_cast<float*>(out->scales.data());
    const auto* data = static_cast<const uint8_t*>(w.data);
    for (int64_t r = 0; r < w.rows; ++r) {
        const int64_t row = row_offset + r;
        for (int64_t k = 0; k < w.cols; ++k) {
            const LaneSlot l = lane_slot(out, tile_base, row, k);
            l.bytes[(2 * (l.kw / 4) + l.hr) * 4 + l.kw % 4] = data[r * w.cols + k];
        }
        const int64_t lrb = row / kGemvRowBlock;
        out->out_scale[expert * s.row_blocks() + lrb] = 1.0f;
        // A row block (16 rows from a 16-aligned offset) lies inside one 128-row scale block.
        if (row % kGemvRowBlock == 0 || r == 0) {
            for (int64_t t = 0; t < T; ++t)
                sdst[tile_base + gemv_tile_index(lrb, t, T)] =
                    load_as_f32(w.scale, w.scale_dtype, (r / 128) * w.scale_cols + (t * 32) / 128);
        }
    }
}

void pack_bf16(const QuantWeight& w, int64_t row_offset, int64_t expert, GemvPacked* out) {
    const GemvShape& s = out->shape;
    const int64_t tile_base = expert * s.row_blocks() * s.k_tiles();
    const auto* data = static_cast<const uint16_t*>(w.data);
    for (int64_t r = 0; r < w.rows; ++r) {
        const int64_t row = row_offset + r;
        for (int64_t k = 0; k < w.cols; ++k) {
            const LaneSlot l = lane_slot(out, tile_base, row, k);
            const uint16_t v = data[r * w.cols + k];
            std::memcpy(l.bytes + ((l.kw >> 1) * 2 + l.hr) * 4 + (l.kw & 1) * 2, &v, 2);
        }
        out->out_scale[expert * s.row_blocks() + row / kGemvRowBlock] = 1.0f;
    }
}

}  // namespace

// NVFP4 scale code for |E4M3| byte `v` (v < 0x7f, nonzero value): bf16(s * 2^118) = code<<4 + base.
uint8_t nvfp4_scale_code(uint8_t v) {
    const float s = std::ldexp(e4m3_to_f32(v), kNvfp4ScaleExp);
    const uint32_t bits = f32_to_bits(s) >> 16;
    DSV4_ASSERT((f32_to_bits(s) & 0xffffu) == 0 && bits >= kNvfp4CodeBase &&
                    ((bits - kNvfp4CodeBase) & 0xfu) == 0 && (bits - kNvfp4CodeBase) >> 4 < 256,
                "NVFP4 scale byte ", int(v), " has no code");
    return static_cast<uint8_t>((bits - kNvfp4CodeBase) >> 4);
}

int64_t GemvShape::scales_expert_bytes() const {
    switch (format) {
        case GemvFormat::kNvfp4:
        case GemvFormat::kMxfp4:
        case GemvFormat::kFp8:
            return row_blocks() * k_tiles() * gemv_tile_scale_bytes(format);
        case GemvFormat::kBf16:
            return 0;
    }
    return 0;
}

int64_t GemvShape::device_bytes() const {
    auto up = [](int64_t b) { return (b + 255) / 256 * 256; };
    return up(tiles_expert_bytes() * n_experts) + up(scales_expert_bytes() * n_experts) +
           up(row_blocks() * n_experts * 4);
}

Expected<GemvFormat> gemv_format_of(const QuantWeight& w) {
    switch (w.format) {
        case WeightFormat::kNvfp4:
            return GemvFormat::kNvfp4;
        case WeightFormat::kMxfp4:
            return GemvFormat::kMxfp4;
        case WeightFormat::kFp8Block:
            return GemvFormat::kFp8;
        case WeightFormat::kDense:
            if (w.dtype == DType::kBF16) return GemvFormat::kBf16;
            return error("GEMV weights must be NVFP4, MXFP4, FP8 or BF16; got dense ",
                         dtype_name(w.dtype));
    }
    return error("unknown weight format");
}

Expected<GemvShape> gemv_repack_shape(const QuantWeight* const* parts, int n_experts,
                                      int parts_per_expert) {
    GemvShape shape;
    DSV4_RETURN_IF_ERROR(check_parts(parts, n_experts, parts_per_expert, &shape));
    return shape;
}

Expected<GemvPacked> gemv_repack(const QuantWeight* const* parts, int n_experts,
                                 int parts_per_expert) {
    GemvPacked out;
    DSV4_RETURN_IF_ERROR(check_parts(parts, n_experts, parts_per_expert, &out.shape));
    const GemvShape& s = out.shape;
    out.tiles.assign(static_cast<size_t>(s.tiles_expert_bytes() * n_experts), 0);
    out.scales.assign(static_cast<size_t>(s.scales_expert_bytes() * n_experts), 0);
    out.out_scale.assign(static_cast<size_t>(s.row_blocks() * n_experts), 1.0f);
    for (int e = 0; e < n_experts; ++e) {
        int64_t row_offset = 0;
        for (int p = 0; p < parts_per_expert; ++p) {
            const QuantWeight& w = *parts[e * parts_per_expert + p];
            switch (s.format) {
                case GemvFormat::kNvfp4:
                case GemvFormat::kMxfp4: {
                    Status st = pack_fp4(w, row_offset, e, &out);
                    if (!st) return st.with_context(str_cat("expert ", e, " part ", p));
                    break;
                }
                case GemvFormat::kFp8:
                    pack_fp8(w, row_offset, e, &out);
                    break;
                case GemvFormat::kBf16:
                    pack_bf16(w, row_offset, e, &out);
                    break;
            }
            row_offset += w.rows;
        }
    }
    return out;
}

void gemv_unpack_row(const GemvPacked& p, int expert, int64_t row, float* out) {
    const GemvShape& s = p.shape;
    const int64_t T = s.k_tiles();
    const int64_t lrb = row / kGemvRowBlock;
    const int64_t rb = expert * s.row_blocks() + lrb;
    const int rr = static_cast<int>(row % kGemvRowBlock);
    const int g = rr % 8, hr = rr / 8;
    const float os = p.out_scale[rb];
    for (int64_t k = 0; k < s.k; ++k) {
        const int tile_k = gemv_tile_k(s.format);
        const int64_t t = k / tile_k;
        const int kk = static_cast<int>(k % tile_k);
        const int lane_k = gemv_lane_k(s.format);
        const int lane = 4 * g + kk / lane_k;
        const int kw = kk % lane_k;
        const int64_t tile = expert * s.row_blocks() * T + gemv_tile_index(lrb, t, T);
        const uint8_t* lane_bytes = p.tiles.data() + tile * kGemvTileBytes + lane * kGemvLaneBytes;
        uint32_t words[4];
        std::memcpy(words, lane_bytes, 16);
        float v = 0.0f;
        switch (s.format) {
            case GemvFormat::kNvfp4:
            case GemvFormat::kMxfp4: {
                const uint8_t* sc = p.scales.data() + tile * gemv_tile_scale_bytes(s.format) +
                                    gemv_lane_scale_offset(s.format, lane);
                const uint32_t code = sc[hr];
                const uint32_t sbits =
                    s.format == GemvFormat::kNvfp4 ? nvfp4_code_bits(code) : mxfp4_code_bits(code);
                uint32_t o[4];
                e2m1x8_to_bf16x2(words[kw / 4], o);
                const int pos = kw % 4;
                const uint32_t pair = o[(pos >> 1) * 2 + hr];
                const uint32_t half = (pos & 1) ? pair >> 16 : pair & 0xffffu;
                // The kernel's packed bf16 multiply; exact, so float arithmetic models it.
                v = bf16_bits_value(half) * bf16_bits_value(sbits) * os;
                break;
            }
            case GemvFormat::kFp8: {
                const int j = kw / 4;
                const uint32_t word = words[2 * j + hr];
                const uint8_t byte = static_cast<uint8_t>(word >> (8 * (kw % 4)));
                const float* sc = reinterpret_cast<const float*>(p.scales.data());
                v = e4m3_to_f32(byte) * sc[tile] * os;
                break;
            }
            case GemvFormat::kBf16: {
                const uint32_t word = words[(kw >> 1) * 2 + hr];
                v = bf16_bits_value((kw & 1) ? word >> 16 : word & 0xffffu) * os;
                break;
            }
        }
        out[k] = v;
    }
}

}  // namespace dsv4::cuda
