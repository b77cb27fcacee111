// Config parsing: transformers-style and release-style golden configs, and named errors.
#include "model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/backend_fit.h"

namespace dsv4 {
namespace {

using json = nlohmann::json;

std::string golden(const std::string& name) {
    return std::string(DSV4_GOLDEN_MODELS_DIR) + "/" + name + "/config.json";
}

ModelConfig load_ok(const std::string& name) {
    auto c = load_model_config(golden(name));
    EXPECT_TRUE(c.has_value()) << name << ": " << (c ? "" : c.status().message());
    return c ? *c : ModelConfig{};
}

std::string kinds(const ModelConfig& c) {
    std::string s;
    for (const auto& l : c.layers) {
        s += s.empty() ? "" : ",";
        s += layer_kind_name(l.kind);
        if (l.compress_rate) s += std::to_string(l.compress_rate);
        if (l.hash_routed) s += "#";
    }
    return s;
}

TEST(Config, TinyMixTransformersStyle) {
    const ModelConfig c = load_ok("tiny-mix");
    EXPECT_EQ(kinds(c), "sliding#,csa4,hca16,csa4");
    EXPECT_EQ(c.layers[1].coff(), 2);
    EXPECT_EQ(c.layers[2].coff(), 1);
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.num_heads, 4);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_EQ(c.rope_dim, 8);
    EXPECT_EQ(c.sliding_window, 8);
    EXPECT_EQ(c.hc_mult, 4);
    EXPECT_EQ(c.hc_mix(), 24);
    EXPECT_EQ(c.hc_sinkhorn_iters, 20);
    EXPECT_EQ(c.index_topk, 3);
    EXPECT_EQ(c.num_experts_per_tok, 2);
    EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.5);
    EXPECT_DOUBLE_EQ(c.swiglu_limit, 1.5);
    EXPECT_EQ(c.num_mtp_layers, 1);
    EXPECT_DOUBLE_EQ(c.rope_main.theta, 10000.0);
    EXPECT_FALSE(c.rope_main.yarn);
    EXPECT_DOUBLE_EQ(c.rope_compress.theta, 160000.0);
    EXPECT_FALSE(c.rope_compress.yarn);
    EXPECT_EQ(&c.rope_for(c.layers[0]), &c.rope_main);
    EXPECT_EQ(&c.rope_for(c.layers[2]), &c.rope_compress);
}

TEST(Config, TinyYarnTinyEpsSmallRates) {
    const ModelConfig y = load_ok("tiny-yarn");
    EXPECT_EQ(kinds(y), "hca16#,csa4,csa4,sliding");
    EXPECT_TRUE(y.rope_compress.yarn);
    EXPECT_DOUBLE_EQ(y.rope_compress.factor, 16.0);
    EXPECT_DOUBLE_EQ(y.rope_compress.original_max_position, 256.0);
    EXPECT_DOUBLE_EQ(y.rope_compress.beta_fast, 32.0);
    EXPECT_DOUBLE_EQ(y.rope_compress.beta_slow, 1.0);
    EXPECT_FALSE(y.rope_main.yarn);
    EXPECT_EQ(y.hc_mult, 2);
    EXPECT_EQ(y.o_groups, 4);

    const ModelConfig e = load_ok("tiny-eps");
    EXPECT_EQ(kinds(e), "csa4#,sliding,hca16,csa4");
    EXPECT_DOUBLE_EQ(e.hc_eps, 0.02);
    EXPECT_EQ(e.hc_sinkhorn_iters, 3);
    EXPECT_DOUBLE_EQ(e.rms_norm_eps, 1e-3);
    EXPECT_EQ(e.hc_mult, 3);

    const ModelConfig s = load_ok("small-rates");
    EXPECT_EQ(kinds(s), "hca128#,csa4,sliding");
    EXPECT_EQ(s.rope_dim, 16);
    EXPECT_TRUE(s.rope_compress.yarn);
    EXPECT_DOUBLE_EQ(s.rope_compress.original_max_position, 65536.0);
}

TEST(Config, ReleaseStyleCompressRatiosHashLayersRopeScaling) {
    for (const char* name : {"fmt-official", "fmt-nvfp4"}) {
        SCOPED_TRACE(name);
        const ModelConfig c = load_ok(name);
        EXPECT_EQ(kinds(c), "hca128#,csa4,sliding");
        EXPECT_EQ(c.rope_dim, 16);
        EXPECT_EQ(c.head_dim, 64);
        EXPECT_EQ(c.n_shared_experts, 1);
        EXPECT_EQ(c.num_mtp_layers, 0);
        EXPECT_DOUBLE_EQ(c.rope_main.theta, 10000.0);
        EXPECT_FALSE(c.rope_main.yarn);
        EXPECT_DOUBLE_EQ(c.rope_compress.theta, 160000.0);
        EXPECT_TRUE(c.rope_compress.yarn);
        EXPECT_DOUBLE_EQ(c.rope_compress.factor, 16.0);
        EXPECT_DOUBLE_EQ(c.rope_compress.original_max_position, 65536.0);
        EXPECT_EQ(c.max_position_embeddings, 1048576);
    }
}

