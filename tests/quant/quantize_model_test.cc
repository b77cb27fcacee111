// `dsv4 quantize` end to end on a small synthetic checkpoint written here (transformers-saved
// names, two shards, BF16 / F32 / FP8 / MXFP4 / NVFP4 linears), and on the golden fmt-official
// fixture (tests/data/golden).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dsv4/quantize.h"
#include "formats/nvfp4_quant.h"
#include "formats/quant_weight.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "quantize/names.h"
#include "test_util.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using testing::random_matrix;
using testing::TempDir;

constexpr int64_t kD = 64, kI = 32;

void write_json(const fs::path& p, const Json& j) {
    std::ofstream(p) << j.dump(1);
}

Json read_json(const fs::path& p) {
    std::ifstream in(p);
    return Json::parse(in);
}

// Expected NVFP4 of a weight: the quantizer applied to its exact dequantization.
Nvfp4Tensor expected_nvfp4(const TensorStore& in, const std::string& prefix, int64_t rows,
                           int64_t cols) {
    auto q = bind_quant_weight(in, prefix, rows, cols);
    DSV4_ASSERT(q.has_value(), q.status().message());
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) dequant_row(*q, r, x.data() + r * cols);
    return nvfp4_quantize(x.data(), rows, cols);
}

class QuantizeModelTest : public ::testing::Test {
  protected:
    void SetUp() override { write_model(); }

    void add_f32(testing::AlignedWriter& w, const std::string& name, int64_t rows, int64_t cols,
                 uint32_t seed) {
        w.add_f32(name, {rows, cols}, random_matrix(rows, cols, seed));
    }
    void add_bf16(testing::AlignedWriter& w, const std::string& name, int64_t rows, int64_t cols,
                  uint32_t seed) {
        const auto b = testing::to_bf16(random_matrix(rows, cols, seed));
        w.add(name, DType::kBF16, {rows, cols}, b.data(), b.size() * 2);
    }
    void add_fp8(testing::AlignedWriter& w, const std::string& p, int64_t rows, int64_t cols,
                 uint32_t seed) {
        const auto x = random_matrix(rows, cols, seed);
        const Fp8BlockTensor t = fp8_block_quantize(x.data(), rows, cols);
        w.add(p + ".weight", DType::kF8E4M3, {rows, cols}, t.values.data(), t.values.size());
        w.add(p + ".scale", DType::kF8E8M0, {(rows + 127) / 128, (cols + 127) / 128},
              t.scales.data(), t.scales.size());
    }
    void add_mxfp4(testing::AlignedWriter& w, const std::string& p, int64_t rows, int64_t cols,
                   uint32_t seed) {
        const auto x = random_matrix(rows, cols, seed);
        const Mxfp4Tensor t = mxfp4_quantize(x.data(), rows, cols);
        w.add(p + ".weight", DType::kI8, {rows, cols / 2}, t.packed.data(), t.packed.size());
        w.add(p + ".scale", DType::kF8E8M0, {rows, cols / 32}, t.scales.data(), t.scales.size());
    }
    void add_nvfp4(testing::AlignedWriter& w, const std::string& p, int64_t rows, int64_t cols,
                   uint32_t seed) {
        const auto x = random_matrix(rows, cols, seed);
        const Nvfp4Tensor t = nvfp4_quantize(x.data(), rows, cols);
        w.add(p + ".weight", DType::kU8, {rows, cols / 2}, t.packed.data(), t.packed.size());
        w.add(p + ".weight_scale", DType::kF8E4M3, {rows, cols / 16}, t.scales.data(),
              t.scales.size());
        w.add(p + ".weight_scale_2", DType::kF32, Shape{}, &t.global_scale, 4);
    }

