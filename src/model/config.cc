#include "model/config.h"

#include <climits>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace dsv4 {
namespace {

using json = nlohmann::json;

// Collects every problem so one run of `dsv4 check` reports them all.
class Reader {
  public:
    Reader(const json& j, std::vector<std::string>& errors) : j_(j), errors_(errors) {}

    bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

    int get_int(const char* key, bool required, int fallback = 0) {
        if (!has(key)) {
            if (required) errors_.push_back(std::string("missing field \"") + key + "\"");
            return fallback;
        }
        const json& v = j_[key];
        if (v.is_number_integer()) {
            long long x = v.get<long long>();
            if (x < INT32_MIN || x > INT32_MAX) {
                errors_.push_back(std::string("\"") + key + "\" is out of range");
                return fallback;
            }
            return static_cast<int>(x);
        }
        if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
            std::fabs(v.get<double>()) < 2e9)
            return static_cast<int>(v.get<double>());
        errors_.push_back(std::string("\"") + key + "\" must be an integer");
        return fallback;
    }

    long long get_ll(const char* key, long long fallback) {
        if (!has(key)) return fallback;
        const json& v = j_[key];
        if (v.is_number_unsigned() && v.get<unsigned long long>() > LLONG_MAX) {
            errors_.push_back(std::string("\"") + key + "\" is out of range");
            return fallback;
        }
        if (v.is_number_integer()) return v.get<long long>();
        // A float is taken only when it is a whole number a long long holds (a cast of 4e50
        // would be undefined behaviour).
        if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
            std::fabs(v.get<double>()) < 9e18)
            return static_cast<long long>(v.get<double>());
        errors_.push_back(std::string("\"") + key + "\" must be an integer");
        return fallback;
    }

    double get_double(const char* key, bool required, double fallback = 0.0) {
        if (!has(key)) {
            if (required) errors_.push_back(std::string("missing field \"") + key + "\"");
            return fallback;
        }
        if (!j_[key].is_number()) {
            errors_.push_back(std::string("\"") + key + "\" must be a number");
            return fallback;
        }
        return j_[key].get<double>();
    }

    bool get_bool(const char* key, bool fallback) {
        if (!has(key)) return fallback;
        if (!j_[key].is_boolean()) {
            errors_.push_back(std::string("\"") + key + "\" must be true or false");
            return fallback;
        }
        return j_[key].get<bool>();
    }

    std::string get_string(const char* key, const std::string& fallback) {
        if (!has(key)) return fallback;
        if (!j_[key].is_string()) {
            errors_.push_back(std::string("\"") + key + "\" must be a string");
            return fallback;
        }
        return j_[key].get<std::string>();
    }

  private:
    const json& j_;
    std::vector<std::string>& errors_;
};

// `nested`: a transformers rope_parameters.{main,compress} set, where transformers derives YaRN's
// default attention factor (0.1·ln(factor) + 1, or the mscale ratio) when none is given; the
// release's rope_scaling (and the flat form transformers folds in) means 1.0 unless stated.
RopeParams parse_rope(const json& j, const char* where, double default_theta, bool nested,
                      std::vector<std::string>& errors) {
    RopeParams r;
    Reader rd(j, errors);
    r.theta = rd.get_double("rope_theta", false, default_theta);
    r.partial_rotary_factor = rd.get_double("partial_rotary_factor", false, 0.0);
    std::string type = rd.get_string("rope_type", rd.get_string("type", "default"));
    if (type == "yarn") {
        r.yarn = true;
        r.factor = rd.get_double("factor", true);
        r.original_max_position = rd.get_double("original_max_position_embeddings", true);
        r.beta_fast = rd.get_double("beta_fast", false, 32.0);
        r.beta_slow = rd.get_double("beta_slow", false, 1.0);
        if (r.factor <= 0 || r.original_max_position <= 0)
            errors.push_back(std::string(where) +
                             ": yarn needs factor > 0 and "
                             "original_max_position_embeddings > 0");
        auto mscale_of = [&](double m) {
            return r.factor <= 1 ? 1.0 : 0.1 * m * std::log(r.factor) + 1.0;
        };
        if (rd.has("attention_factor")) {
            r.attention_factor = rd.get_double("attention_factor", true);
        } else if (nested) {
            const double m = rd.get_double("mscale", false, 0.0);
            const double m_all = rd.get_double("mscale_all_dim", false, 0.0);
            r.attention_factor =
                (m != 0 && m_all != 0) ? mscale_of(m) / mscale_of(m_all) : mscale_of(1.0);
        }
    } else if (type != "default") {
        errors.push_back(std::string(where) + ": unsupported rope type \"" + type +
                         "\" (supported: default, yarn)");
    }
    if (!(r.theta > 0)) errors.push_back(std::string(where) + ": rope_theta must be > 0");
    return r;
}

