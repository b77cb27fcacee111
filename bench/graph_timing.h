// Timing helpers of the CUDA benchmarks (gemv_bench, hc_bench): the median of event-timed runs,
// and the time per launch of a CUDA graph of back-to-back launches (the launch gaps those of a
// captured decode step).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/stream.h"

namespace dsv4::cuda {

inline constexpr int kReplays = 15;  // timed replays of a graph; the median is reported

// Median milliseconds of `reps` runs of enqueue() on s between two events, after `warmup`
// untimed runs.
template <typename F>
float median_event_ms(cudaStream_t s, int warmup, int reps, F&& enqueue) {
    for (int i = 0; i < warmup; ++i) enqueue();
    CudaEvent a = CudaEvent::create(), b = CudaEvent::create();
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
        a.record(s);
        enqueue();
        b.record(s);
        ms.push_back(CudaEvent::elapsed_ms(a, b));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// Microseconds per launch of a graph of enqueue(0), ..., enqueue(launches - 1), captured on s:
// the median of kReplays replays (after 3 untimed) over `launches`.
template <typename F>
float graph_us_per_launch(cudaStream_t s, int launches, F&& enqueue) {
    CudaGraph::begin_capture(s);
    for (int r = 0; r < launches; ++r) enqueue(r);
    CudaGraph g;
    DSV4_CHECK_CUDA(CudaGraph::end_capture(s, &g));
    return median_event_ms(s, 3, kReplays, [&] { g.launch(s); }) * 1000.0f /
           static_cast<float>(launches);
}

}  // namespace dsv4::cuda
