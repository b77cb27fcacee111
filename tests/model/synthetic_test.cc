// Synthetic benchmark models (model/synthetic.h) on the CPU backend, the bench's bookkeeping
// (bytes a decode step reads, the routing histogram) and Session::copy_from, which the bench
// uses to start many sequences from one prefilled context.
#include "model/synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "dsv4/engine.h"
#include "dsv4/parallel.h"

namespace dsv4 {
namespace {

std::string golden(const char* name) {
    return std::string(DSV4_GOLDEN_DIR) + "/" + name;
}

TEST(Synthetic, ConfigKeepsTheFirstLayersOfTheRelease) {
    auto c = synth_config({"v4-flash", 5, "nvfp4"});
    ASSERT_TRUE(c.has_value()) << c.status().message();
    EXPECT_EQ(c->num_layers, 5);
    EXPECT_EQ(c->hidden_size, 4096);
    EXPECT_EQ(c->n_routed_experts, 256);
    EXPECT_EQ(c->num_mtp_layers, 0);
    const LayerKind want[] = {LayerKind::kSliding, LayerKind::kSliding, LayerKind::kCsa,
                              LayerKind::kHca, LayerKind::kCsa};
    for (int l = 0; l < 5; ++l) {
        EXPECT_EQ(c->layers[l].kind, want[l]) << l;
        EXPECT_EQ(c->layers[l].hash_routed, l < 3) << l;
    }
    auto pro = synth_config({"v4-pro", 0, "release"});
    ASSERT_TRUE(pro.has_value()) << pro.status().message();
    EXPECT_EQ(pro->num_layers, 61);
    EXPECT_EQ(pro->layers[0].kind, LayerKind::kHca);
    EXPECT_FALSE(synth_config({"v4-flash", 44, "nvfp4"}).has_value());
    EXPECT_FALSE(synth_config({"v4-flash", 2, "fp8"}).has_value());
    EXPECT_FALSE(synth_config({"/no/such/config.json", 2, "nvfp4"}).has_value());
}

// Ranks build one synthetic model together: each holds its share of the routed experts (the
// layer estimate counts only those), and with the layers left to fit they agree on the fewest
// any rank fits; two in-process ranks give one rank's logits. (The single rank then builds the
// layer count the ranks chose, asked for explicitly: a second "as many as fit" would depend on
// the host's free memory staying the same between the runs, which a loaded test machine's does
// not.)
TEST(Synthetic, RanksAgreeOnTheModelAndMatchOneRank) {
    auto cfg = synth_config({golden("fmt-official") + "/config.json", 0, "nvfp4"});
    ASSERT_TRUE(cfg.has_value());
    const int E = cfg->n_routed_experts;
    EXPECT_LT(synth_layer_bytes(*cfg, "nvfp4", 0, E / 2), synth_layer_bytes(*cfg, "nvfp4", 0));
    EXPECT_EQ(synth_layer_bytes(*cfg, "nvfp4", 0, E), synth_layer_bytes(*cfg, "nvfp4", 0));

    EngineOptions o;
    o.synthetic = golden("fmt-official") + "/config.json";
    o.max_context = 128;
    std::vector<int32_t> prompt(24);
    for (int i = 0; i < 24; ++i) prompt[i] = (i * 37 + 5) % static_cast<int32_t>(cfg->vocab_size);
    auto run = [&](const EngineOptions& eo, std::vector<float>* logits, int* layers) {
        auto e = Engine::create(eo);
        ASSERT_TRUE(e.has_value()) << e.status().message();
        *layers = (*e)->info().num_layers;
        auto s = (*e)->new_session();
        ASSERT_TRUE(s.has_value());
        const Status fed = (*s)->feed(prompt, nullptr, logits);
        ASSERT_TRUE(fed.is_ok()) << fed.message();
    };
    auto group = RankGroup::in_process(2);
    std::vector<std::vector<float>> got(2);
    int layers[2] = {0, 0};
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
            EngineOptions eo = o;
            eo.rank_group = group;
            eo.rank = r;
            run(eo, &got[static_cast<size_t>(r)], &layers[r]);
            group->leave(r);
        });
    for (std::thread& t : threads) t.join();
    ASSERT_GT(layers[0], 0);
    EXPECT_EQ(layers[1], layers[0]);
    EngineOptions single = o;
    single.synthetic_layers = layers[0];
    std::vector<float> one;
    int one_layers = 0;
    run(single, &one, &one_layers);
    EXPECT_EQ(one_layers, layers[0]);
    ASSERT_EQ(got[0].size(), one.size());
    EXPECT_EQ(got[0], got[1]);  // (every rank the same bits)
    double worst = 0;
    for (size_t i = 0; i < one.size(); ++i)
        worst = std::max(worst, std::fabs(static_cast<double>(got[0][i]) - one[i]));
    EXPECT_LT(worst, 1e-4);
}