LayerKind kind_from_type(const std::string& t, bool* ok) {
    *ok = true;
    if (t == "sliding_attention") return LayerKind::kSliding;
    if (t == "compressed_sparse_attention") return LayerKind::kCsa;
    if (t == "heavily_compressed_attention") return LayerKind::kHca;
    *ok = false;
    return LayerKind::kSliding;
}

void parse_layers(const json& j, ModelConfig& c, std::vector<std::string>& errors) {
    const int L = c.num_layers;
    if (L <= 0) return;
    c.layers.assign(L, LayerSpec{});
    const bool has_types = j.contains("layer_types") && !j["layer_types"].is_null();
    const bool has_ratios = j.contains("compress_ratios") && !j["compress_ratios"].is_null();
    if (has_types) {
        const json& lt = j["layer_types"];
        if (!lt.is_array() || static_cast<int>(lt.size()) != L) {
            errors.push_back("\"layer_types\" must be a list of num_hidden_layers (" +
                             std::to_string(L) + ") strings");
            return;
        }
        json rates = j.contains("compress_rates") ? j["compress_rates"] : json::object();
        if (!rates.is_object()) {
            errors.push_back("\"compress_rates\" must be an object keyed by layer type");
            rates = json::object();
        }
        for (int l = 0; l < L; ++l) {
            bool ok = lt[l].is_string();
            LayerKind k = ok ? kind_from_type(lt[l].get<std::string>(), &ok) : LayerKind::kSliding;
            if (!ok) {
                errors.push_back("layer_types[" + std::to_string(l) + "] = " + lt[l].dump() +
                                 " is not a known layer type");
                continue;
            }
            c.layers[l].kind = k;
            if (k != LayerKind::kSliding) {
                const std::string key = lt[l].get<std::string>();
                if (!rates.contains(key) || !rates[key].is_number_integer()) {
                    errors.push_back("compress_rates has no integer rate for \"" + key + "\"");
                    continue;
                }
                c.layers[l].compress_rate = rates[key].get<int>();
            }
        }
    } else if (has_ratios) {
        const json& cr = j["compress_ratios"];
        if (!cr.is_array() || static_cast<int>(cr.size()) < L) {
            errors.push_back("\"compress_ratios\" must list at least num_hidden_layers (" +
                             std::to_string(L) + ") rates");
            return;
        }
        for (int l = 0; l < L; ++l) {
            if (!cr[l].is_number_integer() || cr[l].get<int>() < 0) {
                errors.push_back("compress_ratios[" + std::to_string(l) +
                                 "] must be a non-negative integer");
                continue;
            }
            int m = cr[l].get<int>();
            c.layers[l].compress_rate = m;
            // Release convention: 0 = sliding only, 4 = CSA (overlap + indexer), else HCA.
            c.layers[l].kind = m == 0   ? LayerKind::kSliding
                               : m == 4 ? LayerKind::kCsa
                                        : LayerKind::kHca;
        }
        // An entry past the decoder layers is the MTP block's.
        if (static_cast<int>(cr.size()) > L && cr[L].is_number_integer() && cr[L].get<int>() > 0) {
            const int m = cr[L].get<int>();
            c.mtp_spec.compress_rate = m;
            c.mtp_spec.kind = m == 4 ? LayerKind::kCsa : LayerKind::kHca;
        }
    } else {
        errors.push_back(
            "config needs \"layer_types\" (+ \"compress_rates\") or \"compress_ratios\"");
        return;
    }
    for (int l = 0; l < L; ++l) {
        if (c.layers[l].kind != LayerKind::kSliding && c.layers[l].compress_rate <= 0)
            errors.push_back("layer " + std::to_string(l) + ": compress rate must be > 0");
    }

    if (j.contains("mlp_layer_types") && !j["mlp_layer_types"].is_null()) {
        const json& mt = j["mlp_layer_types"];
        if (!mt.is_array() || static_cast<int>(mt.size()) != L) {
            errors.push_back("\"mlp_layer_types\" must be a list of num_hidden_layers strings");
            return;
        }
        for (int l = 0; l < L; ++l) {
            if (mt[l] == "hash_moe") {
                c.layers[l].hash_routed = true;
            } else if (mt[l] != "moe") {
                errors.push_back("mlp_layer_types[" + std::to_string(l) + "] = " + mt[l].dump() +
                                 " is not supported (hash_moe or moe)");
            }
        }
    } else if (j.contains("num_hash_layers") && j["num_hash_layers"].is_number_integer()) {
        int n = j["num_hash_layers"].get<int>();
        if (n < 0 || n > L)
            errors.push_back("\"num_hash_layers\" must be in [0, num_hidden_layers]");
        for (int l = 0; l < L && l < n; ++l) c.layers[l].hash_routed = true;
    } else {
        errors.push_back("config needs \"mlp_layer_types\" or \"num_hash_layers\"");
    }
}

