// Operands of the tensor-core prefill linear (gemm_op.h): a row range of a GEMV-layout weight
// decoded into a plain bf16 matrix for cuBLAS, and f32 activations split into bf16 hi + lo
// (the GEMV's split, so both paths carry ~16 mantissa bits of x).
//
// The GEMV applies its per-row-block out_scale (and FP8's per-tile block scale) to f32 sums;
// cuBLAS takes one scalar. So the decode writes w / alpha, alpha being the scale of the weight's
// first tile, and the product is scaled by alpha (read by cuBLAS from device memory). That is
// exact only when every w / alpha is a bf16 value: true for NVFP4 and MXFP4 (one scale per
// tensor beyond the block codes) and FP8 with power-of-two block scales, false for FP8 with
// arbitrary f32 block scales. A check pass (out == nullptr) tells which: the backend runs it once
// per weight at load and keeps the GEMV for the weights that fail.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/gemv/gemv_layout.h"

namespace dsv4::cuda {

struct GemmDequantArgs {
    GemvFormat format = GemvFormat::kNvfp4;
    const void* w_tiles = nullptr;     // [row_blocks * k_tiles][32][16 B] (gemv_tile_index)
    const void* w_scales = nullptr;    // [row_blocks * k_tiles][tile scale bytes]; BF16: nullptr
    const float* out_scale = nullptr;  // [row_blocks]
    int64_t k = 0;                     // columns
    int64_t k_tiles = 0;
    int64_t row0 = 0;         // first row decoded (a multiple of 16)
    int64_t rows = 0;         // rows decoded (row0 + rows <= the weight's rows)
    uint16_t* out = nullptr;  // [rows][k] bf16 bits of w / alpha; nullptr: check only
    float* alpha = nullptr;   // [1] device, written (may be nullptr)
    int* inexact = nullptr;   // [1] device, set to 1 when some w / alpha is not a bf16 value
};

void launch_gemm_dequant(const GemmDequantArgs& a, cudaStream_t stream);

// hi[m][c] = bf16(x[m][c]), lo[m][c] = bf16(x[m][c] - hi[m][c]) for c < cols.
//   x: [rows][ldx] f32; hi, lo: [rows][cols] bf16 bits.
void launch_split_bf16(const float* x, int64_t ldx, int64_t rows, int64_t cols, uint16_t* hi,
                       uint16_t* lo, cudaStream_t stream);

}  // namespace dsv4::cuda
