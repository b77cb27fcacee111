// Error checks for the CUDA runtime: every runtime call goes through DSV4_CHECK_CUDA and every
// kernel launch is followed by DSV4_CHECK_LAUNCH(stream). A failure here is a programmer error
// or a device fault, so it aborts with file:line (STYLE: errors by audience); bad user input
// never reaches these macros.
//
// Debug mode: with the CMake option DSV4_CUDA_SYNC_LAUNCHES=ON, or the environment variable
// DSV4_CUDA_SYNC=1 at run time, every checked launch also synchronises its stream, so an
// asynchronous fault is reported at the launch that caused it. Launches inside a stream capture
// are never synchronised (that would break the capture).
#pragma once

#include <cuda_runtime.h>

namespace dsv4::cuda {

[[noreturn]] void cuda_fatal(const char* file, int line, const char* expr, cudaError_t err);
// cudaGetLastError after a launch; in debug mode also synchronises `stream` and checks again.
void check_launch(const char* file, int line, cudaStream_t stream);
// True when launches are synchronised (compile-time option or DSV4_CUDA_SYNC=1), read once.
bool launch_sync_enabled();

}  // namespace dsv4::cuda

#define DSV4_CHECK_CUDA(expr)                                                    \
    do {                                                                         \
        const cudaError_t dsv4_cuda_err_ = (expr);                               \
        if (dsv4_cuda_err_ != cudaSuccess)                                       \
            ::dsv4::cuda::cuda_fatal(__FILE__, __LINE__, #expr, dsv4_cuda_err_); \
    } while (0)

#define DSV4_CHECK_LAUNCH(stream) ::dsv4::cuda::check_launch(__FILE__, __LINE__, (stream))