void parse_ropes(const json& j, ModelConfig& c, std::vector<std::string>& errors) {
    Reader r(j, errors);
    const double main_theta = r.get_double("rope_theta", false, 10000.0);
    const double compress_theta = r.get_double("compress_rope_theta", false, main_theta);
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
        (j["rope_parameters"].contains("main") || j["rope_parameters"].contains("compress"))) {
        const json& rp = j["rope_parameters"];
        c.rope_main = rp.contains("main")
                          ? parse_rope(rp["main"], "rope_parameters.main", main_theta, true, errors)
                          : RopeParams{main_theta};
        c.rope_compress = rp.contains("compress")
                              ? parse_rope(rp["compress"], "rope_parameters.compress",
                                           compress_theta, true, errors)
                              : RopeParams{compress_theta};
        return;
    }
    c.rope_main = RopeParams{main_theta};
    // Release style: rope_scaling (or a flat rope_parameters) applies to compressed layers only.
    const char* key = j.contains("rope_scaling") && !j["rope_scaling"].is_null() ? "rope_scaling"
                      : j.contains("rope_parameters") && j["rope_parameters"].is_object()
                          ? "rope_parameters"
                          : nullptr;
    if (key != nullptr) {
        if (!j[key].is_object()) {
            errors.push_back(std::string("\"") + key + "\" must be an object");
            return;
        }
        c.rope_compress = parse_rope(j[key], key, compress_theta, false, errors);
        c.rope_compress.theta = compress_theta;
    } else {
        c.rope_compress = RopeParams{compress_theta};
    }
}

}  // namespace

const char* layer_kind_name(LayerKind k) {
    switch (k) {
        case LayerKind::kSliding:
            return "sliding";
        case LayerKind::kCsa:
            return "csa";
        case LayerKind::kHca:
            return "hca";
    }
    return "?";
}

std::string ModelConfig::summary() const {
    std::ostringstream os;
    os << "D=" << hidden_size << " L=" << num_layers << " H=" << num_heads << " hd=" << head_dim
       << " rd=" << rope_dim << " V=" << vocab_size << " E=" << n_routed_experts << "/k"
       << num_experts_per_tok << " hc=" << hc_mult << " W=" << sliding_window << " layers=";
    for (size_t l = 0; l < layers.size(); ++l) {
        os << (l ? "," : "") << layer_kind_name(layers[l].kind);
        if (layers[l].compress_rate) os << layers[l].compress_rate;
        if (layers[l].hash_routed) os << "#";
    }
    return os.str();
}

