#include "model/kv_cache.h"

#include <limits>

namespace dsv4 {

CacheFootprint cache_footprint(const ModelConfig& c) {
    CacheFootprint f;
    for (const LayerSpec& l : c.layers) {
        f.fixed_bytes += size_t{4} * c.sliding_window * c.head_dim;
        if (l.kind == LayerKind::kSliding) continue;
        f.bytes_per_token += 4.0 * c.head_dim / l.compress_rate;
        f.fixed_bytes += size_t{8} * l.coff() * l.compress_rate * l.coff() * c.head_dim;
        if (l.kind == LayerKind::kCsa) {
            f.bytes_per_token += 4.0 * c.index_head_dim / l.compress_rate;
            f.fixed_bytes += size_t{8} * 2 * l.compress_rate * 2 * c.index_head_dim;
        }
    }
    return f;
}

KvCache::KvCache(const ModelConfig& c, Backend& backend, int64_t capacity)
    : backend_(backend), capacity_(capacity) {
    layers_.resize(c.num_layers);
    auto make = [&](CompressorState& s, int coff, int m, int width) {
        s.state_size = int64_t{coff} * m * coff * width;
        s.kv = backend_.alloc_array<float>(s.state_size);
        s.gate = backend_.alloc_array<float>(s.state_size);
        const int64_t n_entries = capacity / m + 1;
        s.entries = backend_.alloc_array<float>(n_entries * width);
        bytes_ += (2 * s.state_size + n_entries * width) * sizeof(float);
    };
    for (int l = 0; l < c.num_layers; ++l) {
        const LayerSpec& spec = c.layers[l];
        layers_[l].ring = backend_.alloc_array<float>(int64_t{c.sliding_window} * c.head_dim);
        bytes_ += int64_t{c.sliding_window} * c.head_dim * sizeof(float);
        if (spec.kind != LayerKind::kSliding)
            make(layers_[l].main, spec.coff(), spec.compress_rate, c.head_dim);
        if (spec.kind == LayerKind::kCsa)
            make(layers_[l].indexer, 2, spec.compress_rate, c.index_head_dim);
    }
    reset();
}

void KvCache::reset() {
    pos_ = 0;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (auto& l : layers_) {
        for (CompressorState* s : {&l.main, &l.indexer}) {
            if (s->gate == nullptr) continue;
            backend_.fill(s->kv, 0.0f, s->state_size);
            backend_.fill(s->gate, neg_inf, s->state_size);
        }
    }
}

Status KvCache::reserve(int64_t n) const {
    if (pos_ + n > capacity_)
        return error("context full: ", pos_, " + ", n, " tokens exceed the cache capacity of ",
                     capacity_, " (raise --max-context)");
    return Status::ok();
}

}  // namespace dsv4
