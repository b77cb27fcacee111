// Host-side settings that belong to a device, made once per device: kernel attributes
// (cudaFuncSetAttribute: dynamic shared memory, non-portable clusters) apply to the current
// device only, so a process with ranks on several GPUs must set them on each.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>

namespace dsv4::cuda {

class PerDeviceOnce {
  public:
    // fn() on the calling thread's current device the first time that device asks; its result
    // then (and every later time). Allowed during stream capture (no stream operation).
    template <typename Fn>
    cudaError_t operator()(Fn&& fn) {
        int device = 0;
        if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
        std::lock_guard<std::mutex> lock(m_);
        const auto it = done_.find(device);
        if (it != done_.end()) return it->second;
        const cudaError_t e = fn();
        done_.emplace(device, e);
        return e;
    }

  private:
    std::mutex m_;
    std::map<int, cudaError_t> done_;
};

}  // namespace dsv4::cuda