    // Two shards: the root tensors, then layer 0 (plus an MTP expert); HF-style config.
    void write_model() {
        const fs::path in = in_.path();
        testing::AlignedWriter s1;
        add_f32(s1, "model.embed_tokens.weight", 40, kD, 1);
        add_f32(s1, "head.weight", 40, kD, 2);
        s1.add_f32("model.norm.weight", {kD}, std::vector<float>(kD, 1.0f));
        add_f32(s1, "model.hc_head.hc_fn", 2, 2 * kD, 3);
        ASSERT_TRUE(s1.write((in / "model-00001-of-00002.safetensors").string()));

        testing::AlignedWriter s2;
        const std::string l = "model.layers.0.";
        s2.add_f32(l + "attn.norm.weight", {kD}, std::vector<float>(kD, 1.0f));
        add_fp8(s2, l + "attn.wq_a", 48, kD, 4);
        add_f32(s2, l + "attn.wo_b.weight", kD, 40, 5);  // width 40: not a multiple of 16
        add_bf16(s2, l + "attn.compressor.wkv.weight", 2 * kD, kD, 6);
        s2.add_f32(l + "attn.compressor.norm.weight", {kD}, std::vector<float>(kD, 1.0f));
        add_fp8(s2, l + "attn.indexer.wq_b", 64, 48, 7);
        add_bf16(s2, l + "ffn.gate.weight", 4, kD, 8);
        s2.add_f32(l + "ffn.gate.bias", {4}, {0, 0, 0, 0});
        add_fp8(s2, l + "ffn.shared_experts.w1", kI, kD, 9);
        add_mxfp4(s2, l + "ffn.experts.0.w1", kI, kD, 10);
        add_f32(s2, l + "ffn.experts.0.w2.weight", kD, kI, 11);
        add_bf16(s2, l + "ffn.experts.0.w3.weight", kI, kD, 12);
        add_nvfp4(s2, l + "ffn.experts.1.w1", kI, kD, 13);
        add_mxfp4(s2, "mtp.0.ffn.experts.0.w1", kI, kD, 14);
        ASSERT_TRUE(s2.write((in / "model-00002-of-00002.safetensors").string()));

        Json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", Json::object()}};
        for (const auto& n : s1.names())
            index["weight_map"][n] = "model-00001-of-00002.safetensors";
        for (const auto& n : s2.names())
            index["weight_map"][n] = "model-00002-of-00002.safetensors";
        write_json(in / "model.safetensors.index.json", index);

        Json config = {
            {"model_type", "deepseek_v4"},
            {"hidden_size", kD},
            {"head_dim", 64},
            {"partial_rotary_factor", 0.25},
            {"num_hidden_layers", 1},
            {"layer_types", {"compressed_sparse_attention"}},
            {"compress_rates",
             {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}}},
            {"mlp_layer_types", {"moe"}},
            {"rope_parameters",
             {{"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
              {"compress",
               {{"rope_type", "yarn"},
                {"rope_theta", 160000.0},
                {"factor", 16.0},
                {"original_max_position_embeddings", 65536},
                {"beta_fast", 32},
                {"beta_slow", 1}}}}},
        };
        write_json(in / "config.json", config);
        std::ofstream(in / "tokenizer.json") << "{\"model\": {}}";
    }

    Expected<QuantizeSummary> quantize(const QuantizeSelection& select) {
        QuantizeOptions o;
        o.model_dir = in_.path().string();
        o.out_dir = out_.path().string();
        o.select = select;
        o.progress = false;
        return quantize_model(o);
    }

    TensorStore open_in() {
        auto s = TensorStore::open(in_.path().string());
        DSV4_ASSERT(s.has_value(), s.status().message());
        DSV4_ASSERT(s->rename(release_tensor_name).is_ok(), "rename");
        return std::move(s.value());
    }
    TensorStore open_out() {
        auto s = TensorStore::open(out_.path().string());
        DSV4_ASSERT(s.has_value(), s.status().message());
        return std::move(s.value());
    }

    // The output weight is NVFP4 in the ModelOpt layout and equals the quantizer's result on
    // the exactly dequantized input.
    void expect_nvfp4(const TensorStore& in, const TensorStore& out, const std::string& prefix,
                      int64_t rows, int64_t cols) {
        SCOPED_TRACE(prefix);
        auto q = bind_quant_weight(out, prefix, rows, cols);
        ASSERT_TRUE(q.has_value()) << q.status().message();
        ASSERT_EQ(q->format, WeightFormat::kNvfp4);
        ASSERT_NE(out.find(prefix + ".input_scale"), nullptr);
        EXPECT_EQ(out.find(prefix + ".weight_scale_2")->shape.ndim, 0);
        EXPECT_EQ(q->input_scale, 448.0f / 2688.0f);
        EXPECT_EQ(out.find(prefix + ".scale"), nullptr);
        const Nvfp4Tensor want = expected_nvfp4(in, prefix, rows, cols);
        EXPECT_EQ(q->global_scale, want.global_scale);
        const auto* packed = static_cast<const uint8_t*>(q->data);
        const auto* scales = static_cast<const uint8_t*>(q->scale);
        EXPECT_TRUE(std::equal(want.packed.begin(), want.packed.end(), packed));
        EXPECT_TRUE(std::equal(want.scales.begin(), want.scales.end(), scales));
    }

