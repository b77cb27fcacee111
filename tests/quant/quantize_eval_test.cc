// `dsv4 quantize --all` of the golden small-rates model loads and runs in dsv4 and stays close
// to the float model (the numbers of docs/numerics-quant.md, with margins for regressions).
#include <gtest/gtest.h>

#include <filesystem>

#include "dsv4/engine.h"
#include "dsv4/quantize.h"
#include "formats/safetensors.h"
#include "logit_metrics.h"
#include "test_util.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

std::vector<float> full_logits(const std::string& dir, const std::vector<int32_t>& ids,
                               int* vocab) {
    EngineOptions o;
    o.model_dir = dir;
    o.max_context = static_cast<int64_t>(ids.size()) + 16;
    auto engine = Engine::create(o);
    EXPECT_TRUE(engine.has_value()) << (engine ? "" : engine.status().message());
    if (!engine) return {};
    *vocab = (*engine)->info().vocab_size;
    auto session = (*engine)->new_session();
    EXPECT_TRUE(session.has_value());
    if (!session) return {};
    std::vector<float> logits;
    const Status st = (*session)->feed(ids, &logits, nullptr);
    EXPECT_TRUE(st.is_ok()) << (st ? "" : st.message());
    return logits;
}

TEST(QuantizeEval, SmallRatesAllLinears) {
    const fs::path model = fs::path(DSV4_GOLDEN_DIR) / "small-rates";
    ASSERT_TRUE(fs::exists(model / "config.json")) << "missing fixture " << model;
    testing::TempDir out;
    QuantizeOptions o;
    o.model_dir = model.string();
    o.out_dir = out.path().string();
    o.select.shared_experts = o.select.attention = o.select.indexer = o.select.router = true;
    o.progress = false;
    auto summary = quantize_model(o);
    ASSERT_TRUE(summary.has_value()) << summary.status().message();
    EXPECT_EQ(summary->skipped, 0);
    EXPECT_LT(static_cast<double>(summary->bytes_out), 0.3 * summary->bytes_in);

    auto expected = SafetensorsFile::open((model / "expected.safetensors").string());
    ASSERT_TRUE(expected.has_value());
    auto ids_or = read_ids(**expected, "input_ids");
    ASSERT_TRUE(ids_or.has_value()) << ids_or.status().message();
    const std::vector<int32_t>& ids = *ids_or;
    int vocab = 0, vocab_q = 0;
    const auto ref = full_logits(model.string(), ids, &vocab);
    const auto got = full_logits(out.path().string(), ids, &vocab_q);
    ASSERT_EQ(vocab, vocab_q);
    ASSERT_EQ(ref.size(), got.size());
    const auto m = testing::compare_logits(ref, got, vocab);
    // Measured: KL 0.033 nats mean, top-1 0.65, max abs 1.8 (a random-init model whose median
    // top-1 margin is 0.23, so argmaxes flip easily).
    EXPECT_LT(m.kl_mean, 0.06);
    EXPECT_GT(m.top1, 0.5);
    EXPECT_LT(m.max_abs, 3.0);
    EXPECT_GT(m.max_abs, 0.0);  // the quantized weights are really in use
}

}  // namespace
}  // namespace dsv4
