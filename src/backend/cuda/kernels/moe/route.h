// Launcher of the router's scoring half (ops::RouteArgs): sqrt-softplus scores, selection by
// score + bias (top-k, ties to the lower expert) or by the hash table, normalised weights. The
// router op is the gate linear followed by this.
#pragma once

#include <cuda_runtime.h>

#include "ops/moe.h"

namespace dsv4::cuda {

inline constexpr int kRouteMaxK = 32;
void launch_route(const ops::RouteArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
