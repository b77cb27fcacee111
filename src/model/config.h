// DeepSeek-V4 model configuration, parsed from config.json in either the transformers style
// (layer_types, compress_rates, mlp_layer_types, rope_parameters) or the release style
// (compress_ratios, num_hash_layers, qk_rope_head_dim, rope_scaling), and validated.
// Every size, rate, window and epsilon comes from here; nothing assumes V4-Flash constants.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4 {

enum class LayerKind { kSliding, kCsa, kHca };
const char* layer_kind_name(LayerKind k);

struct RopeParams {
    double theta = 10000.0;
    bool yarn = false;
    double factor = 1.0;
    double original_max_position = 0.0;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    // cos/sin multiplier. DeepSeek-V4 uses none (1.0); transformers applies one when a YaRN
    // parameter set says so, or derives YaRN's default when a nested set omits it.
    double attention_factor = 1.0;
    double partial_rotary_factor = 0.0;  // as given in this set; 0 = not given
};

struct LayerSpec {
    LayerKind kind = LayerKind::kSliding;
    int compress_rate = 0;  // m: 0 for sliding-only layers
    bool hash_routed = false;
    int coff() const { return kind == LayerKind::kCsa ? 2 : 1; }
};

struct ModelConfig {
    int vocab_size = 0;
    int hidden_size = 0;       // D
    int num_layers = 0;        // L
    int num_heads = 0;         // H
    int head_dim = 0;          // hd
    int rope_dim = 0;          // rd (trailing dims of each head)
    int q_lora_rank = 0;       // Rq
    int o_lora_rank = 0;       // Ro
    int o_groups = 0;          // g
    int sliding_window = 0;    // W
    int index_n_heads = 0;     // Hi
    int index_head_dim = 0;    // hi
    int index_topk = 0;        // K
    int n_routed_experts = 0;  // E
    int n_shared_experts = 0;  // 0 or 1
    int num_experts_per_tok = 0;
    int moe_intermediate_size = 0;  // I
    double routed_scaling_factor = 1.0;
    double swiglu_limit = 0.0;  // 0 = no clipping
    double rms_norm_eps = 1e-6;
    int hc_mult = 1;  // n
    int hc_sinkhorn_iters = 1;
    double hc_eps = 1e-6;
    int num_mtp_layers = 0;
    long long max_position_embeddings = 0;
    int bos_token_id = 0;
    int eos_token_id = 1;
    bool tie_word_embeddings = false;
    RopeParams rope_main;      // sliding-only layers
    RopeParams rope_compress;  // CSA / HCA layers
    std::vector<LayerSpec> layers;
    // The MTP block's attention (release: compress_ratios[num_layers], else window-only); its
    // MoE is score-routed.
    LayerSpec mtp_spec;

    int hc_mix() const { return (2 + hc_mult) * hc_mult; }
    const RopeParams& rope_for(const LayerSpec& l) const {
        return l.kind == LayerKind::kSliding ? rope_main : rope_compress;
    }
    std::string summary() const;
};

// Parses config JSON text; `label` names the source in errors. All problems found are listed.
Expected<ModelConfig> parse_model_config(const std::string& text, const std::string& label);
Expected<ModelConfig> load_model_config(const std::string& path);

}  // namespace dsv4
