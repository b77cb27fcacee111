#include "backend/cuda/common/check.cuh"

#include <cstdlib>
#include <cstring>

#include "base/check.h"

namespace dsv4::cuda {

void cuda_fatal(const char* file, int line, const char* expr, cudaError_t err) {
    fatal_abort(file, line,
                str_cat("CUDA call failed: ", expr, ": ", cudaGetErrorName(err), " (",
                        cudaGetErrorString(err), ")"));
}

bool launch_sync_enabled() {
#if defined(DSV4_CUDA_SYNC_LAUNCHES)
    return true;
#else
    static const bool enabled = [] {
        const char* v = std::getenv("DSV4_CUDA_SYNC");
        return v != nullptr && std::strcmp(v, "0") != 0 && v[0] != '\0';
    }();
    return enabled;
#endif
}

void check_launch(const char* file, int line, cudaStream_t stream) {
    const cudaError_t launch_err = cudaGetLastError();
    if (launch_err != cudaSuccess) cuda_fatal(file, line, "kernel launch", launch_err);
    if (!launch_sync_enabled()) return;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    const cudaError_t query_err = cudaStreamIsCapturing(stream, &capture);
    if (query_err != cudaSuccess) cuda_fatal(file, line, "cudaStreamIsCapturing", query_err);
    if (capture != cudaStreamCaptureStatusNone) return;
    const cudaError_t sync_err = cudaStreamSynchronize(stream);
    if (sync_err != cudaSuccess)
        cuda_fatal(file, line, "kernel (debug sync after launch)", sync_err);
}

}  // namespace dsv4::cuda
