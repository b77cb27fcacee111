#include "model/synthetic.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace dsv4 {

namespace {

using json = nlohmann::json;

// V4-Flash and V4-Pro as released (ARCHITECTURE.md §1.1), in the release config's names.
json preset(const std::string& name) {
    const bool pro = name == "v4-pro";
    const int L = pro ? 61 : 43;
    json ratios = json::array();
    for (int l = 0; l < L; ++l) {
        if (pro)
            ratios.push_back(l < 2 ? 128 : (l % 2 == 0 ? 4 : 128));
        else
            ratios.push_back(l < 2 ? 0 : (l % 2 == 0 ? 4 : 128));
    }
    ratios.push_back(0);  // the MTP block
    return json{
        {"architectures", {"DeepseekV4ForCausalLM"}},
        {"model_type", "deepseek_v4"},
        {"vocab_size", 129280},
        {"hidden_size", pro ? 7168 : 4096},
        {"num_hidden_layers", L},
        {"num_attention_heads", pro ? 128 : 64},
        {"num_key_value_heads", 1},
        {"head_dim", 512},
        {"qk_rope_head_dim", 64},
        {"q_lora_rank", pro ? 1536 : 1024},
        {"o_lora_rank", 1024},
        {"o_groups", pro ? 16 : 8},
        {"sliding_window", 128},
        {"index_n_heads", 64},
        {"index_head_dim", 128},
        {"index_topk", pro ? 1024 : 512},
        {"n_routed_experts", pro ? 384 : 256},
        {"n_shared_experts", 1},
        {"num_experts_per_tok", 6},
        {"moe_intermediate_size", pro ? 3072 : 2048},
        {"num_hash_layers", 3},
        {"scoring_func", "sqrtsoftplus"},
        {"topk_method", "noaux_tc"},
        {"norm_topk_prob", true},
        {"routed_scaling_factor", pro ? 2.5 : 1.5},
        {"swiglu_limit", 10.0},
        {"hidden_act", "silu"},
        {"rms_norm_eps", 1e-6},
        {"hc_mult", 4},
        {"hc_sinkhorn_iters", 20},
        {"hc_eps", 1e-6},
        {"num_nextn_predict_layers", 1},
        {"max_position_embeddings", 1048576},
        {"rope_theta", 10000.0},
        {"compress_rope_theta", 160000.0},
        {"compress_ratios", ratios},
        {"bos_token_id", 0},
        {"eos_token_id", 1},
        {"tie_word_embeddings", false},
        {"rope_scaling",
         {{"type", "yarn"},
          {"factor", 16.0},
          {"original_max_position_embeddings", 65536},
          {"beta_fast", 32},
          {"beta_slow", 1}}},
    };
}

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

Expected<ModelConfig> synth_config(const SynthSpec& spec) {
    if (spec.format != "release" && spec.format != "nvfp4")
        return error("synthetic format '", spec.format, "' (release or nvfp4)");
    json j;
    if (spec.base == "v4-flash" || spec.base == "v4-pro") {
        j = preset(spec.base);
    } else {
        std::ifstream in(spec.base);
        if (!in)
            return error("cannot read synthetic config '", spec.base,
                         "' (v4-flash, v4-pro or a config.json)");
        std::stringstream ss;
        ss << in.rdbuf();
        j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_object()) return error(spec.base, ": not a JSON object");
    }
    if (!j.contains("num_hidden_layers") || !j["num_hidden_layers"].is_number_integer())
        return error(spec.base, ": no integer num_hidden_layers");
    const int L = j["num_hidden_layers"].get<int>();
    if (spec.layers < 0 || spec.layers > L)
        return error("--layers ", spec.layers, " outside [1, ", L, "] for ", spec.base);
    const int keep = spec.layers == 0 ? L : spec.layers;
    j["num_hidden_layers"] = keep;
    const json& nextn =
        j.contains("num_nextn_predict_layers") ? j["num_nextn_predict_layers"] : json(0);
    const bool mtp = spec.mtp && nextn.is_number_integer() && nextn.get<int>() > 0;
    j["num_nextn_predict_layers"] = mtp ? 1 : 0;
    for (const char* list : {"compress_ratios", "layer_types", "mlp_layer_types"})
        if (j.contains(list) && j[list].is_array() && static_cast<int>(j[list].size()) >= keep) {
            json cut = json::array();
            for (int l = 0; l < keep; ++l) cut.push_back(j[list][l]);
            // (compress_ratios' entry past the decoder layers is the MTP block's.)
            if (mtp && static_cast<int>(j[list].size()) > L) cut.push_back(j[list][L]);
            j[list] = cut;
        }
    if (j.contains("num_hash_layers") && j["num_hash_layers"].is_number_integer())
        j["num_hash_layers"] = std::min(j["num_hash_layers"].get<int>(), keep);
    return parse_model_config(j.dump(), "synthetic " + spec.base);
}

SynthSource::SynthSource(SynthSpec spec) : spec_(std::move(spec)) {}

uint64_t SynthSource::seed_of(const std::string& name) const {
    uint64_t h = 1469598103934665603ull ^ spec_.seed;  // FNV-1a
    for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
    return h;
}

WeightFormat SynthSource::expert_format() const {
    return spec_.format == "nvfp4" ? WeightFormat::kNvfp4 : WeightFormat::kMxfp4;
}

