// Launcher of the lightning indexer's scores + top-k (ops/indexer.h). The scores of a token's
// valid entries live in shared memory: a slot may hold at most indexer_max_entries(Hi, hi)
// entries (29168 for V4's 64 x 128 heads: contexts up to ~116K tokens at m = 4); the launcher
// checks n_entries against it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/indexer.h"

namespace dsv4::cuda {

int64_t indexer_max_entries(int Hi, int hi);

// Device scratch of the decode path at V4 shapes (steps of a few tokens: S blocks a token
// instead of a cluster of 16): the scores of each token's slot and per-token arrival counters
// (zero; every launch leaves them zero). Without it (scores == nullptr) every step takes the
// cluster kernel.
struct IndexerScratch {
    float* scores = nullptr;       // [kSplitMaxTokens][indexer_max_entries(64, 128)]
    unsigned* arrivals = nullptr;  // [kSplitMaxTokens], zero
    int sm_count = 1;              // the split grid is one wave of it
};
// Bytes of the scratch, and the scratch carved from p (that many zeroed bytes).
int64_t indexer_scratch_bytes();
IndexerScratch indexer_scratch(void* p, int sm_count);

void launch_indexer_topk(const ops::IndexerTopkArgs& a, const IndexerScratch& ws,
                         cudaStream_t stream);

}  // namespace dsv4::cuda