Expected<ModelConfig> parse_model_config(const std::string& text, const std::string& label) {
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception& e) {
        return error(label, ": not valid JSON: ", e.what());
    }
    if (!j.is_object()) return error(label, ": not a JSON object");
    std::vector<std::string> errors;
    Reader r(j, errors);
    ModelConfig c;
    const std::string model_type = r.get_string("model_type", "deepseek_v4");
    if (model_type != "deepseek_v4")
        errors.push_back("model_type \"" + model_type + "\" is not deepseek_v4");
    c.vocab_size = r.get_int("vocab_size", true);
    c.hidden_size = r.get_int("hidden_size", true);
    c.num_layers = r.get_int("num_hidden_layers", true);
    c.num_heads = r.get_int("num_attention_heads", true);
    c.head_dim = r.get_int("head_dim", true);
    c.q_lora_rank = r.get_int("q_lora_rank", true);
    c.o_lora_rank = r.get_int("o_lora_rank", true);
    c.o_groups = r.get_int("o_groups", true);
    c.sliding_window = r.get_int("sliding_window", true);
    c.index_n_heads = r.get_int("index_n_heads", false, 0);
    c.index_head_dim = r.get_int("index_head_dim", false, 0);
    c.index_topk = r.get_int("index_topk", false, 0);
    c.n_routed_experts = r.get_int("n_routed_experts", true);
    c.n_shared_experts = r.get_int("n_shared_experts", false, 0);
    c.num_experts_per_tok = r.get_int("num_experts_per_tok", true);
    c.moe_intermediate_size = r.get_int("moe_intermediate_size", true);
    c.routed_scaling_factor = r.get_double("routed_scaling_factor", false, 1.0);
    c.swiglu_limit = r.get_double("swiglu_limit", false, 0.0);
    c.rms_norm_eps = r.get_double("rms_norm_eps", false, 1e-6);
    c.hc_mult = r.get_int("hc_mult", true);
    c.hc_sinkhorn_iters = r.get_int("hc_sinkhorn_iters", true);
    c.hc_eps = r.get_double("hc_eps", true);
    c.num_mtp_layers = r.get_int("num_nextn_predict_layers", false, 0);
    c.max_position_embeddings = r.get_ll("max_position_embeddings", 0);
    c.bos_token_id = r.get_int("bos_token_id", false, 0);
    c.eos_token_id = r.get_int("eos_token_id", false, 1);
    c.tie_word_embeddings = r.get_bool("tie_word_embeddings", false);

    // Rope dimension: qk_rope_head_dim, else head_dim * partial_rotary_factor.
    const int rd_field = r.get_int("qk_rope_head_dim", false, -1);
    const double prf = r.get_double("partial_rotary_factor", false, -1.0);
    const int rd_prf = prf > 0 ? static_cast<int>(std::lround(prf * c.head_dim)) : -1;
    if (rd_field > 0 && rd_prf > 0 && rd_field != rd_prf)
        errors.push_back("qk_rope_head_dim (" + std::to_string(rd_field) +
                         ") disagrees with head_dim * partial_rotary_factor (" +
                         std::to_string(rd_prf) + ")");
    c.rope_dim = rd_field > 0 ? rd_field : rd_prf;
    parse_ropes(j, c, errors);
    // transformers sizes each rope set by its own partial_rotary_factor; dsv4 has one rope dim.
    for (const auto& [set, name] :
         {std::pair{&c.rope_main, "main"}, std::pair{&c.rope_compress, "compress"}}) {
        if (set->partial_rotary_factor <= 0) continue;
        const int rd_set = static_cast<int>(std::lround(set->partial_rotary_factor * c.head_dim));
        if (c.rope_dim <= 0) c.rope_dim = rd_set;
        if (rd_set != c.rope_dim)
            errors.push_back(std::string("rope_parameters.") + name + " gives rope dim " +
                             std::to_string(rd_set) + " but the model's is " +
                             std::to_string(c.rope_dim) + " (one rope dim for all layers)");
    }
    if (c.rope_dim <= 0)
        errors.push_back("missing \"qk_rope_head_dim\" or \"partial_rotary_factor\"");

    // Fields that change the math and that dsv4 implements one way only.
    if (r.get_int("num_key_value_heads", false, 1) != 1)
        errors.push_back("num_key_value_heads must be 1 (DeepSeek-V4 shares one K=V head)");
    const std::string scoring = r.get_string("scoring_func", "sqrtsoftplus");
    if (scoring != "sqrtsoftplus")
        errors.push_back("scoring_func \"" + scoring + "\" is not supported (sqrtsoftplus)");
    const std::string topk_method = r.get_string("topk_method", "noaux_tc");
    if (topk_method != "noaux_tc")
        errors.push_back("topk_method \"" + topk_method + "\" is not supported (noaux_tc)");
    if (!r.get_bool("norm_topk_prob", true))
        errors.push_back("norm_topk_prob=false is not supported");
    if (r.get_int("n_group", false, 1) > 1 || r.get_int("topk_group", false, 1) > 1)
        errors.push_back("group-limited routing (n_group/topk_group > 1) is not supported");
    const std::string act = r.get_string("hidden_act", "silu");
    if (act != "silu") errors.push_back("hidden_act \"" + act + "\" is not supported (silu)");
    if (r.get_bool("attention_bias", false))
        errors.push_back("attention_bias=true is not supported");
    if (r.get_bool("mlp_bias", false)) errors.push_back("mlp_bias=true is not supported");
    if (c.n_shared_experts < 0 || c.n_shared_experts > 1)
        errors.push_back("n_shared_experts must be 0 or 1");

    parse_layers(j, c, errors);

    auto positive = [&](int v, const char* name) {
        if (v <= 0) errors.push_back(std::string(name) + " must be > 0");
    };
    positive(c.vocab_size, "vocab_size");
    positive(c.hidden_size, "hidden_size");
    positive(c.num_layers, "num_hidden_layers");
    positive(c.num_heads, "num_attention_heads");
    positive(c.head_dim, "head_dim");
    positive(c.q_lora_rank, "q_lora_rank");
    positive(c.o_lora_rank, "o_lora_rank");
    positive(c.o_groups, "o_groups");
    positive(c.sliding_window, "sliding_window");
    positive(c.n_routed_experts, "n_routed_experts");
    positive(c.num_experts_per_tok, "num_experts_per_tok");
    positive(c.moe_intermediate_size, "moe_intermediate_size");
    positive(c.hc_mult, "hc_mult");
    positive(c.hc_sinkhorn_iters, "hc_sinkhorn_iters");
    if (c.rope_dim > 0 && (c.rope_dim % 2 != 0 || c.rope_dim > c.head_dim))
        errors.push_back("rope dim " + std::to_string(c.rope_dim) +
                         " must be even and <= head_dim");
    if (c.o_groups > 0 && c.num_heads % c.o_groups != 0)
        errors.push_back("num_attention_heads must be a multiple of o_groups");
    if (c.num_experts_per_tok > c.n_routed_experts)
        errors.push_back("num_experts_per_tok exceeds n_routed_experts");
    if (c.swiglu_limit < 0) errors.push_back("swiglu_limit must be >= 0");
    if (!(c.rms_norm_eps > 0)) errors.push_back("rms_norm_eps must be > 0");
    if (!(c.hc_eps >= 0)) errors.push_back("hc_eps must be >= 0");
    bool any_csa = false;
    for (const auto& l : c.layers) any_csa |= l.kind == LayerKind::kCsa;
    if (any_csa) {
        positive(c.index_n_heads, "index_n_heads");
        positive(c.index_head_dim, "index_head_dim");
        positive(c.index_topk, "index_topk");
        if (c.index_head_dim > 0 && c.rope_dim > c.index_head_dim)
            errors.push_back("index_head_dim must be >= the rope dim");
    }
    if (!errors.empty()) {
        std::string msg = label + ": invalid config: ";
        for (size_t i = 0; i < errors.size(); ++i) msg += (i ? "; " : "") + errors[i];
        return Status::error(msg);
    }
    return c;
}

Expected<ModelConfig> load_model_config(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return error(path, ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_model_config(ss.str(), path);
}

}  // namespace dsv4
