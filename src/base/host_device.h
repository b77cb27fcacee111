// DSV4_HD: a function the CPU reference and the CUDA kernels share (the same arithmetic on both
// sides, bit for bit), inline on the host and __host__ __device__ under nvcc.
#pragma once

#if defined(__CUDACC__)
#define DSV4_HD __host__ __device__ __forceinline__
#else
#define DSV4_HD inline
#endif
