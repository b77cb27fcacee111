// What the backend needs to know about the GPU, queried once at init (never per launch).
#pragma once

#include <cstddef>
#include <string>

#include "base/status.h"

namespace dsv4::cuda {

struct DeviceInfo {
    int device = 0;
    std::string name;
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    size_t l2_bytes = 0;
    size_t global_mem_bytes = 0;
    size_t smem_per_block_optin = 0;
};

// A usable CUDA device: the runtime loads, the driver answers and at least one device exists.
// Never aborts: CPU-only machines (CI) get false.
bool gpu_available();

// Properties of `device`; an error when there is no usable device or it is not Hopper (sm_90),
// the only architecture the kernels are built for.
Expected<DeviceInfo> query_device(int device = 0);

}  // namespace dsv4::cuda
