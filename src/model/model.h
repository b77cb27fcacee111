// DeepSeek-V4: config + bound weights + activation workspace on one backend, and the forward
// pass over a chunk of tokens of one sequence.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/safetensors.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "ops/backend.h"

namespace dsv4 {

// Called after decoder layer `layer` < L with the residual streams [T, n, D] (host copy), and
// with layer == L for the final normed hidden state [T, D]. For debugging and conformance only.
using LayerTap = std::function<void(int layer, const float* streams, int64_t T)>;

class Model {
  public:
    // Loads config.json and the safetensors of `dir`; `max_chunk` bounds the tokens per
    // internal forward step (longer feeds are split; results do not depend on the split).
    static Expected<std::unique_ptr<Model>> load(const std::string& dir, Backend& backend,
                                                 int max_chunk);

    const ModelConfig& config() const { return cfg_; }
    const ModelWeights& weights() const { return w_; }
    Backend& backend() { return backend_; }

    // Feeds `ids` (host, [T]) at the cache's position and advances it. logits (host,
    // [T, V]) may be nullptr; last_logits (host, [V]) receives the final position's logits.
    Status forward(KvCache& cache, const int32_t* ids, int64_t T, float* logits,
                   float* last_logits = nullptr, const LayerTap& tap = nullptr);

  private:
    Model(ModelConfig cfg, TensorStore store, Backend& backend, int max_chunk);
    Status validate_ids(const int32_t* ids, int64_t T) const;
    void step(KvCache& cache, int64_t T, const LayerTap& tap);
    void attention_block(const LayerWeights& w, const LayerSpec& spec, LayerCache& lc, int64_t pos0,
                         int64_t T, const float* x, float* out);
    void ffn_block(const LayerWeights& w, int64_t T, const float* x, float* out);
    void compressor(const CompressorWeights& w, CompressorState& s, const LayerSpec& spec,
                    int width, int64_t pos0, int64_t T, const float* x);

    ModelConfig cfg_;
    TensorStore store_;
    Backend& backend_;
    ModelWeights w_;
    int max_chunk_;
    struct RopeTable {
        const float* inv_freq = nullptr;  // [rd/2]
        float scale = 1.0f;               // cos/sin multiplier
    };
    RopeTable rope_main_, rope_compress_;
    const RopeTable& rope_for(const LayerSpec& spec) const {
        return spec.kind == LayerKind::kSliding ? rope_main_ : rope_compress_;
    }

    // Activation workspace for max_chunk tokens (backend memory, allocated once).
    struct Workspace {
        int32_t* ids;          // [T]
        float* streams;        // [T, n, D]
        float* streams_next;   // [T, n, D]
        float* y;              // [T, D] collapsed sub-block input
        float* xn;             // [T, D] normed
        float* post;           // [T, n]
        float* comb;           // [T, n, n]
        float* qa;             // [T, Rq]
        float* q;              // [T, H*hd]
        float* kv;             // [T, hd]
        float* o;              // [T, H*hd]
        float* u;              // [T, g*Ro]
        float* sub_out;        // [T, D]
        float* ckv;            // [T, 2*max(hd, hi)]
        float* cgate;          // [T, 2*max(hd, hi)]
        float* qi;             // [T, Hi*hi]
        float* wts;            // [T, Hi]
        int32_t* topk;         // [T, K]
        float* router_logits;  // [T, E]
        int32_t* sel;          // [T, k]
        float* route_w;        // [T, k]
        float* sh_g;           // [T, I]
        float* sh_u;           // [T, I]
        float* sh_out;         // [T, D]
        float* logits;         // [T, V]
    } ws_{};
};

}  // namespace dsv4
