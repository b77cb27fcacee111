// Launcher of the lightning indexer's scores + top-k (ops/indexer.h). The scores of a token's
// valid entries live in shared memory: a slot may hold at most indexer_max_entries(Hi, hi)
// entries (29184 for V4's 64 x 128 heads: contexts up to ~116K tokens at m = 4); the launcher
// checks n_entries against it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/indexer.h"

namespace dsv4::cuda {

int64_t indexer_max_entries(int Hi, int hi);
void launch_indexer_topk(const ops::IndexerTopkArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
