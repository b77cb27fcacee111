// Per-sequence decode state: for every layer the sliding-window ring, and for compressed
// layers the compressor state and the preallocated compressed-KV (and indexer-key) buffers.
// All in backend memory, allocated once; appends are O(1); reset() starts a new sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "ops/backend.h"

namespace dsv4 {

struct CompressorState {
    float* kv = nullptr;       // [coff*m, coff*width]
    float* gate = nullptr;     // [coff*m, coff*width], -inf = empty
    float* entries = nullptr;  // [capacity / m, width]
    int64_t state_size = 0;    // elements of kv (and of gate)
};

struct LayerCache {
    float* ring = nullptr;    // [W, hd], slot = pos % W
    CompressorState main;     // CSA / HCA
    CompressorState indexer;  // CSA: entries are the indexer keys [capacity / m, hi]
};

// Cache sizes of this implementation (float32 entries): growth per token and the fixed part.
struct CacheFootprint {
    double bytes_per_token = 0;
    size_t fixed_bytes = 0;
};
CacheFootprint cache_footprint(const ModelConfig& cfg);

class KvCache {
  public:
    // Allocates room for `capacity` tokens.
    KvCache(const ModelConfig& cfg, Backend& backend, int64_t capacity);

    // Empties the cache for a new sequence (compressor gates back to -inf).
    void reset();
    int64_t position() const { return pos_; }
    int64_t capacity() const { return capacity_; }
    // Error when `n` more tokens do not fit.
    Status reserve(int64_t n) const;
    void advance(int64_t n) { pos_ += n; }
    LayerCache& layer(int l) { return layers_[l]; }
    size_t bytes() const { return bytes_; }

  private:
    Backend& backend_;
    std::vector<LayerCache> layers_;
    int64_t capacity_ = 0, pos_ = 0;
    size_t bytes_ = 0;
};

}  // namespace dsv4