    // Every tensor starts at a multiple of its element size (the files are mapped at page
    // boundaries, so the pointer tells).
    static void expect_aligned(const TensorStore& store) {
        for (const auto& n : store.names()) {
            const TensorInfo* t = store.find(n);
            EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % dtype_size(t->dtype), 0u) << n;
        }
    }

    void expect_format(const TensorStore& out, const std::string& prefix, int64_t rows,
                       int64_t cols, WeightFormat f) {
        auto q = bind_quant_weight(out, prefix, rows, cols);
        ASSERT_TRUE(q.has_value()) << q.status().message();
        EXPECT_EQ(q->format, f) << prefix;
    }

    TempDir in_, out_;
};

TEST_F(QuantizeModelTest, DefaultQuantizesRoutedExpertsOnly) {
    auto r = quantize(QuantizeSelection{});
    ASSERT_TRUE(r.has_value()) << r.status().message();
    EXPECT_EQ(r->quantized, 3);  // experts.0.w1 (MXFP4), w2 (F32), w3 (BF16)
    EXPECT_EQ(r->kept_nvfp4, 1);
    EXPECT_EQ(r->skipped, 0);
    EXPECT_EQ(r->shards, 2);
    EXPECT_TRUE(r->warnings.empty());

    const TensorStore in = open_in(), out = open_out();
    const std::string l = "layers.0.";
    expect_nvfp4(in, out, l + "ffn.experts.0.w1", kI, kD);
    expect_nvfp4(in, out, l + "ffn.experts.0.w2", kD, kI);
    expect_nvfp4(in, out, l + "ffn.experts.0.w3", kI, kD);
    expect_format(out, l + "ffn.experts.1.w1", kI, kD, WeightFormat::kNvfp4);
    expect_format(out, l + "attn.wq_a", 48, kD, WeightFormat::kFp8Block);
    expect_format(out, l + "ffn.shared_experts.w1", kI, kD, WeightFormat::kFp8Block);
    expect_format(out, l + "ffn.gate", 4, kD, WeightFormat::kDense);
    expect_format(out, "mtp.0.ffn.experts.0.w1", kI, kD, WeightFormat::kMxfp4);
    expect_aligned(out);

    // Release-layout names.
    for (const char* n : {"embed.weight", "head.weight", "norm.weight", "hc_head_fn",
                          "layers.0.attn.kv_norm.weight", "layers.0.attn.compressor.norm.weight"})
        EXPECT_NE(out.find(n), nullptr) << n;
    for (const auto& n : out.names()) EXPECT_NE(n.rfind("model.", 0), 0u) << n;
    EXPECT_EQ(out.find("layers.0.attn.norm.weight"), nullptr);

    // Copied tensors are byte-identical.
    const TensorInfo* a = in.find("layers.0.attn.wq_a.weight");
    const TensorInfo* b = out.find("layers.0.attn.wq_a.weight");
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->nbytes, b->nbytes);
    EXPECT_EQ(std::memcmp(a->data, b->data, a->nbytes), 0);

    // One shard per input shard; the index names every tensor.
    const Json index = read_json(out_.path() / "model.safetensors.index.json");
    EXPECT_EQ(index["weight_map"].size(), out.size());
    EXPECT_EQ(index["weight_map"]["embed.weight"], "model-00001-of-00002.safetensors");
    EXPECT_EQ(index["weight_map"]["layers.0.ffn.experts.0.w1.weight_scale"],
              "model-00002-of-00002.safetensors");
    EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), r->bytes_out);
    EXPECT_TRUE(fs::exists(out_.path() / "tokenizer.json"));

    const Json config = read_json(out_.path() / "config.json");
    EXPECT_EQ(config["layer_types"][0], "compressed_sparse_attention");  // kept
    EXPECT_EQ(config["compress_ratios"], Json::array({4}));
    EXPECT_EQ(config["num_hash_layers"], 0);
    EXPECT_EQ(config["qk_rope_head_dim"], 16);
    EXPECT_EQ(config["rope_theta"], 10000.0);
    EXPECT_EQ(config["compress_rope_theta"], 160000.0);
    EXPECT_EQ(config["rope_scaling"]["type"], "yarn");
    EXPECT_EQ(config["rope_scaling"]["factor"], 16.0);
    const Json& q = config["quantization_config"];
    EXPECT_EQ(q["quant_method"], "modelopt");
    EXPECT_EQ(q["quant_algo"], "MIXED_PRECISION");
    EXPECT_EQ(q["moe_quant_algo"], "NVFP4");
    EXPECT_EQ(q["group_size"], 16);
    const std::vector<std::string> ignore = q["ignore"].get<std::vector<std::string>>();
    for (const char* p : {"*.attn.*", "*.shared_experts.*", "*.ffn.gate", "head", "mtp.*"})
        EXPECT_NE(std::find(ignore.begin(), ignore.end(), p), ignore.end()) << p;
    const Json hf = read_json(out_.path() / "hf_quant_config.json");
    EXPECT_EQ(hf["quantization"]["quant_algo"], "NVFP4");
}

