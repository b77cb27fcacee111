#include "backend/cuda/common/device_arena.h"

#include <cuda_runtime.h>

#include "backend/cuda/common/check.cuh"
#include "base/check.h"

namespace dsv4::cuda {

Expected<DeviceArena> DeviceArena::create(size_t bytes) {
    DeviceArena arena;
    if (bytes == 0) return arena;
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return error("device arena of ", bytes, " bytes: ", cudaGetErrorString(err));
    }
    arena.base_ = static_cast<uint8_t*>(p);
    arena.capacity_ = bytes;
    return arena;
}

DeviceArena& DeviceArena::operator=(DeviceArena&& o) noexcept {
    if (this != &o) {
        if (base_ != nullptr) cudaFree(base_);
        base_ = o.base_;
        capacity_ = o.capacity_;
        used_ = o.used_;
        frozen_ = o.frozen_;
        o.base_ = nullptr;
        o.capacity_ = o.used_ = 0;
        o.frozen_ = false;
    }
    return *this;
}

DeviceArena::~DeviceArena() {
    if (base_ != nullptr) DSV4_CHECK_CUDA(cudaFree(base_));
}

void* DeviceArena::alloc(size_t bytes, size_t align) {
    DSV4_ASSERT(!frozen_, "device arena allocation of ", bytes,
                " bytes after freeze(): the decode step must not allocate");
    DSV4_ASSERT(align != 0 && (align & (align - 1)) == 0, "alignment ", align);
    const size_t offset = (used_ + align - 1) / align * align;
    DSV4_ASSERT(offset + bytes <= capacity_, "device arena exhausted: ", bytes, " bytes at offset ",
                offset, " of ", capacity_, "; size the arena with ArenaPlan");
    used_ = offset + bytes;
    return base_ + offset;
}

}  // namespace dsv4::cuda
