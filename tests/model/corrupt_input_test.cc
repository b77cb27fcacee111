// Bad input gets a one-line error naming the problem and a non-zero exit, never a crash:
// truncated or inconsistent safetensors, wrong dtypes/shapes, missing or unexpected tensors,
// bad configs. Each case mutates a copy of the tiny-mix fixture.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "dsv4/engine.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_file(const fs::path& p, const std::string& s) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << s;
}

class CorruptInput : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("dsv4_corrupt_" + std::to_string(::getpid()) + "_" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        const fs::path src = fs::path(DSV4_GOLDEN_DIR) / "tiny-mix";
        for (const char* f : {"config.json", "model.safetensors", "expected.safetensors"}) {
            fs::copy_file(src / f, dir_ / f);
            fs::permissions(dir_ / f, fs::perms::owner_write, fs::perm_options::add);
        }
    }
    void TearDown() override { fs::remove_all(dir_); }

    // Rewrites the weights file's JSON header through `edit`, keeping the data bytes.
    void edit_header(const std::function<void(json&)>& edit) {
        const std::string bytes = read_file(dir_ / "model.safetensors");
        uint64_t n = 0;
        for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
        json h = json::parse(bytes.substr(8, n));
        edit(h);
        std::string hs = h.dump();
        std::string out(8, '\0');
        for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((hs.size() >> (8 * i)) & 0xff);
        write_file(dir_ / "model.safetensors", out + hs + bytes.substr(8 + n));
    }

    void edit_config(const std::function<void(json&)>& edit) {
        json c = json::parse(read_file(dir_ / "config.json"));
        edit(c);
        write_file(dir_ / "config.json", c.dump());
    }

    // Loads through the API (the message must mention `needle`) and through the CLI (exit
    // code 1 or 2 by status, not by signal; exactly one line on stderr).
    void expect_error(const std::string& needle) {
        EngineOptions o;
        o.model_dir = dir_.string();
        auto e = Engine::create(o);
        ASSERT_FALSE(e.has_value()) << "loaded a corrupt model";
        EXPECT_NE(e.status().message().find(needle), std::string::npos) << e.status().message();
        EXPECT_EQ(e.status().message().find('\n'), std::string::npos);

        const std::string cmd = std::string(DSV4_CLI_PATH) + " check --model " + dir_.string() +
                                " 2>" + (dir_ / "stderr.txt").string() + " >/dev/null";
        const int rc = std::system(cmd.c_str());
        ASSERT_TRUE(WIFEXITED(rc)) << "dsv4 died by a signal";
        EXPECT_NE(WEXITSTATUS(rc), 0);
        const std::string err = read_file(dir_ / "stderr.txt");
        EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
        EXPECT_NE(err.find(needle), std::string::npos) << err;
    }

    // Runs the CLI with `args`; returns the exit code (-1 when killed by a signal) and stderr.
    int run_cli(const std::string& args, std::string* err) {
        const std::string cmd = std::string(DSV4_CLI_PATH) + " " + args + " 2>" +
                                (dir_ / "stderr.txt").string() + " >/dev/null";
        const int rc = std::system(cmd.c_str());
        *err = read_file(dir_ / "stderr.txt");
        return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    }

    fs::path dir_;
};

TEST_F(CorruptInput, NanWeightsStopGenerationWithAnError) {
    // NaN in the final norm: every logit is NaN; generation must stop at once, naming where.
    const std::string bytes = read_file(dir_ / "model.safetensors");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
    const json h = json::parse(bytes.substr(8, n));
    ASSERT_EQ(h["model.norm.weight"]["dtype"], "F32");
    std::string out = bytes;
    const size_t at = 8 + n + h["model.norm.weight"]["data_offsets"][0].get<size_t>();
    const uint32_t nan_bits = 0x7fc00000u;
    for (int i = 0; i < 4; ++i) out[at + i] = static_cast<char>((nan_bits >> (8 * i)) & 0xff);
    write_file(dir_ / "model.safetensors", out);
    std::string err;
    EXPECT_EQ(run_cli("generate --model " + dir_.string() + " --prompt-ids 1,2,3", &err), 1);
    EXPECT_NE(err.find("non-finite logits at position 2 (generated token 1)"), std::string::npos)
        << err;
}

TEST_F(CorruptInput, QuantizeRefusesANonEmptyOutputUnlessForced) {
    const fs::path out = dir_ / "out";
    fs::create_directories(out);
    write_file(out / "stale.safetensors", "from an earlier run");
    std::string err;
    const std::string args = "quantize --no-progress --model " + dir_.string() + " --out " +
                             out.string();
    EXPECT_EQ(run_cli(args, &err), 1);
    EXPECT_NE(err.find("not empty (--force replaces it)"), std::string::npos) << err;
    EXPECT_TRUE(fs::exists(out / "stale.safetensors"));
    EXPECT_EQ(run_cli(args + " --force", &err), 0) << err;
    EXPECT_FALSE(fs::exists(out / "stale.safetensors"));  // replaced whole, no stale shards
    EXPECT_TRUE(fs::exists(out / "config.json"));
}

TEST_F(CorruptInput, QuantizeChecksShapesAndLeavesNothingBehind) {
    // A tensor whose shape does not match config.json: refused before anything is written.
    edit_header([](json& h) { h["model.norm.weight"]["shape"] = {32, 2}; });
    std::string err;
    const fs::path out = dir_ / "out";
    EXPECT_EQ(run_cli("quantize --no-progress --model " + dir_.string() + " --out " + out.string(),
                      &err),
              1);
    EXPECT_NE(err.find("norm.weight"), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(out));
    for (const auto& e : fs::directory_iterator(dir_))
        EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
}

