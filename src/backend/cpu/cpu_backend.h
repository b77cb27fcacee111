// The CPU backend: host memory, the reference ops, weights read in place from the mmap.
#pragma once

#include <memory>
#include <vector>

#include "ops/backend.h"

namespace dsv4 {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace dsv4