TEST_F(QuantizeModelTest, AllQuantizesEveryGroupAndSkipsOddWidths) {
    QuantizeSelection s;
    s.shared_experts = s.attention = s.indexer = s.router = true;
    auto r = quantize(s);
    ASSERT_TRUE(r.has_value()) << r.status().message();
    EXPECT_EQ(r->skipped, 1);
    ASSERT_EQ(r->warnings.size(), 1u);
    EXPECT_NE(r->warnings[0].find("layers.0.attn.wo_b"), std::string::npos) << r->warnings[0];

    const TensorStore in = open_in(), out = open_out();
    const std::string l = "layers.0.";
    expect_nvfp4(in, out, l + "attn.wq_a", 48, kD);
    expect_nvfp4(in, out, l + "attn.compressor.wkv", 2 * kD, kD);
    expect_nvfp4(in, out, l + "attn.indexer.wq_b", 64, 48);
    expect_nvfp4(in, out, l + "ffn.gate", 4, kD);
    expect_nvfp4(in, out, l + "ffn.shared_experts.w1", kI, kD);
    expect_format(out, l + "attn.wo_b", kD, 40, WeightFormat::kDense);
    expect_format(out, "mtp.0.ffn.experts.0.w1", kI, kD, WeightFormat::kMxfp4);
    EXPECT_NE(out.find(l + "ffn.gate.bias"), nullptr);
    expect_aligned(out);

    const Json q = read_json(out_.path() / "config.json")["quantization_config"];
    EXPECT_EQ(q["quant_algo"], "MIXED_PRECISION");  // wo_b stayed F32
    const auto ignore = q["ignore"].get<std::vector<std::string>>();
    EXPECT_NE(std::find(ignore.begin(), ignore.end(), "layers.0.attn.wo_b"), ignore.end());
    EXPECT_EQ(std::find(ignore.begin(), ignore.end(), "*.attn.*"), ignore.end());
}

TEST_F(QuantizeModelTest, MtpFlagReachesTheMtpBlock) {
    QuantizeSelection s;
    s.mtp = true;
    auto r = quantize(s);
    ASSERT_TRUE(r.has_value()) << r.status().message();
    const TensorStore in = open_in(), out = open_out();
    expect_nvfp4(in, out, "mtp.0.ffn.experts.0.w1", kI, kD);
}

TEST_F(QuantizeModelTest, CorruptInputFailsNamingTheTensorAndWritesNothing) {
    // Drop the MXFP4 scale of an expert: its weight can no longer be read.
    const fs::path shard = in_.path() / "model-00002-of-00002.safetensors";
    auto file = SafetensorsFile::open(shard.string());
    ASSERT_TRUE(file.has_value());
    testing::AlignedWriter w;
    for (const auto& t : (*file)->tensors())
        if (t.name != "model.layers.0.ffn.experts.0.w1.scale")
            w.add(t.name, t.dtype, t.shape, t.data, t.nbytes);
    file.value().reset();
    ASSERT_TRUE(w.write(shard.string()));
    Json index = read_json(in_.path() / "model.safetensors.index.json");
    index["weight_map"].erase("model.layers.0.ffn.experts.0.w1.scale");
    write_json(in_.path() / "model.safetensors.index.json", index);

    auto r = quantize(QuantizeSelection{});
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("ffn.experts.0.w1"), std::string::npos)
        << r.status().message();
    EXPECT_FALSE(fs::exists(out_.path() / "model.safetensors.index.json"));
}

TEST_F(QuantizeModelTest, RefusesToOverwriteTheInput) {
    QuantizeOptions o;
    o.model_dir = in_.path().string();
    o.out_dir = in_.path().string();
    o.progress = false;
    auto r = quantize_model(o);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("differ"), std::string::npos);
}

TEST_F(QuantizeModelTest, MissingInputFolder) {
    QuantizeOptions o;
    o.model_dir = (in_.path() / "nope").string();
    o.out_dir = out_.path().string();
    o.progress = false;
    auto r = quantize_model(o);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("nope"), std::string::npos);
}