TEST_F(CorruptInput, TruncatedFile) {
    const std::string bytes = read_file(dir_ / "model.safetensors");
    write_file(dir_ / "model.safetensors", bytes.substr(0, bytes.size() / 2));
    expect_error("past the end of the data");
}

TEST_F(CorruptInput, TooShortForHeader) {
    write_file(dir_ / "model.safetensors", "abc");
    expect_error("too short");
}

TEST_F(CorruptInput, HeaderLengthPastEnd) {
    std::string bytes = read_file(dir_ / "model.safetensors");
    bytes[5] = 0x01;  // header length ~1 TB
    write_file(dir_ / "model.safetensors", bytes);
    expect_error("header length");
}

TEST_F(CorruptInput, HeaderNotJson) {
    std::string bytes = read_file(dir_ / "model.safetensors");
    bytes[8] = '#';
    write_file(dir_ / "model.safetensors", bytes);
    expect_error("not valid JSON");
}

TEST_F(CorruptInput, OffsetsPointPastEnd) {
    edit_header([](json& h) { h["model.norm.weight"]["data_offsets"][1] = 1ull << 40; });
    expect_error("model.norm.weight");
}

TEST_F(CorruptInput, ByteRangeDisagreesWithShape) {
    edit_header([](json& h) { h["model.norm.weight"]["shape"] = {7}; });
    expect_error("model.norm.weight");
}

TEST_F(CorruptInput, OverlappingTensors) {
    edit_header([](json& h) {
        h["model.layers.0.attn.attn_sink"]["data_offsets"] =
            h["model.layers.1.attn.attn_sink"]["data_offsets"];
    });
    expect_error("overlap");
}

TEST_F(CorruptInput, WrongDtype) {
    edit_header([](json& h) { h["model.layers.0.attn.attn_sink"]["dtype"] = "I32"; });
    expect_error("layers.0.attn.attn_sink");
}

TEST_F(CorruptInput, UnsupportedDtype) {
    edit_header([](json& h) { h["model.layers.0.attn.attn_sink"]["dtype"] = "C64"; });
    expect_error("unsupported dtype C64");
}

TEST_F(CorruptInput, MissingTensor) {
    edit_header([](json& h) { h.erase("model.layers.2.attn.wkv.weight"); });
    expect_error("missing tensor 'layers.2.attn.wkv.weight'");
}

TEST_F(CorruptInput, WrongShape) {
    edit_config([](json& c) { c["q_lora_rank"] = 16; });
    expect_error("layers.0.attn.wq_a.weight");
}

TEST_F(CorruptInput, UnexpectedTensor) {
    edit_header([](json& h) {
        h["model.layers.9.extra.weight"] = h["model.norm.weight"];
        h.erase("model.norm.weight");
        h["model.norm.weight"] = h["model.layers.9.extra.weight"];
        h["model.layers.9.extra.weight"]["data_offsets"] = {0, 0};
        h["model.layers.9.extra.weight"]["shape"] = {0};
    });
    expect_error("unexpected tensors");
}

TEST_F(CorruptInput, ConfigNotJson) {
    write_file(dir_ / "config.json", "{ \"hidden_size\": ");
    expect_error("not valid JSON");
}

TEST_F(CorruptInput, ConfigMissingField) {
    edit_config([](json& c) { c.erase("num_hidden_layers"); });
    expect_error("missing field \"num_hidden_layers\"");
}

TEST_F(CorruptInput, ConfigWrongType) {
    edit_config([](json& c) { c["hidden_size"] = "wide"; });
    expect_error("\"hidden_size\" must be an integer");
}

TEST_F(CorruptInput, ConfigUnsupportedField) {
    edit_config([](json& c) { c["scoring_func"] = "softmax"; });
    expect_error("scoring_func");
}

TEST_F(CorruptInput, ConfigUnknownLayerType) {
    edit_config([](json& c) { c["layer_types"][1] = "dense_attention"; });
    expect_error("layer_types[1]");
}

TEST_F(CorruptInput, MissingWeightsFile) {
    fs::remove(dir_ / "model.safetensors");
    expect_error("no model.safetensors");
}

TEST(BadRequest, TokenOutsideVocabulary) {
    EngineOptions o;
    o.model_dir = std::string(DSV4_GOLDEN_DIR) + "/tiny-mix";
    auto e = Engine::create(o);
    ASSERT_TRUE(e.has_value());
    auto made = (*e)->new_session();
    ASSERT_TRUE(made.has_value());
    auto& s = *made;
    std::vector<float> logits;
    Status st = s->feed({1, 99999}, nullptr, &logits);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("99999"), std::string::npos);
    EXPECT_EQ(s->position(), 0);  // nothing was consumed
}

TEST(BadRequest, ContextFull) {
    EngineOptions o;
    o.model_dir = std::string(DSV4_GOLDEN_DIR) + "/tiny-mix";
    o.max_context = 8;
    auto e = Engine::create(o);
    ASSERT_TRUE(e.has_value());
    auto made = (*e)->new_session();
    ASSERT_TRUE(made.has_value());
    auto& s = *made;
    std::vector<float> logits;
    EXPECT_TRUE(s->feed({1, 2, 3, 4, 5}, nullptr, &logits).is_ok());
    Status st = s->feed({1, 2, 3, 4}, nullptr, &logits);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("context full"), std::string::npos);
    EXPECT_EQ(s->position(), 5);
}

}  // namespace
}  // namespace dsv4