// transformers' attention_factor: explicit values are kept; a nested YaRN set without one gets
// YaRN's default 0.1·ln(factor) + 1 (what transformers computes); release rope_scaling means 1.
TEST(Config, RopeAttentionFactor) {
    EXPECT_DOUBLE_EQ(load_ok("small-rates").rope_compress.attention_factor, 1.0);
    EXPECT_DOUBLE_EQ(load_ok("fmt-official").rope_compress.attention_factor, 1.0);
    const ModelConfig h = load_ok("x-hash2");
    EXPECT_NEAR(h.rope_compress.attention_factor, 0.1 * std::log(8.0) + 1.0, 1e-12);
    EXPECT_DOUBLE_EQ(h.rope_main.attention_factor, 1.0);
    EXPECT_DOUBLE_EQ(h.rope_main.theta, 5000.0);
    EXPECT_DOUBLE_EQ(h.rope_compress.theta, 80000.0);
}

// The tiny-mix config as JSON, to be broken one field at a time.
json base_json() {
    std::ifstream in(golden("tiny-mix"));
    std::stringstream ss;
    ss << in.rdbuf();
    return json::parse(ss.str());
}

// Parses `j` and returns the error message ("" when it parsed).
std::string error_of(const json& j) {
    auto c = parse_model_config(j.dump(), "cfg.json");
    return c ? std::string() : c.status().message();
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

TEST(ConfigErrors, BaseParses) {
    EXPECT_EQ(error_of(base_json()), "");
}

TEST(ConfigErrors, MissingField) {
    json j = base_json();
    j.erase("hidden_size");
    const std::string m = error_of(j);
    EXPECT_HAS(m, "cfg.json");
    EXPECT_HAS(m, "missing field \"hidden_size\"");
}

TEST(ConfigErrors, WrongType) {
    json j = base_json();
    j["num_attention_heads"] = "4";
    EXPECT_HAS(error_of(j), "\"num_attention_heads\" must be an integer");
    j = base_json();
    j["hc_eps"] = "small";
    EXPECT_HAS(error_of(j), "\"hc_eps\" must be a number");
}

TEST(ConfigErrors, OutOfRangeOrFractionalLength) {
    // Found by the config fuzzer: a huge float here used to be cast to long long (undefined).
    json j = base_json();
    j["max_position_embeddings"] = 4.04444e50;
    EXPECT_HAS(error_of(j), "\"max_position_embeddings\" must be an integer");
    j["max_position_embeddings"] = 4096.5;
    EXPECT_HAS(error_of(j), "\"max_position_embeddings\" must be an integer");
    j["max_position_embeddings"] = 18446744073709551615ull;
    EXPECT_HAS(error_of(j), "\"max_position_embeddings\" is out of range");
    j["max_position_embeddings"] = 8192.0;
    EXPECT_EQ(error_of(j), "");
}

TEST(ConfigErrors, UnknownLayerType) {
    json j = base_json();
    j["layer_types"][2] = "full_attention";
    const std::string m = error_of(j);
    EXPECT_HAS(m, "layer_types[2]");
    EXPECT_HAS(m, "full_attention");
}

TEST(ConfigErrors, TwoKvHeads) {
    json j = base_json();
    j["num_key_value_heads"] = 2;
    EXPECT_HAS(error_of(j), "num_key_value_heads must be 1");
}

TEST(ConfigErrors, SoftmaxScoring) {
    json j = base_json();
    j["scoring_func"] = "softmax";
    const std::string m = error_of(j);
    EXPECT_HAS(m, "scoring_func");
    EXPECT_HAS(m, "softmax");
}

TEST(ConfigErrors, NotJson) {
    auto c = parse_model_config("{\"vocab_size\": 12,", "broken.json");
    ASSERT_FALSE(c.has_value());
    EXPECT_HAS(c.status().message(), "broken.json");
    EXPECT_HAS(c.status().message(), "not valid JSON");
    auto arr = parse_model_config("[1, 2]", "arr.json");
    ASSERT_FALSE(arr.has_value());
    EXPECT_HAS(arr.status().message(), "not a JSON object");
}

TEST(ConfigErrors, OddRopeDim) {
    json j = base_json();
    j.erase("partial_rotary_factor");
    j["qk_rope_head_dim"] = 7;
    EXPECT_HAS(error_of(j), "rope dim 7 must be even");
    // Disagreeing rope-dim sources are named too.
    j = base_json();
    j["qk_rope_head_dim"] = 6;
    EXPECT_HAS(error_of(j), "qk_rope_head_dim (6) disagrees");
}

TEST(ConfigErrors, RopeAndLayerProblems) {
    json j = base_json();
    j["rope_parameters"]["compress"]["rope_type"] = "dynamic";
    EXPECT_HAS(error_of(j), "unsupported rope type \"dynamic\"");
    j = base_json();
    j["rope_parameters"]["main"] = j["rope_parameters"]["compress"];
    j["rope_parameters"]["main"]["rope_type"] = "yarn";
    j["rope_parameters"]["main"]["factor"] = 4.0;
    j["rope_parameters"]["main"]["original_max_position_embeddings"] = 256;
    {
        // YaRN on the main set is unusual but transformers applies it; so does dsv4.
        auto c = parse_model_config(j.dump(), "cfg.json");
        ASSERT_TRUE(c.has_value()) << c.status().message();
        EXPECT_TRUE(c->rope_main.yarn);
        EXPECT_DOUBLE_EQ(c->rope_main.factor, 4.0);
    }
    j = base_json();
    j["rope_parameters"]["main"]["partial_rotary_factor"] = 0.5;
    EXPECT_HAS(error_of(j), "rope_parameters.main gives rope dim 16");
    j = base_json();
    j["compress_rates"].erase("heavily_compressed_attention");
    EXPECT_HAS(error_of(j), "heavily_compressed_attention");
    j = base_json();
    j["mlp_layer_types"][1] = "dense";
    EXPECT_HAS(error_of(j), "mlp_layer_types[1]");
}

TEST(ConfigErrors, AllProblemsListedTogether) {
    json j = base_json();
    j.erase("vocab_size");
    j["num_key_value_heads"] = 2;
    j["scoring_func"] = "softmax";
    const std::string m = error_of(j);
    EXPECT_HAS(m, "vocab_size");
    EXPECT_HAS(m, "num_key_value_heads");
    EXPECT_HAS(m, "scoring_func");
}

TEST(ConfigErrors, MissingFile) {
    auto c = load_model_config("/nonexistent/dir/config.json");
    ASSERT_FALSE(c.has_value());
    EXPECT_HAS(c.status().message(), "/nonexistent/dir/config.json");
}

// A backend's kernel limits (ShapeLimits, checked by Engine::create): the first field
// beyond one is named; typed cache rows bound the widths the compressor encodes; no limits (the
// CPU backend) and V4's shapes under the CUDA kernels' pass.
TEST(BackendFit, NamesTheFirstShapeBeyondTheLimits) {
    const ModelConfig c = load_ok("tiny-mix");
    ASSERT_GT(c.head_dim, 8);
    const CacheType f32 = CacheType::kF32, fp8 = CacheType::kFp8;
    EXPECT_EQ(shape_beyond_limits(c, fp8, fp8, ShapeLimits{}), "");
    ShapeLimits l;
    l.head_dim = c.head_dim - 1;
    EXPECT_NE(shape_beyond_limits(c, f32, f32, l).find("head_dim " + std::to_string(c.head_dim)),
              std::string::npos);
    l = {};
    l.typed_row_width = c.head_dim - 1;
    EXPECT_EQ(shape_beyond_limits(c, f32, f32, l), "");
    EXPECT_NE(shape_beyond_limits(c, fp8, f32, l).find("typed K=V rows"), std::string::npos);
    l = {};
    l.hc_streams = c.hc_mult - 1;
    EXPECT_NE(shape_beyond_limits(c, f32, f32, l).find("hc_mult"), std::string::npos);
    l = {};
    l.experts_per_token = c.num_experts_per_tok - 1;
    EXPECT_NE(shape_beyond_limits(c, f32, f32, l).find("num_experts_per_tok"), std::string::npos);
    l = {};
    l.routed_experts = c.n_routed_experts - 1;
    EXPECT_NE(shape_beyond_limits(c, f32, f32, l).find("n_routed_experts"), std::string::npos);
    // Typed indexer keys wider than a typed row, on a model with CSA layers.
    bool csa = false;
    for (const auto& layer : c.layers) csa |= layer.kind == LayerKind::kCsa;
    if (csa) {
        l = {};
        l.typed_row_width = c.index_head_dim - 1;
        EXPECT_NE(shape_beyond_limits(c, f32, fp8, l).find("index_head_dim"), std::string::npos);
        EXPECT_EQ(shape_beyond_limits(c, f32, f32, l).find("index_head_dim"), std::string::npos);
    }
}

}  // namespace
}  // namespace dsv4