TEST(Synthetic, ReleaseAndNvfp4ModelsRunOnTheCpu) {
    for (const char* format : {"release", "nvfp4"}) {
        EngineOptions o;
        o.synthetic = golden("fmt-official") + "/config.json";
        o.synthetic_format = format;
        o.max_context = 128;
        auto e = Engine::create(o);
        ASSERT_TRUE(e.has_value()) << e.status().message();
        const ModelInfo& info = (*e)->info();
        EXPECT_NE(info.source.find("synthetic"), std::string::npos);
        bool experts_fp4 = false;
        for (const std::string& line : info.weight_formats)
            experts_fp4 =
                experts_fp4 || line == std::string("routed experts: ") +
                                           (format == std::string("release") ? "mxfp4" : "nvfp4");
        EXPECT_TRUE(experts_fp4) << format;
        auto s = (*e)->new_session();
        ASSERT_TRUE(s.has_value());
        ASSERT_TRUE((*e)->count_expert_use(true).is_ok());
        std::vector<int32_t> prompt(40);
        for (int i = 0; i < 40; ++i) prompt[i] = (i * 37 + 5) % info.vocab_size;
        std::vector<float> logits;
        ASSERT_TRUE((*s)->feed(prompt, nullptr, &logits).is_ok());
        for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << format;
        // Every layer routed each token to k experts.
        const std::vector<int64_t> use = (*e)->expert_use();
        ASSERT_EQ(use.size() % static_cast<size_t>(info.num_layers), 0u);
        const size_t E = use.size() / info.num_layers;
        for (int l = 0; l < info.num_layers; ++l) {
            int64_t sum = 0;
            for (size_t x = 0; x < E; ++x) sum += use[l * E + x];
            EXPECT_EQ(sum, 40 * 4) << format << " layer " << l;  // fmt-official: k = 4
        }
        // Batch 1 reads k experts a layer; batch 8 more, never more than E.
        const StepBytes b1 = (*e)->decode_step_bytes(1, 64), b8 = (*e)->decode_step_bytes(8, 64);
        EXPECT_EQ(b1.experts_per_layer, 4);
        EXPECT_GT(b8.experts_per_layer, 4);
        EXPECT_LE(b8.experts_per_layer, static_cast<double>(E));
        EXPECT_GT(b8.weights, b1.weights);
        EXPECT_DOUBLE_EQ(b8.cache, 8 * b1.cache);
    }
}

