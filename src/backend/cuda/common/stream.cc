#include "backend/cuda/common/stream.h"

#include "backend/cuda/common/check.cuh"

namespace dsv4::cuda {

CudaStream CudaStream::create() {
    CudaStream s;
    DSV4_CHECK_CUDA(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking));
    return s;
}

CudaStream& CudaStream::operator=(CudaStream&& o) noexcept {
    if (this != &o) {
        if (s_ != nullptr) cudaStreamDestroy(s_);
        s_ = o.s_;
        o.s_ = nullptr;
    }
    return *this;
}

CudaStream::~CudaStream() {
    if (s_ != nullptr) DSV4_CHECK_CUDA(cudaStreamDestroy(s_));
}

void CudaStream::synchronize() const {
    DSV4_CHECK_CUDA(cudaStreamSynchronize(s_));
}

CudaEvent CudaEvent::create() {
    CudaEvent e;
    DSV4_CHECK_CUDA(cudaEventCreate(&e.e_));
    return e;
}

CudaEvent& CudaEvent::operator=(CudaEvent&& o) noexcept {
    if (this != &o) {
        if (e_ != nullptr) cudaEventDestroy(e_);
        e_ = o.e_;
        o.e_ = nullptr;
    }
    return *this;
}

CudaEvent::~CudaEvent() {
    if (e_ != nullptr) DSV4_CHECK_CUDA(cudaEventDestroy(e_));
}

void CudaEvent::record(cudaStream_t stream) const {
    DSV4_CHECK_CUDA(cudaEventRecord(e_, stream));
}

float CudaEvent::elapsed_ms(const CudaEvent& start, const CudaEvent& end) {
    DSV4_CHECK_CUDA(cudaEventSynchronize(end.e_));
    float ms = 0.0f;
    DSV4_CHECK_CUDA(cudaEventElapsedTime(&ms, start.e_, end.e_));
    return ms;
}

void CudaGraph::begin_capture(cudaStream_t stream, bool thread_local_mode) {
    DSV4_CHECK_CUDA(cudaStreamBeginCapture(stream, thread_local_mode
                                                       ? cudaStreamCaptureModeThreadLocal
                                                       : cudaStreamCaptureModeGlobal));
}

cudaError_t CudaGraph::end_capture(cudaStream_t stream, CudaGraph* out) {
    out->reset();
    cudaGraph_t graph = nullptr;
    cudaError_t err = cudaStreamEndCapture(stream, &graph);
    if (err != cudaSuccess) {
        if (graph != nullptr) cudaGraphDestroy(graph);
        return err;
    }
    cudaGraphExec_t exec = nullptr;
    err = cudaGraphInstantiate(&exec, graph, 0);
    if (err != cudaSuccess) {
        cudaGraphDestroy(graph);
        return err;
    }
    out->graph_ = graph;
    out->exec_ = exec;
    return cudaSuccess;
}

CudaGraph& CudaGraph::operator=(CudaGraph&& o) noexcept {
    if (this != &o) {
        reset();
        graph_ = o.graph_;
        exec_ = o.exec_;
        o.graph_ = nullptr;
        o.exec_ = nullptr;
    }
    return *this;
}

CudaGraph::~CudaGraph() {
    reset();
}

void CudaGraph::reset() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
}

void CudaGraph::launch(cudaStream_t stream) const {
    DSV4_CHECK_CUDA(cudaGraphLaunch(exec_, stream));
}

}  // namespace dsv4::cuda
