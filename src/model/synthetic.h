// Synthetic models for benchmarks (`--synthetic v4-flash|v4-pro|CONFIG.json`): a config with
// the real shapes, per-layer compress ratios and formats, cut to the layers that fit, and random
// weights drawn where they will live. Matrices other than the routed experts are drawn on the
// host (formats/synth_weight.h); the routed experts, 97% of the bytes, are drawn by the backend
// when it can (CUDA: in device memory) and on the host otherwise. Router gates are random, so
// routing spreads over the experts (no expert is favoured; `dsv4 bench` prints the histogram).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/synth_weight.h"
#include "model/config.h"
#include "ops/weight.h"

namespace dsv4 {

struct SynthSpec {
    std::string base = "v4-flash";  // "v4-flash", "v4-pro", or a config.json path
    int layers = 0;                 // 0: all of the base's
    std::string format =
        "nvfp4";  // "release" (FP8 + MXFP4 + BF16) or "nvfp4" (dsv4 quantize --all)
    uint64_t seed = 1;
    // With the base's MTP block (random weights: the model's drafts are as good as a guess, so
    // speculative decoding measures what a verifying step costs, not a trained acceptance).
    bool mtp = false;
};

// The base config cut to spec.layers decoder layers (their compress ratios and hash routing as
// in the base), with the MTP block only when spec.mtp asks for it (and the base has one).
Expected<ModelConfig> synth_config(const SynthSpec& spec);

// The format a synthetic matrix of `role` gets (prefix: its name, for the release's
// exceptions), and estimates of a synthetic model's bytes as stored: one decoder layer (the
// matrices bind_layer binds, model/weights.cc), and the embedding + head + the MTP block when
// the config has one (for choosing how many layers fit before anything is allocated).
// local_experts: the routed experts a layer this rank holds (ranks, ops::expert_shard); -1: all.
WeightFormat synth_format(const std::string& format, ops::WeightRole role,
                          const std::string& prefix);
double synth_layer_bytes(const ModelConfig& cfg, const std::string& format, int layer,
                         int local_experts = -1);
// Bytes per value of a synthetic matrix in `f` as stored (dense: BF16; FP4: codes + scales).
double synth_bytes_per_value(WeightFormat f);
double synth_fixed_bytes(const ModelConfig& cfg, const std::string& format, int local_experts = -1);

// Draws the tensors bind_weights asks for and keeps them alive for the model's lifetime.
class SynthSource {
  public:
    explicit SynthSource(SynthSpec spec);
    const SynthSpec& spec() const { return spec_; }
    // The matrix `prefix` ("layers.3.attn.wq_a") of a role, in the spec's format for it.
    QuantWeight matrix(const std::string& prefix, int64_t rows, int64_t cols, ops::WeightRole role);
    // A small float tensor by name (norm weights 1, mHC mixing and APE small random, sinks,
    // biases and mHC bases 0, mHC scales 1).
    std::vector<float> vec(const std::string& name, int64_t rows, int64_t cols) const;
    // Hash routing: k distinct random experts for each of V tokens.
    std::vector<int32_t> hash_table(const std::string& name, int64_t V, int k, int E) const;
    WeightFormat expert_format() const;
    uint64_t seed_of(const std::string& name) const;

  private:
    SynthSpec spec_;
    std::deque<std::unique_ptr<SynthWeight>> owned_;
};

}  // namespace dsv4