TEST(ReleaseNames, MapTransformersSavedNames) {
    using dsv4::release_tensor_name;
    EXPECT_EQ(release_tensor_name("model.embed_tokens.weight"), "embed.weight");
    EXPECT_EQ(release_tensor_name("lm_head.weight"), "head.weight");
    EXPECT_EQ(release_tensor_name("head.weight"), "head.weight");
    EXPECT_EQ(release_tensor_name("model.norm.weight"), "norm.weight");
    EXPECT_EQ(release_tensor_name("model.hc_head.hc_fn"), "hc_head_fn");
    EXPECT_EQ(release_tensor_name("model.hc_head.hc_scale"), "hc_head_scale");
    EXPECT_EQ(release_tensor_name("model.layers.12.attn.norm.weight"),
              "layers.12.attn.kv_norm.weight");
    EXPECT_EQ(release_tensor_name("model.layers.1.attn.compressor.norm.weight"),
              "layers.1.attn.compressor.norm.weight");
    EXPECT_EQ(release_tensor_name("model.layers.1.attn.indexer.compressor.norm.weight"),
              "layers.1.attn.indexer.compressor.norm.weight");
    EXPECT_EQ(release_tensor_name("layers.3.ffn.experts.7.w2.scale"),
              "layers.3.ffn.experts.7.w2.scale");
}

TEST(ReleaseNames, ClassifyLinears) {
    using quant::classify_linear;
    using quant::LinearGroup;
    EXPECT_EQ(classify_linear("layers.3.ffn.experts.255.w2").group, LinearGroup::kRoutedExpert);
    EXPECT_EQ(classify_linear("layers.3.ffn.shared_experts.w1").group, LinearGroup::kSharedExpert);
    EXPECT_EQ(classify_linear("layers.3.attn.wo_a").group, LinearGroup::kAttention);
    EXPECT_EQ(classify_linear("layers.3.attn.compressor.wgate").group, LinearGroup::kAttention);
    EXPECT_EQ(classify_linear("layers.3.attn.indexer.weights_proj").group, LinearGroup::kIndexer);
    EXPECT_EQ(classify_linear("layers.3.attn.indexer.compressor.wkv").group, LinearGroup::kIndexer);
    EXPECT_EQ(classify_linear("layers.3.ffn.gate").group, LinearGroup::kRouter);
    EXPECT_EQ(classify_linear("layers.3.attn.q_norm").group, LinearGroup::kNone);
    EXPECT_EQ(classify_linear("layers.3.ffn.experts.1.w4").group, LinearGroup::kNone);
    EXPECT_EQ(classify_linear("embed").group, LinearGroup::kNone);
    EXPECT_EQ(classify_linear("head").group, LinearGroup::kNone);
    EXPECT_EQ(classify_linear("layersX.3.attn.wq_a").group, LinearGroup::kNone);
    const auto m = classify_linear("mtp.0.ffn.experts.3.w1");
    EXPECT_EQ(m.group, LinearGroup::kRoutedExpert);
    EXPECT_TRUE(m.mtp);
    EXPECT_EQ(classify_linear("mtp.0.e_proj").group, LinearGroup::kNone);
}

// The release-layout golden fixture: every routed expert of the decoder layers becomes NVFP4,
// the rest stays byte-identical.
TEST(QuantizeGolden, FmtOfficialExperts) {
    const fs::path model = fs::path(DSV4_GOLDEN_DIR) / "fmt-official";
    ASSERT_TRUE(fs::exists(model / "config.json")) << "missing fixture " << model;
    TempDir out;
    QuantizeOptions o;
    o.model_dir = model.string();
    o.out_dir = out.path().string();
    o.progress = false;
    auto r = quantize_model(o);
    ASSERT_TRUE(r.has_value()) << r.status().message();
    const Json config = read_json(model / "config.json");
    const int64_t layers = config["num_hidden_layers"], experts = config["n_routed_experts"];
    EXPECT_EQ(r->quantized, layers * experts * 3);
    auto store = TensorStore::open(out.path().string());
    ASSERT_TRUE(store.has_value()) << store.status().message();
    const int64_t D = config["hidden_size"], I = config["moe_intermediate_size"];
    for (int64_t l = 0; l < layers; ++l) {
        const std::string p = "layers." + std::to_string(l) + ".ffn.experts.0.";
        auto w2 = bind_quant_weight(*store, p + "w2", D, I);
        ASSERT_TRUE(w2.has_value()) << w2.status().message();
        EXPECT_EQ(w2->format, WeightFormat::kNvfp4);
    }
}

}  // namespace
}  // namespace dsv4
