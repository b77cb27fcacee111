#include "model/backend_fit.h"

namespace dsv4 {

std::string shape_beyond_limits(const ModelConfig& c, CacheType kv, CacheType keys,
                                const ShapeLimits& limits) {
    auto beyond = [](const char* field, int value, int most) {
        return std::string(field) + " " + std::to_string(value) + " (at most " +
               std::to_string(most) + ")";
    };
    if (c.head_dim > limits.head_dim) return beyond("head_dim", c.head_dim, limits.head_dim);
    if (kv != CacheType::kF32 && c.head_dim > limits.typed_row_width)
        return beyond("head_dim with typed K=V rows", c.head_dim, limits.typed_row_width);
    bool csa = false;
    for (const LayerSpec& l : c.layers) csa |= l.kind == LayerKind::kCsa;
    if (csa && keys != CacheType::kF32 && c.index_head_dim > limits.typed_row_width)
        return beyond("index_head_dim with typed indexer keys", c.index_head_dim,
                      limits.typed_row_width);
    if (c.hc_mult > limits.hc_streams) return beyond("hc_mult", c.hc_mult, limits.hc_streams);
    if (c.num_experts_per_tok > limits.experts_per_token)
        return beyond("num_experts_per_tok", c.num_experts_per_tok, limits.experts_per_token);
    if (c.n_routed_experts > limits.routed_experts)
        return beyond("n_routed_experts", c.n_routed_experts, limits.routed_experts);
    return {};
}

}  // namespace dsv4
