// Whether a model's shapes fit a backend's kernels (ShapeLimits): Engine::create checks it
// once the config and the backend are known, so a model beyond a kernel's fixed layout is one
// line naming the field, never an abort at the first step.
#pragma once

#include <string>

#include "formats/cache_row.h"
#include "model/config.h"
#include "ops/backend.h"

namespace dsv4 {

// Empty when every shape is within `limits`, else why not (one line, the first field beyond).
// kv and keys: the cache row types (typed rows are written by the compressor's encoder).
std::string shape_beyond_limits(const ModelConfig& c, CacheType kv, CacheType keys,
                                const ShapeLimits& limits);

}  // namespace dsv4
