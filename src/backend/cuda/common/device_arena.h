// One device allocation sized at load, handed out by bump allocation. The decode step never
// allocates: everything it touches (weights, activations, workspaces) is carved out of the
// arena before the first token, and freeze() turns any later allocation into an abort
// (the "no realloc" tripwire of STYLE rule 3).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace dsv4::cuda {

inline constexpr size_t kArenaAlign = 256;

// Sums allocation sizes with the arena's alignment, so a loader can size the arena exactly
// before creating it (query first, allocate once).
class ArenaPlan {
  public:
    void add(size_t bytes, size_t align = kArenaAlign) {
        total_ = (total_ + align - 1) / align * align + bytes;
    }
    size_t total() const { return total_; }

  private:
    size_t total_ = 0;
};

class DeviceArena {
  public:
    // One cudaMalloc of `bytes`; an error (not an abort) when the device has too little memory,
    // since the size comes from the model and the user's settings.
    static Expected<DeviceArena> create(size_t bytes);

    DeviceArena() = default;
    DeviceArena(DeviceArena&& o) noexcept { *this = static_cast<DeviceArena&&>(o); }
    DeviceArena& operator=(DeviceArena&& o) noexcept;
    DeviceArena(const DeviceArena&) = delete;
    DeviceArena& operator=(const DeviceArena&) = delete;
    ~DeviceArena();

    // Aborts when the arena is exhausted or frozen: the plan that sized it was wrong.
    void* alloc(size_t bytes, size_t align = kArenaAlign);
    template <typename T>
    T* alloc_array(size_t count, size_t align = kArenaAlign) {
        return static_cast<T*>(alloc(count * sizeof(T), align));
    }
    void freeze() { frozen_ = true; }
    bool frozen() const { return frozen_; }

    size_t used() const { return used_; }
    size_t capacity() const { return capacity_; }
    void* base() const { return base_; }

  private:
    uint8_t* base_ = nullptr;
    size_t capacity_ = 0;
    size_t used_ = 0;
    bool frozen_ = false;
};

}  // namespace dsv4::cuda
