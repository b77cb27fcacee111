// RAII owners for streams, events and captured graphs. The decode step is captured once into a
// CudaGraph and replayed; kernels only ever see a raw cudaStream_t.
#pragma once

#include <cuda_runtime.h>

namespace dsv4::cuda {

class CudaStream {
  public:
    // A non-blocking stream (it does not serialise with the legacy default stream).
    static CudaStream create();
    CudaStream() = default;
    CudaStream(CudaStream&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
    CudaStream& operator=(CudaStream&& o) noexcept;
    CudaStream(const CudaStream&) = delete;
    CudaStream& operator=(const CudaStream&) = delete;
    ~CudaStream();
    cudaStream_t get() const { return s_; }
    void synchronize() const;

  private:
    cudaStream_t s_ = nullptr;
};

class CudaEvent {
  public:
    static CudaEvent create();
    CudaEvent() = default;
    CudaEvent(CudaEvent&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
    CudaEvent& operator=(CudaEvent&& o) noexcept;
    CudaEvent(const CudaEvent&) = delete;
    CudaEvent& operator=(const CudaEvent&) = delete;
    ~CudaEvent();
    cudaEvent_t get() const { return e_; }
    void record(cudaStream_t stream) const;
    // Milliseconds between two recorded events (synchronises on `end`).
    static float elapsed_ms(const CudaEvent& start, const CudaEvent& end);

  private:
    cudaEvent_t e_ = nullptr;
};

// A graph captured from a stream. Capture in global mode: any synchronising call (a host sync, a
// blocking copy, cudaMalloc) anywhere in the process fails the capture, so a clean capture is the
// proof that the captured work has no host synchronisation. `thread_local_mode`: only this
// thread's calls count (ranks as threads of one process: the other ranks' threads and NCCL's
// make legal calls of their own meanwhile).
class CudaGraph {
  public:
    static void begin_capture(cudaStream_t stream, bool thread_local_mode = false);
    // Ends the capture and instantiates it; returns the error instead of aborting so tests can
    // report which call broke the capture.
    static cudaError_t end_capture(cudaStream_t stream, CudaGraph* out);

    CudaGraph() = default;
    CudaGraph(CudaGraph&& o) noexcept : graph_(o.graph_), exec_(o.exec_) {
        o.graph_ = nullptr;
        o.exec_ = nullptr;
    }
    CudaGraph& operator=(CudaGraph&& o) noexcept;
    CudaGraph(const CudaGraph&) = delete;
    CudaGraph& operator=(const CudaGraph&) = delete;
    ~CudaGraph();
    void launch(cudaStream_t stream) const;
    bool valid() const { return exec_ != nullptr; }

  private:
    void reset();
    cudaGraph_t graph_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
};

}  // namespace dsv4::cuda
