#include "backend/cuda/common/device.h"

#include <cuda_runtime.h>

namespace dsv4::cuda {

bool gpu_available() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no device" error for later callers
        return false;
    }
    return count > 0;
}

Expected<DeviceInfo> query_device(int device) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        cudaGetLastError();
        return error("no CUDA device: ", err != cudaSuccess ? cudaGetErrorString(err) : "none");
    }
    if (device < 0 || device >= count) return error("CUDA device ", device, " of ", count);
    cudaDeviceProp p{};
    err = cudaGetDeviceProperties(&p, device);
    if (err != cudaSuccess) return error("cudaGetDeviceProperties: ", cudaGetErrorString(err));
    if (p.major != 9 || p.minor != 0)
        return error("GPU '", p.name, "' is sm_", p.major, p.minor,
                     "; the dsv4 CUDA kernels are built for sm_90a (Hopper) only");
    DeviceInfo info;
    info.device = device;
    info.name = p.name;
    info.cc_major = p.major;
    info.cc_minor = p.minor;
    info.sm_count = p.multiProcessorCount;
    info.l2_bytes = static_cast<size_t>(p.l2CacheSize);
    info.global_mem_bytes = p.totalGlobalMem;
    info.smem_per_block_optin = p.sharedMemPerBlockOptin;
    return info;
}

}  // namespace dsv4::cuda
