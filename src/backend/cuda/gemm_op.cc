#include "backend/cuda/gemm_op.h"

#include <algorithm>
#include <utility>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/kernels/gemm/gemm_dequant.h"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

// cuBLAS failures after a successful start are internal errors (shapes are checked by the
// caller): abort with file:line like the runtime's.
#define DSV4_CHECK_CUBLAS(expr)                                     \
    do {                                                            \
        const cublasStatus_t dsv4_st_ = (expr);                     \
        DSV4_ASSERT(dsv4_st_ == CUBLAS_STATUS_SUCCESS, #expr, ": ", \
                    cublasGetStatusString(dsv4_st_));               \
    } while (0)

GemmDequantArgs dequant_args(const GemvWeight& w) {
    GemmDequantArgs d;
    d.format = w.shape.format;
    d.w_tiles = w.tiles;
    d.w_scales = w.scales;
    d.out_scale = w.out_scale;
    d.k = w.shape.k;
    d.k_tiles = w.shape.k_tiles();
    return d;
}

}  // namespace

Expected<GemmLinear> GemmLinear::create(const GemmScratch& scratch, cudaStream_t stream) {
    GemmLinear g;
    cublasStatus_t st = cublasCreate(&g.handle_);
    if (st != CUBLAS_STATUS_SUCCESS) {
        g.handle_ = nullptr;
        return error("cuBLAS did not start: ", cublasGetStatusString(st));
    }
    g.s_ = scratch;
    DSV4_CHECK_CUBLAS(cublasSetStream(g.handle_, stream));
    DSV4_CHECK_CUBLAS(cublasSetPointerMode(g.handle_, CUBLAS_POINTER_MODE_DEVICE));
    DSV4_CHECK_CUBLAS(cublasSetWorkspace(g.handle_, scratch.cublas_ws, scratch.cublas_ws_bytes));
    const float betas[2] = {0.0f, 1.0f};
    DSV4_CHECK_CUDA(
        cudaMemcpyAsync(scratch.scalars, betas, sizeof betas, cudaMemcpyHostToDevice, stream));
    DSV4_CHECK_CUDA(cudaStreamSynchronize(stream));  // `betas` is a stack array
    return g;
}

GemmLinear::GemmLinear(GemmLinear&& o) noexcept
    : handle_(std::exchange(o.handle_, nullptr)), s_(o.s_) {}

GemmLinear& GemmLinear::operator=(GemmLinear&& o) noexcept {
    if (this != &o) {
        if (handle_ != nullptr) cublasDestroy(handle_);
        handle_ = std::exchange(o.handle_, nullptr);
        s_ = o.s_;
    }
    return *this;
}

GemmLinear::~GemmLinear() {
    if (handle_ != nullptr) cublasDestroy(handle_);  // teardown: errors have nowhere to go
}

namespace {

// How much of a product the scratch takes at once: rows of the weight decoded (one group: row
// ranges on 16-row blocks), or whole groups; rows of x split. Zero where not even one fits.
struct GemmChunks {
    int64_t w_rows = 0, groups = 0, m = 0;
};
GemmChunks chunks_for(const GemmScratch& s, int64_t K, int64_t N, int G) {
    GemmChunks c;
    if (G > 1)
        c.groups = s.w_elems / (N * K);
    else
        c.w_rows = s.w_elems / K / kGemvRowBlock * kGemvRowBlock;
    c.m = s.x_elems / (K * G);
    return c;
}

}  // namespace

bool GemmLinear::fits(const GemvShape& w, int64_t N, int groups) const {
    const GemmChunks c = chunks_for(s_, w.k, N, groups);
    return (groups > 1 ? c.groups : c.w_rows) > 0 && c.m > 0;
}

void GemmLinear::run(const GemmCall& c, cudaStream_t stream) const {
    DSV4_ASSERT(ready() && c.w != nullptr && c.groups >= 1 && fits(c.w->shape, c.N, c.groups),
                "gemm: not started, or a product the scratch does not take");
    const int64_t K = c.w->shape.k, N = c.N, G = c.groups, Kx = K * G;
    const int64_t group_elems = N * K;
    const GemmChunks at_once = chunks_for(s_, K, N, c.groups);
    const int64_t w_rows = at_once.w_rows, groups_at_once = at_once.groups, m_at_once = at_once.m;
    DSV4_ASSERT(c.row0 % kGemvRowBlock == 0 && (G == 1 || N % kGemvRowBlock == 0), "gemm: rows ",
                c.row0, " + ", G, " x ", N, " off the 16-row blocks");
    const float* zero = s_.scalars;
    const float* one = s_.scalars + 1;
    float* alpha = s_.scalars + 2;
    for (int64_t m0 = 0; m0 < c.M; m0 += m_at_once) {
        const int64_t mc = std::min(m_at_once, c.M - m0);
        launch_split_bf16(c.x + m0 * c.ldx, c.ldx, mc, Kx, s_.x_hi, s_.x_lo, stream);
        float* y = c.y + m0 * c.ldy;
        // Chunks: (first row of the weight, rows, first group, groups).
        const int64_t chunks =
            G > 1 ? (G + groups_at_once - 1) / groups_at_once : (N + w_rows - 1) / w_rows;
        for (int64_t ci = 0; ci < chunks; ++ci) {
            GemmDequantArgs d = dequant_args(*c.w);
            int64_t g0 = 0, gc = 1, n0 = 0, nr = N;
            if (G > 1) {
                g0 = ci * groups_at_once;
                gc = std::min(groups_at_once, G - g0);
                d.row0 = c.row0 + g0 * N;
                d.rows = gc * N;
            } else {
                n0 = ci * w_rows;
                nr = std::min(w_rows, N - n0);
                d.row0 = c.row0 + n0;
                d.rows = nr;
            }
            d.out = s_.w;
            d.alpha = alpha;
            launch_gemm_dequant(d, stream);
            // Column-major view: y^T [N x M] (ld ldy) = W [K x N]^T * x^T [K x M] (ld Kx).
            for (int half = 0; half < 2; ++half) {
                const uint16_t* xb = (half == 0 ? s_.x_hi : s_.x_lo) + g0 * K;
                DSV4_CHECK_CUBLAS(cublasGemmStridedBatchedEx(
                    handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(nr), static_cast<int>(mc),
                    static_cast<int>(K), alpha, s_.w, CUDA_R_16BF, static_cast<int>(K), group_elems,
                    xb, CUDA_R_16BF, static_cast<int>(Kx), K, half == 0 ? zero : one,
                    y + g0 * N + n0, CUDA_R_32F, static_cast<int>(c.ldy), N, static_cast<int>(gc),
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            }
        }
    }
}

bool gemm_exact(const GemvWeight& w, int* flag, cudaStream_t stream) {
    GemmDequantArgs d = dequant_args(w);
    d.rows = w.shape.n;
    d.inexact = flag;
    DSV4_CHECK_CUDA(cudaMemsetAsync(flag, 0, sizeof(int), stream));
    launch_gemm_dequant(d, stream);
    int bad = 0;
    DSV4_CHECK_CUDA(cudaMemcpyAsync(&bad, flag, sizeof bad, cudaMemcpyDeviceToHost, stream));
    DSV4_CHECK_CUDA(cudaStreamSynchronize(stream));
    return bad == 0;
}

}  // namespace dsv4::cuda
