// The typed launcher of the sm_90 weight GEMV for one format: picks the kernel instantiation for
// the arguments and launches it. Included by the per-format instantiation files
// gemv_<format>_sm90.cu.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/gemv/gemv.h"
#include "backend/cuda/kernels/gemv/gemv_kernel_sm90.cuh"
#include "base/check.h"

namespace dsv4::cuda::gemv_sm90 {

using KernelFn = void (*)(GemvArgs);

struct Variant {
    KernelFn kernel;
    int index;  // into the per-format occupancy cache
};

// The instantiation for (args, depth = pipeline stages of one unit each). Depth 4 exists for
// tuning the NVFP4 path.
template <GemvFormat F>
Variant select_variant(const GemvArgs& a, int depth) {
    const bool two = a.m > 8;
    if constexpr (F == GemvFormat::kNvfp4) {
        if (depth == 4 && !a.x_f32 && !two && !a.y_bf16)
            return {gemv_kernel<F, false, 1, false, 4>, 8};
    }
    DSV4_ASSERT(depth == 2, "gemv: depth ", depth, " is not instantiated for this variant");
    if (a.x_f32 && a.x_split && a.m <= 8) {
        // Split columns (GemvArgs::x_split): 4 tokens an n-tile.
        const bool two_tiles = a.m > 4;
        switch ((two_tiles ? 2 : 0) + (a.y_bf16 ? 1 : 0)) {
            case 0:
                return {gemv_kernel<F, true, 1, false, 2, true>, 9};
            case 1:
                return {gemv_kernel<F, true, 1, true, 2, true>, 10};
            case 2:
                return {gemv_kernel<F, true, 2, false, 2, true>, 11};
            default:
                return {gemv_kernel<F, true, 2, true, 2, true>, 12};
        }
    }
    const int index = (a.x_f32 ? 4 : 0) + (two ? 2 : 0) + (a.y_bf16 ? 1 : 0);
    switch (index) {
        case 0:
            return {gemv_kernel<F, false, 1, false, 2>, index};
        case 1:
            return {gemv_kernel<F, false, 1, true, 2>, index};
        case 2:
            return {gemv_kernel<F, false, 2, false, 2>, index};
        case 3:
            return {gemv_kernel<F, false, 2, true, 2>, index};
        case 4:
            return {gemv_kernel<F, true, 1, false, 2>, index};
        case 5:
            return {gemv_kernel<F, true, 1, true, 2>, index};
        case 6:
            return {gemv_kernel<F, true, 2, false, 2>, index};
        default:
            return {gemv_kernel<F, true, 2, true, 2>, index};
    }
}

template <GemvFormat F>
int format_ctas_per_sm(const GemvArgs& a, int depth) {
    // Occupancy per instantiation, queried once (host-side only, capture-safe).
    static std::atomic<int> cache[13] = {};
    const Variant v = select_variant<F>(a, depth);
    int n = cache[v.index].load(std::memory_order_relaxed);
    if (n == 0) {
        DSV4_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, v.kernel, kThreads, 0));
        DSV4_ASSERT(n > 0, "gemv: kernel does not fit on an SM");
        cache[v.index].store(n, std::memory_order_relaxed);
    }
    return n;
}

template <GemvFormat F>
void format_launch(const GemvArgs& a, int depth, int ctas, cudaStream_t stream) {
    const Variant v = select_variant<F>(a, depth);
    launch_kernel(a.pdl, v.kernel, dim3(static_cast<unsigned>(ctas)), dim3(kThreads), 0, stream, 1,
                  a);
}

}  // namespace dsv4::cuda::gemv_sm90
