// The clipped SwiGLU of one (gate, up) pair as cpu_ref::swiglu computes it, with explicit
// round-to-nearest intrinsics (no FMA contraction): silu(min(g, L)) * clamp(u, -L, L), no clip
// when L = 0. One copy for the swiglu op, the MoE's SwiGLU kernel and the GEMV chain that
// computes it while loading w2's activations (gemv_chain_sm90.cu), so all three agree
// bit for bit.
#pragma once

#include <cuda_runtime.h>

namespace dsv4::cuda::dev {

__device__ __forceinline__ float clipped_swiglu(float g, float u, float L) {
    if (L > 0) {
        g = fminf(g, L);
        u = fminf(fmaxf(u, -L), L);
    }
    const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g)));
    return __fmul_rn(__fmul_rn(g, sig), u);
}

}  // namespace dsv4::cuda::dev
