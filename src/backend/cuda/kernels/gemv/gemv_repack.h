// Host-side repack of checkpoint weights (QuantWeight) into the GEMV tile layout of
// gemv_layout.h, done once at load. Exact: every weight the kernel reconstructs equals
// dequant_row() of the source, times the row block's out_scale.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cuda/kernels/gemv/gemv_layout.h"
#include "base/status.h"
#include "formats/quant_weight.h"

namespace dsv4::cuda {

// Shape of a repacked stack: n_experts matrices of [n, k].
struct GemvShape {
    GemvFormat format = GemvFormat::kNvfp4;
    int64_t n = 0, k = 0;
    int n_experts = 1;

    // Row blocks, padded to whole quads (n to a multiple of 64).
    int64_t row_blocks() const {
        const int64_t rows = kGemvRowBlock * kGemvQuad;
        return (n + rows - 1) / rows * kGemvQuad;
    }
    int64_t k_tiles() const { return (k + gemv_tile_k(format) - 1) / gemv_tile_k(format); }
    int64_t tiles_expert_bytes() const { return row_blocks() * k_tiles() * kGemvTileBytes; }
    int64_t scales_expert_bytes() const;
    // Device bytes of tiles + scales + out_scale (what an arena must hold for this weight).
    int64_t device_bytes() const;
};

struct GemvPacked {
    GemvShape shape;
    std::vector<uint8_t> tiles;    // [n_experts][row_blocks * k_tiles][512], gemv_tile_index order
    std::vector<uint8_t> scales;   // gemv_layout.h, per format
    std::vector<float> out_scale;  // [n_experts][row_blocks]
};

// The GEMV format a checkpoint weight maps to; an error for formats the kernels do not read
// (dense F32/F16: convert them at load).
Expected<GemvFormat> gemv_format_of(const QuantWeight& w);

// Repacks `n_experts` matrices stacked on a leading axis; expert e is the concatenation along
// rows of parts[e * parts_per_expert + 0 .. parts_per_expert) (e.g. w1 then w3). All parts share
// the format and k; part p has the same rows in every expert; every part but the last has rows
// divisible by 16 (a row block never spans two parts). Errors name the part.
Expected<GemvPacked> gemv_repack(const QuantWeight* const* parts, int n_experts,
                                 int parts_per_expert);

// Shape gemv_repack would produce, from the shapes alone (for sizing an arena before repacking).
Expected<GemvShape> gemv_repack_shape(const QuantWeight* const* parts, int n_experts,
                                      int parts_per_expert);

// NVFP4 scale code for the |E4M3| byte `v` (v < 0x7f, a nonzero value): the code whose bf16 bits
// (code << 4) + kNvfp4CodeBase hold v * 2^kNvfp4ScaleExp (gemv_layout.h). Aborts otherwise.
uint8_t nvfp4_scale_code(uint8_t v);

// The FP4 formats' code shift and row-block output scale (gemv_layout.h): MXFP4 shifts every
// E8M0 exponent by 254 - (the largest), so the largest decodes to the bf16 exponent 254; the
// sums are then multiplied by 2^(126 - shift) (times NVFP4's global scale, whose shift is
// kNvfp4ScaleExp).
inline int mxfp4_code_shift(int e_max) {
    return 254 - e_max;
}
inline float fp4_out_scale(int shift, float global) {
    return global * std::ldexp(1.0f, 126 - shift);
}

// Host model of the kernel's decode: the float weights the kernel multiplies for (expert, row),
// out_scale included. Used by tests to check the layout without a GPU.
void gemv_unpack_row(const GemvPacked& p, int expert, int64_t row, float* out);

}  // namespace dsv4::cuda