WeightFormat synth_format(const std::string& format, ops::WeightRole role,
                          const std::string& prefix) {
    using R = ops::WeightRole;
    if (format == "nvfp4")  // dsv4 quantize --all: every linear but embed and head
        return role == R::kEmbed || role == R::kHead ? WeightFormat::kDense : WeightFormat::kNvfp4;
    // The release: FP8 projections (attention, indexer queries, shared expert), BF16
    // compressors, indexer weights, router, embed and head, MXFP4 experts.
    if (role == R::kAttention || role == R::kSharedExpert ||
        (role == R::kIndexer && ends_with(prefix, "wq_b")))
        return WeightFormat::kFp8Block;
    return role == R::kExperts ? WeightFormat::kMxfp4 : WeightFormat::kDense;
}

double synth_bytes_per_value(WeightFormat f) {
    switch (f) {
        case WeightFormat::kDense:
            return 2;  // BF16
        case WeightFormat::kFp8Block:
            return 1;
        case WeightFormat::kMxfp4:
            return 0.5 + 1.0 / kMxfp4Block;
        case WeightFormat::kNvfp4:
            return 0.5 + 1.0 / kNvfp4Block;
    }
    return 4;
}

namespace {

// One decoder block of `spec`'s kind as stored.
double block_bytes(const ModelConfig& c, const std::string& format, const LayerSpec& spec,
                   int local_experts) {
    using R = ops::WeightRole;
    const double D = c.hidden_size, hd = c.head_dim, Rq = c.q_lora_rank,
                 I = c.moe_intermediate_size;
    const double H = c.num_heads, E = c.n_routed_experts, hi = c.index_head_dim,
                 Hi = c.index_n_heads;
    double b = 0;
    auto m = [&](R role, const char* name, double rows, double cols) {
        b += rows * cols * synth_bytes_per_value(synth_format(format, role, name));
    };
    m(R::kAttention, "wq_a", Rq, D);
    m(R::kAttention, "wq_b", H * hd, Rq);
    m(R::kAttention, "wkv", hd, D);
    m(R::kAttention, "wo_a", double(c.o_groups) * c.o_lora_rank, H * hd / c.o_groups);
    m(R::kAttention, "wo_b", D, double(c.o_groups) * c.o_lora_rank);
    if (spec.kind != LayerKind::kSliding) m(R::kCompressor, "wkv", 2.0 * spec.coff() * hd, D);
    if (spec.kind == LayerKind::kCsa) {
        m(R::kIndexer, "compressor.wkv", 2.0 * 2 * hi, D);
        m(R::kIndexer, "wq_b", Hi * hi, Rq);
        m(R::kIndexer, "weights_proj", Hi, D);
    }
    m(R::kRouter, "gate", E, D);
    m(R::kSharedExpert, "shared", 3.0 * c.n_shared_experts * I, D);
    m(R::kExperts, "experts", (local_experts < 0 ? E : local_experts) * 3 * I, D);
    b += 2.0 * c.hc_mix() * c.hc_mult * D * 4;  // the two mHC mixing matrices (f32)
    return b;
}

}  // namespace

double synth_layer_bytes(const ModelConfig& c, const std::string& format, int l,
                         int local_experts) {
    return block_bytes(c, format, c.layers[l], local_experts);
}

double synth_fixed_bytes(const ModelConfig& c, const std::string& format, int local_experts) {
    double b = 2.0 * c.vocab_size * c.hidden_size *
               synth_bytes_per_value(synth_format(format, ops::WeightRole::kHead, "head"));
    if (c.num_mtp_layers > 0) {  // its block, e_proj and h_proj (model/weights.cc)
        const double D = c.hidden_size;
        b += block_bytes(c, format, c.mtp_spec, local_experts) +
             2 * D * D *
                 synth_bytes_per_value(synth_format(format, ops::WeightRole::kAttention, "proj"));
    }
    return b;
}

QuantWeight SynthSource::matrix(const std::string& prefix, int64_t rows, int64_t cols,
                                ops::WeightRole role) {
    owned_.push_back(
        synth_weight(synth_format(spec_.format, role, prefix), rows, cols, seed_of(prefix)));
    return owned_.back()->w;
}

std::vector<float> SynthSource::vec(const std::string& name, int64_t rows, int64_t cols) const {
    std::vector<float> v(static_cast<size_t>(rows * cols), 0.0f);
    auto uniform = [&](double rms) {
        const double a = rms * std::sqrt(3.0);
        const uint64_t seed = seed_of(name);
        for (size_t i = 0; i < v.size(); ++i) {
            const double u = synth_uniform(seed, i);
            v[i] = static_cast<float>((2 * u - 1) * a);
        }
    };
    if (ends_with(name, "norm.weight") || ends_with(name, "_scale"))
        std::fill(v.begin(), v.end(), 1.0f);
    else if (ends_with(name, "_fn"))
        uniform(1.0 / std::sqrt(static_cast<double>(cols)));
    else if (ends_with(name, "ape"))
        uniform(0.1);
    return v;  // attn_sink, gate.bias, hc bases: 0
}

std::vector<int32_t> SynthSource::hash_table(const std::string& name, int64_t V, int k,
                                             int E) const {
    std::vector<int32_t> t(static_cast<size_t>(V * k));
    const uint64_t seed = seed_of(name);
    uint64_t n = 0;
    for (int64_t v = 0; v < V; ++v)
        for (int j = 0; j < k; ++j) {
            int32_t e;
            bool dup;
            do {
                e = static_cast<int32_t>(synth_bits(seed, n++) % static_cast<uint64_t>(E));
                dup = false;
                for (int i = 0; i < j; ++i) dup = dup || t[v * k + i] == e;
            } while (dup);
            t[v * k + j] = e;
        }
    return t;
}

}  // namespace dsv4
