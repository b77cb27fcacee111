// mHC pre benchmark (docs/perf.md, session 15): where a decode step's hc_pre launch spends its
// time. V4-Flash's shape (n = 4 streams, D = 4096, 20 Sinkhorn iterations, one token unless
// said), each variant a CUDA-graph replay of R back-to-back launches divided by R, the mixing
// weights rotating through copies larger than the L2 (as the layers' weights do). The variants
// drop one part at a time: the fused hc_post in front, the fused RMSNorm, the Sinkhorn
// iterations (1 instead of 20); the decode launches by one cluster a token (the default) and by
// the split kernel. The values are constants: the time does not depend on them.
#include <cuda_runtime.h>

#include <cstdio>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/device.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/kernels/basic/basic.h"
#include "backend/cuda/kernels/hyper_conn/hyper_conn.h"
#include "graph_timing.h"

namespace dsv4::cuda {
namespace {

constexpr int kN = 4, kD = 4096, kIters = 20, kCopies = 64, kLaunches = 64;

float* dalloc(int64_t n, float value, cudaStream_t s) {
    float* p = nullptr;
    DSV4_CHECK_CUDA(cudaMalloc(&p, static_cast<size_t>(n) * sizeof(float)));
    launch_fill(p, value, n, s);
    return p;
}

int run() {
    const Expected<DeviceInfo> dev = query_device(0);
    if (!dev) {
        std::fprintf(stderr, "hc_bench: %s\n", dev.status().message().c_str());
        return 1;
    }
    const DeviceInfo info = dev.value();
    CudaStream stream = CudaStream::create();
    cudaStream_t s = stream.get();
    const int rows = (2 + kN) * kN, T_max = 32;
    const int64_t width = int64_t{kN} * kD;
    float* fn = dalloc(kCopies * rows * width, 1e-3f, s);  // the copies, one after another
    float* base = dalloc(rows, 0.1f, s);
    float* scale = dalloc(3, 0.5f, s);
    float* x = dalloc(T_max * width, 0.01f, s);
    float* x_prev = dalloc(T_max * width, 0.02f, s);
    float* f = dalloc(T_max * kD, 0.03f, s);
    float* y = dalloc(T_max * kD, 0.f, s);
    float* y_norm = dalloc(T_max * kD, 0.f, s);
    float* norm_w = dalloc(kD, 1.f, s);
    float* post = dalloc(T_max * kN, 1.f, s);
    float* comb = dalloc(T_max * kN * kN, 0.25f, s);
    HcScratch ws;
    ws.sm_count = info.sm_count;
    ws.max_tokens = T_max;
    ws.doubles = hc_scratch_doubles(T_max, kN, info.sm_count);
    DSV4_CHECK_CUDA(cudaMalloc(&ws.part, static_cast<size_t>(ws.doubles) * sizeof(double)));
    DSV4_CHECK_CUDA(cudaMalloc(&ws.arrivals, T_max * sizeof(unsigned)));
    DSV4_CHECK_CUDA(cudaMemsetAsync(ws.arrivals, 0, T_max * sizeof(unsigned), s));
    stream.synchronize();

    struct Variant {
        const char* name;
        bool post, norm;
        int iters, T;
        bool head;
        bool clusters = true;  // launch_hc_pre's: decode launches by one cluster a token
    };
    const Variant variants[] = {
        {"full (post + norm, 20 iters)", true, true, kIters, 1, false},
        {"full, split kernel", true, true, kIters, 1, false, false},
        {"1 Sinkhorn iteration", true, true, 1, 1, false},
        {"no fused norm", true, false, kIters, 1, false},
        {"no fused post", false, true, kIters, 1, false},
        {"none of them (1 iteration)", false, false, 1, 1, false},
        {"hc_head (4 rows, no Sinkhorn)", false, false, 0, 1, true},
        {"full, 8 tokens", true, true, kIters, 8, false},
        {"full, 8 tokens, split kernel", true, true, kIters, 8, false, false},
        {"full, 16 tokens", true, true, kIters, 16, false},
        {"full, 16 tokens, split kernel", true, true, kIters, 16, false, false},
        {"full, 32 tokens", true, true, kIters, 32, false},
        {"full, 32 tokens, split kernel", true, true, kIters, 32, false, false},
    };
    std::printf("hc_pre, n = %d, D = %d, %d launches a graph, %d SMs\n", kN, kD, kLaunches,
                info.sm_count);
    for (const Variant& v : variants) {
        ops::HcPostArgs pa{f, x_prev, post, comb, x, v.T, kN, kD};
        const float us = graph_us_per_launch(s, kLaunches, [&](int r) {
            const float* w = fn + (r % kCopies) * rows * width;
            if (v.head) {
                launch_hc_head({x, w, base, scale, y, v.T, kN, kD}, ws, s);
                return;
            }
            ops::HcPreArgs a{x, w, base, scale, y, post, comb, v.T, kN, kD, v.iters};
            if (v.norm) {
                a.norm_weight = norm_w;
                a.y_norm = y_norm;
            }
            if (v.post) a.post_in = &pa;
            launch_hc_pre(a, ws, s, v.clusters);
        });
        std::printf("  %-34s %7.2f us a launch\n", v.name, us);
    }
    for (void* p : {static_cast<void*>(fn), static_cast<void*>(base), static_cast<void*>(scale),
                    static_cast<void*>(x), static_cast<void*>(x_prev), static_cast<void*>(f),
                    static_cast<void*>(y), static_cast<void*>(y_norm), static_cast<void*>(norm_w),
                    static_cast<void*>(post), static_cast<void*>(comb), static_cast<void*>(ws.part),
                    static_cast<void*>(ws.arrivals)})
        cudaFree(p);
    return 0;
}

}  // namespace
}  // namespace dsv4::cuda

int main() {
    return dsv4::cuda::run();
}
