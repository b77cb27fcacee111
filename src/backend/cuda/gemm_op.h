// The tensor-core linear for long steps (prefill): y = x * W^T with W a GEMV-layout weight,
// decoded a row range at a time into a bf16 scratch (kernels/gemm/gemm_dequant.h) and multiplied
// by cuBLAS (bf16 operands, f32 accumulation and output), x split into bf16 hi + lo (two
// products, the second added by beta = 1) as the GEMV does. Why cuBLAS on a decoded copy and not
// a W4A16 kernel of our own: docs/perf.md "Prefill on tensor cores" (measured against the GEMV).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/gemv_op.h"
#include "base/status.h"

namespace dsv4::cuda {

// Device scratch of the tensor-core linear, owned by the backend.
struct GemmScratch {
    uint16_t* w = nullptr;  // [w_elems] a decoded row range, bf16
    int64_t w_elems = 0;
    uint16_t* x_hi = nullptr;  // [x_elems] bf16 hi of a row range of x
    uint16_t* x_lo = nullptr;  // [x_elems] bf16 lo
    int64_t x_elems = 0;
    float* scalars = nullptr;  // [4]: 0, 1 (betas), alpha (written by the decode)
    void* cublas_ws = nullptr;
    size_t cublas_ws_bytes = 0;
};

// One product: rows [row0 + j*N, row0 + (j+1)*N) of `w` for group j < groups, reading x columns
// [j*K, (j+1)*K) and writing y columns [j*N, (j+1)*N) (groups > 1: wo_a; K = the weight's
// columns).
struct GemmCall {
    const GemvWeight* w = nullptr;
    const float* x = nullptr;  // [M][ldx] f32
    int64_t ldx = 0;
    float* y = nullptr;  // [M][ldy] f32
    int64_t ldy = 0;
    int64_t M = 0, N = 0, row0 = 0;
    int groups = 1;
};

class GemmLinear {
  public:
    // A cuBLAS handle on `stream` in device pointer mode with the scratch's workspace (so
    // cuBLAS allocates nothing of its own). An error when cuBLAS cannot start.
    static Expected<GemmLinear> create(const GemmScratch& scratch, cudaStream_t stream);
    GemmLinear() = default;
    GemmLinear(GemmLinear&& o) noexcept;
    GemmLinear& operator=(GemmLinear&& o) noexcept;
    GemmLinear(const GemmLinear&) = delete;
    GemmLinear& operator=(const GemmLinear&) = delete;
    ~GemmLinear();

    bool ready() const { return handle_ != nullptr; }
    // Whether the scratch takes a product of N rows a group (groups of them) of a weight of
    // `w`'s columns: a group's rows (or 16 rows of one group) and one row of x.
    bool fits(const GemvShape& w, int64_t N, int groups) const;
    // The product; it must fit.
    void run(const GemmCall& c, cudaStream_t stream) const;

  private:
    cublasHandle_t handle_ = nullptr;
    GemmScratch s_;
};

// Whether the tensor-core linear reproduces `w` (every decoded w / alpha a bf16 value; see
// gemm_dequant.h): one pass over the weight and a wait. `flag`: one device int of scratch.
bool gemm_exact(const GemvWeight& w, int* flag, cudaStream_t stream);

}  // namespace dsv4::cuda
