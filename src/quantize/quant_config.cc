#include "quantize/quant_config.h"

namespace dsv4::quant {

namespace {

using Json = nlohmann::ordered_json;

bool all_groups(const QuantizeSelection& s) {
    return s.routed_experts && s.shared_experts && s.attention && s.indexer && s.router;
}

// compress_ratios from layer_types + compress_rates (sliding layers have ratio 0).
Status add_compress_ratios(const Json& in, Json& out) {
    const Json& types = in["layer_types"];
    const Json& rates = in["compress_rates"];
    if (!types.is_array() || !rates.is_object())
        return error("config.json: need `compress_ratios`, or `layer_types` with `compress_rates`");
    Json ratios = Json::array();
    for (const Json& t : types) {
        if (!t.is_string()) return error("config.json: `layer_types` holds a non-string");
        const std::string kind = t.get<std::string>();
        if (kind == "sliding_attention") {
            ratios.push_back(0);
        } else if (rates.contains(kind) && rates[kind].is_number_integer()) {
            ratios.push_back(rates[kind].get<int64_t>());
        } else {
            return error("config.json: layer type '", kind, "' has no entry in `compress_rates`");
        }
    }
    out["compress_ratios"] = ratios;
    return Status::ok();
}

Status add_release_fields(const Json& in, Json& out) {
    if (!in.contains("compress_ratios") && in.contains("layer_types"))
        DSV4_RETURN_IF_ERROR(add_compress_ratios(in, out));
    if (!in.contains("num_hash_layers") && in.contains("mlp_layer_types")) {
        if (!in["mlp_layer_types"].is_array())
            return error("config.json: `mlp_layer_types` is not an array");
        int64_t n = 0;
        for (const Json& t : in["mlp_layer_types"]) n += t.is_string() && t == "hash_moe";
        out["num_hash_layers"] = n;
    }
    if (!in.contains("qk_rope_head_dim") && in.contains("head_dim") &&
        in.contains("partial_rotary_factor") && in["head_dim"].is_number() &&
        in["partial_rotary_factor"].is_number()) {
        out["qk_rope_head_dim"] = static_cast<int64_t>(
            in["head_dim"].get<double>() * in["partial_rotary_factor"].get<double>() + 0.5);
    }
    const Json* rp = in.contains("rope_parameters") ? &in["rope_parameters"] : nullptr;
    if (rp == nullptr || !rp->is_object()) return Status::ok();
    if (!in.contains("rope_theta") && rp->contains("main") && (*rp)["main"].contains("rope_theta"))
        out["rope_theta"] = (*rp)["main"]["rope_theta"];
    if (!rp->contains("compress") || !(*rp)["compress"].is_object()) return Status::ok();
    const Json& c = (*rp)["compress"];
    if (!in.contains("compress_rope_theta") && c.contains("rope_theta"))
        out["compress_rope_theta"] = c["rope_theta"];
    // Release configs carry YaRN as `rope_scaling`; it applies to the compressed layers only.
    if (!in.contains("rope_scaling") && c.value("rope_type", "") == "yarn") {
        Json y = Json::object();
        y["type"] = "yarn";
        for (const char* k :
             {"factor", "original_max_position_embeddings", "beta_fast", "beta_slow"})
            if (c.contains(k)) y[k] = c[k];
        out["rope_scaling"] = y;
    }
    return Status::ok();
}

}  // namespace

std::vector<std::string> ignore_patterns(const QuantizeSelection& s,
                                         const std::vector<std::string>& skipped) {
    std::vector<std::string> out;
    if (!s.attention && !s.indexer) {
        out.push_back("*.attn.*");
    } else {
        if (!s.attention) {
            for (const char* m : {"wq_a", "wq_b", "wkv", "wo_a", "wo_b", "compressor.*"})
                out.push_back(std::string("*.attn.") + m);
        }
        if (!s.indexer) out.push_back("*.attn.indexer.*");
    }
    if (!s.shared_experts) out.push_back("*.shared_experts.*");
    if (!s.routed_experts) out.push_back("*.ffn.experts.*");
    if (!s.router) out.push_back("*.ffn.gate");
    out.push_back("head");
    if (s.mtp) {
        out.push_back("mtp.*.e_proj");
        out.push_back("mtp.*.h_proj");
    } else {
        out.push_back("mtp.*");
    }
    out.insert(out.end(), skipped.begin(), skipped.end());
    return out;
}

Expected<nlohmann::ordered_json> output_config(const nlohmann::ordered_json& in,
                                               const QuantizeSelection& select,
                                               const std::vector<std::string>& skipped) {
    if (!in.is_object()) return error("config.json is not a JSON object");
    Json out = in;
    DSV4_RETURN_IF_ERROR(add_release_fields(in, out));
    Json q = Json::object();
    q["quant_method"] = "modelopt";
    q["quant_algo"] = all_groups(select) && skipped.empty() ? "NVFP4" : "MIXED_PRECISION";
    if (select.routed_experts) q["moe_quant_algo"] = "NVFP4";
    q["group_size"] = 16;
    q["ignore"] = ignore_patterns(select, skipped);
    // How the linears that stay as they were are stored (the release's FP8 description).
    if (in.contains("quantization_config") && in["quantization_config"].is_object() &&
        in["quantization_config"].value("quant_method", "") != "modelopt")
        q["source_quantization_config"] = in["quantization_config"];
    q["producer"] = {{"name", "dsv4 quantize"}};
    out["quantization_config"] = q;
    return out;
}

nlohmann::ordered_json hf_quant_config(const QuantizeSelection& select,
                                       const std::vector<std::string>& skipped) {
    Json q = Json::object();
    q["quant_algo"] = "NVFP4";
    q["kv_cache_quant_algo"] = nullptr;
    q["group_size"] = 16;
    q["exclude_modules"] = ignore_patterns(select, skipped);
    return Json{{"producer", {{"name", "dsv4 quantize"}}}, {"quantization", q}};
}

}  // namespace dsv4::quant
