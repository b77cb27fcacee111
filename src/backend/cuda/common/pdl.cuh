// Programmatic dependent launch (PDL) for the op kernels. A decode step is ~30 dependent kernels
// a layer, most of them a few microseconds long, and each launch waits for the previous grid to
// drain before its blocks are scheduled: ~1-2 us of idle GPU a launch. A kernel launched by
// launch_pdl, which starts with dev::pdl_enter(), lets the next kernel's blocks be scheduled as
// soon as its own blocks are all running; those blocks then wait in their own pdl_enter for this
// grid to complete, so the launch latency hides behind the run and nothing is read (or
// overwritten) early. Kernels may read before their wait what no earlier grid of the step
// writes: weights, the step descriptor (uploaded before the step's first kernel) and, since
// the kernel just before them has passed its own wait, anything written two grids back or
// earlier (the compressor's state of earlier tokens). The weight GEMV streams weights there
// (gemv_kernel_sm90.cuh); hc_pre copies its mixing weights; the norm kernel loads its weights
// and rope table, attention its sinks and rope tables, the compressor's decode pooling
// everything but the token's own row, and a hash-routed layer's routing its tid2eid row (each a
// global round trip less after the wait).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/ptx_sm90.cuh"

namespace dsv4::cuda {

namespace dev {

// First statement of a kernel launched by launch_pdl (every thread): wait until the grids before
// it have completed and their writes are visible, then allow the next grid to launch. The
// trigger comes after the wait so that a dependent's pre-wait prefetch (the GEMV's) can rely on
// everything before this grid being complete. A no-op pair under a plain launch.
__device__ __forceinline__ void pdl_enter() {
    ptx::griddep_wait();
    ptx::griddep_launch_dependents();
}

}  // namespace dev

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-serialisation attribute
// when `pdl` (and a cluster shape when cluster_x > 1). Safe inside a stream capture (the
// attribute becomes a programmatic edge of the graph).
template <typename... Params, typename... Args>
void launch_kernel(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, unsigned cluster_x, Args&&... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attrs[2];
    unsigned n = 0;
    if (pdl) {
        attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attrs[n].val.programmaticStreamSerializationAllowed = 1;
        ++n;
    }
    if (cluster_x > 1) {
        attrs[n].id = cudaLaunchAttributeClusterDimension;
        attrs[n].val.clusterDim.x = cluster_x;
        attrs[n].val.clusterDim.y = 1;
        attrs[n].val.clusterDim.z = 1;
        ++n;
    }
    cfg.attrs = attrs;
    cfg.numAttrs = n;
    DSV4_CHECK_CUDA(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
    DSV4_CHECK_LAUNCH(stream);
}

// launch_kernel with the programmatic-serialisation attribute: for the kernels that start with
// dev::pdl_enter().
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                unsigned cluster_x, Args&&... args) {
    launch_kernel(true, kernel, grid, block, smem, stream, cluster_x, std::forward<Args>(args)...);
}

}  // namespace dsv4::cuda
