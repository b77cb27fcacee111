// dsv4 public API: load a DeepSeek-V4 model folder on a backend, run sequences through it.
// cli/ and server/ use only the headers of include/dsv4.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dsv4/status.h"

namespace dsv4 {

struct EngineOptions {
    std::string model_dir;
    std::string device = "cpu";
    int64_t max_context = 4096;  // tokens per sequence the caches hold
    int max_chunk = 128;         // tokens per internal forward step
    int threads = 0;             // 0 = DSV4_THREADS or all cores
};

struct ModelInfo {
    int vocab_size = 0;
    int bos_token_id = 0;
    int eos_token_id = 1;
    int num_layers = 0;
    int hidden_size = 0;
    int hc_mult = 0;
    std::string summary;                      // one line: sizes and layer kinds
    size_t weight_bytes = 0;                  // checkpoint bytes bound
    size_t cache_bytes = 0;                   // per sequence, at max_context
    double cache_bytes_per_token = 0;         // compressed entries + indexer keys, amortised
    size_t cache_fixed_bytes = 0;             // rings + compressor states per sequence
    std::vector<std::string> weight_formats;  // "group: format" lines
};

struct SamplingOptions {
    float temperature = 0.0f;  // 0 = greedy
    int top_k = 0;
    float top_p = 1.0f;
    uint64_t seed = 0;
};

class Engine;

// One sequence: its own caches. Not thread-safe; one engine thread drives all sessions.
class Session {
  public:
    ~Session();
    // Feeds tokens at the current position. `all_logits` receives [n, V] when not null,
    // `last_logits` the final position's [V].
    Status feed(const std::vector<int32_t>& ids, std::vector<float>* all_logits,
                std::vector<float>* last_logits);
    // Per-layer taps for debugging/conformance: layer < L gives the residual streams after
    // that layer [n_tokens, hc, D]; layer == L gives the final normed hidden state [n_tokens, D].
    Status feed_with_taps(const std::vector<int32_t>& ids, std::vector<float>* all_logits,
                          const std::function<void(int, const float*, int64_t)>& tap);
    int64_t position() const;
    void reset();

  private:
    friend class Engine;
    struct Impl;
    explicit Session(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

class Engine {
  public:
    static Expected<std::unique_ptr<Engine>> create(const EngineOptions& options);
    ~Engine();
    const ModelInfo& info() const;
    std::unique_ptr<Session> new_session();

    // Prefills `prompt`, then samples up to max_tokens tokens (stopping after EOS when
    // stop_at_eos). on_token is called for each token as it is produced; returning false stops.
    Expected<std::vector<int32_t>> generate(Session& session, const std::vector<int32_t>& prompt,
                                            int max_tokens, const SamplingOptions& sampling,
                                            bool stop_at_eos,
                                            const std::function<bool(int32_t)>& on_token);

  private:
    struct Impl;
    explicit Engine(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
