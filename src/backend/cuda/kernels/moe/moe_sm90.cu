// MoE element-wise kernels (moe.h). Float steps use round-to-nearest intrinsics in the CPU
// reference's order so nvcc does not contract them into FMAs (the CPU build does not).
#include "backend/cuda/common/check.cuh"
#include "backend/cuda/kernels/moe/moe.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 16 ? 65535 * 16 : b));
}

__global__ void expand_rows_kernel(const float* x, float* out, int64_t n, int k, int64_t D) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t g = i / D, d = i % D;
        out[i] = x[(g / k) * D + d];
    }
}

// The same expression as the swiglu op (basic_sm90.cu) and cpu_ref::swiglu.
__global__ void moe_swiglu_kernel(MoeSwigluArgs a) {
    const int64_t n = a.G * a.I;
    const float L = a.limit;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t g = i / a.I, c = i % a.I;
        float gt = a.h[g * 2 * a.I + c], u = a.h[g * 2 * a.I + a.I + c];
        if (L > 0) {
            gt = fminf(gt, L);
            u = fminf(fmaxf(u, -L), L);
        }
        const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gt)));
        float v = __fmul_rn(__fmul_rn(gt, sig), u);
        if (a.weight != nullptr) v = __fmul_rn(v, a.weight[g]);
        a.a[i] = v;
    }
}

__global__ void moe_combine_kernel(MoeCombineArgs a) {
    const int64_t n = a.T * a.D;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t t = i / a.D, d = i % a.D;
        float s = 0.0f;
        for (int j = 0; j < a.k; ++j) {
            const float y = a.y[(t * a.k + j) * a.D + d];
            s = __fadd_rn(s, a.weight != nullptr ? __fmul_rn(y, a.weight[t * a.k + j]) : y);
        }
        if (a.shared != nullptr) s = __fadd_rn(s, a.shared[i]);
        a.out[i] = s;
    }
}

}  // namespace

void launch_expand_rows(const float* x, float* out, int64_t T, int k, int64_t D,
                        cudaStream_t stream) {
    const int64_t n = T * k * D;
    if (n == 0) return;
    expand_rows_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, out, n, k, D);
    DSV4_CHECK_LAUNCH(stream);
}

void launch_moe_swiglu(const MoeSwigluArgs& a, cudaStream_t stream) {
    if (a.G * a.I == 0) return;
    moe_swiglu_kernel<<<blocks_for(a.G * a.I), kThreads, 0, stream>>>(a);
    DSV4_CHECK_LAUNCH(stream);
}

void launch_moe_combine(const MoeCombineArgs& a, cudaStream_t stream) {
    if (a.T * a.D == 0) return;
    moe_combine_kernel<<<blocks_for(a.T * a.D), kThreads, 0, stream>>>(a);
    DSV4_CHECK_LAUNCH(stream);
}

}  // namespace dsv4::cuda
