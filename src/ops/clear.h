// Buffers an op sets to zero once its own work is done: the outputs of ops later in the step that
// add into them (LinearArgs::y_cleared). A CUDA backend clears them inside the op's launch rather
// than by a memset node before each of those ops, which would be a launch of its own and would
// also cut the programmatic edge that lets a GEMV's weights stream in while the kernel before it
// runs.
#pragma once

#include <cstdint>

namespace dsv4::ops {

struct Clear {
    float* p = nullptr;  // [n]; nullptr: unused
    int64_t n = 0;
};
inline constexpr int kMaxClears = 5;

}  // namespace dsv4::ops