TEST(Synthetic, MtpBlockOnRequest) {
    const std::string dsref_a = std::string(DSV4_DSREF_DIR) + "/dsref-pub-a/config.json";
    SynthSpec spec{dsref_a, 0, "nvfp4"};
    auto plain = synth_config(spec);
    ASSERT_TRUE(plain.has_value()) << plain.status().message();
    EXPECT_EQ(plain->num_mtp_layers, 0);
    spec.mtp = true;
    auto with = synth_config(spec);
    ASSERT_TRUE(with.has_value()) << with.status().message();
    EXPECT_EQ(with->num_mtp_layers, 1);
    EXPECT_EQ(with->mtp_spec.kind, LayerKind::kSliding);  // (the config's trailing 0)
    EXPECT_GT(synth_fixed_bytes(*with, "nvfp4"), synth_fixed_bytes(*plain, "nvfp4"));
    // Cut to fewer layers, V4-Flash keeps its MTP block's entry.
    auto flash = synth_config({"v4-flash", 5, "nvfp4", 1, true});
    ASSERT_TRUE(flash.has_value()) << flash.status().message();
    EXPECT_EQ(flash->num_layers, 5);
    EXPECT_EQ(flash->num_mtp_layers, 1);

    // The engine with it: speculative greedy decoding gives plain greedy's tokens, and a step
    // with a draft row and the MTP block reads more.
    EngineOptions o;
    o.synthetic = dsref_a;
    o.synthetic_mtp = true;
    o.max_context = 128;
    auto e = Engine::create(o);
    ASSERT_TRUE(e.has_value()) << e.status().message();
    EXPECT_TRUE((*e)->info().has_mtp);
    auto s = (*e)->new_session();
    ASSERT_TRUE(s.has_value());
    const std::vector<int32_t> prompt = {5, 17, 42, 9, 100, 7, 55, 21};
    SamplingParams greedy;
    auto base = (*e)->generate(**s, prompt, 12, greedy, false, nullptr);
    ASSERT_TRUE(base.has_value()) << base.status().message();
    (*s)->reset();
    Engine::GenerateStats stats;
    auto spec_out =
        (*e)->generate(**s, prompt, 12, greedy, false, nullptr, Speculation::kMtp, &stats);
    ASSERT_TRUE(spec_out.has_value()) << spec_out.status().message();
    EXPECT_EQ(*spec_out, *base);
    EXPECT_GT(stats.drafted, 0);
    const StepBytes b1 = (*e)->decode_step_bytes(1, 64);
    const StepBytes b_draft = (*e)->decode_step_bytes(1, 64, 1.0, 0);
    const StepBytes b_mtp = (*e)->decode_step_bytes(1, 64, 1.0, 1);
    EXPECT_GT(b_draft.experts_per_layer, b1.experts_per_layer);
    EXPECT_GT(b_draft.weights, b1.weights);
    EXPECT_DOUBLE_EQ(b_draft.cache, b1.cache);  // (one sequence's cache, read once)
    EXPECT_GT(b_mtp.weights, b_draft.weights);

    // A base without an MTP block, or the flag without a synthetic model: one-line errors.
    o.synthetic = golden("fmt-official") + "/config.json";
    auto none = Engine::create(o);
    ASSERT_FALSE(none.has_value());
    EXPECT_NE(none.status().message().find("has no MTP block"), std::string::npos);
    o.synthetic.clear();
    o.model_dir = golden("small-rates");
    EXPECT_FALSE(Engine::create(o).has_value());
}

TEST(Session, CopyFromContinuesTheSameSequence) {
    EngineOptions o;
    o.model_dir = golden("small-rates");
    o.max_context = 128;
    o.max_seqs = 2;
    auto e = Engine::create(o);
    ASSERT_TRUE(e.has_value()) << e.status().message();
    auto a = (*e)->new_session(), b = (*e)->new_session();
    ASSERT_TRUE(a && b);
    const std::vector<int32_t> prompt = {3, 17, 42, 9, 100, 7, 55, 21, 8, 64, 2, 31, 77, 5};
    ASSERT_TRUE((*a)->feed(prompt, nullptr, nullptr).is_ok());
    ASSERT_TRUE((*b)->copy_from(**a).is_ok());
    EXPECT_EQ((*b)->position(), (*a)->position());
    std::vector<float> la, lb;
    for (int32_t id : {11, 12, 13, 14, 15, 16, 17, 18, 19, 20}) {
        ASSERT_TRUE((*a)->feed({id}, nullptr, &la).is_ok());
        ASSERT_TRUE((*b)->feed({id}, nullptr, &lb).is_ok());
        ASSERT_EQ(la, lb) << "token " << id;
    }
}

}  // namespace
}  // namespace dsv4
