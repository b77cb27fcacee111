// Ranks (include/dsv4/parallel.h, docs/parallel.md): a model whose routed experts are split over
// 2 or 3 in-process ranks gives one rank's logits (to float rounding: the experts' outputs are
// summed in another order) and the same greedy tokens, prefill and decode, every rank the same
// bits; the shares cover every expert once; misuse is refused with a clear error.
#include "dsv4/parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "dsv4/engine.h"
#include "formats/safetensors.h"
#include "ops/collective.h"

namespace dsv4 {
namespace {

TEST(Ranks, ExpertSharesCoverEveryExpertOnce) {
    for (int E : {1, 7, 16, 256}) {
        for (int size = 1; size <= std::min(E, 9); ++size) {
            int next = 0;
            for (int r = 0; r < size; ++r) {
                const ops::ExpertShard s = ops::expert_shard(E, r, size);
                EXPECT_EQ(s.first, next) << E << " experts, rank " << r << " of " << size;
                EXPECT_GE(s.count, E / size);
                EXPECT_LE(s.count, E / size + 1);
                next = s.first + s.count;
            }
            EXPECT_EQ(next, E);
        }
    }
}

std::string fixture_dir(const std::string& name) {
    return name.rfind("dsref", 0) == 0 ? std::string(DSV4_DSREF_DIR) + "/" + name
                                       : std::string(DSV4_GOLDEN_DIR) + "/" + name;
}

std::vector<int32_t> fixture_ids(const std::string& dir) {
    auto f = SafetensorsFile::open(dir + "/expected.safetensors");
    EXPECT_TRUE(f.has_value());
    if (!f) return {};
    auto ids = read_ids(**f, "input_ids");
    EXPECT_TRUE(ids.has_value());
    return ids ? *ids : std::vector<int32_t>{};
}

// What one rank computed: the prompt's logits [n, V] (prefill steps of up to 128 tokens), then
// the logits of 4 greedy tokens fed one at a time (decode steps), and those tokens.
struct RankRun {
    std::vector<float> prefill, decode;
    std::vector<int32_t> tokens;
};

RankRun run(const std::string& dir, const std::shared_ptr<RankGroup>& group, int rank) {
    RankRun out;
    EngineOptions o;
    o.model_dir = dir;
    o.max_context = 512;  // (the fixtures' prompts are up to 300 tokens)
    o.rank_group = group;
    o.rank = rank;
    auto e = Engine::create(o);
    EXPECT_TRUE(e.has_value()) << (e ? "" : e.status().message());
    if (!e) return out;
    auto s = (*e)->new_session();
    EXPECT_TRUE(s.has_value());
    if (!s) return out;
    const std::vector<int32_t> ids = fixture_ids(dir);
    std::vector<float> last;
    const Status fed = (*s)->feed(ids, &out.prefill, &last);
    EXPECT_TRUE(fed.is_ok()) << fed.message();
    const int64_t V = (*e)->info().vocab_size;
    for (int i = 0; i < 4 && static_cast<int64_t>(last.size()) == V; ++i) {
        int32_t best = 0;
        for (int64_t v = 1; v < V; ++v)
            if (last[static_cast<size_t>(v)] > last[static_cast<size_t>(best)])
                best = static_cast<int32_t>(v);
        out.tokens.push_back(best);
        EXPECT_TRUE((*s)->feed({best}, nullptr, &last).is_ok());
        out.decode.insert(out.decode.end(), last.begin(), last.end());
    }
    return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
        m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
    return m;
}

class RanksMatchOneRank : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(RanksMatchOneRank, LogitsAndGreedyTokens) {
    const auto& [name, size] = GetParam();
    const std::string dir = fixture_dir(name);
    const RankRun one = run(dir, nullptr, 0);
    ASSERT_FALSE(one.tokens.empty());
    auto group = RankGroup::in_process(size);
    std::vector<RankRun> ranks(static_cast<size_t>(size));
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r)
        threads.emplace_back([&, r] { ranks[static_cast<size_t>(r)] = run(dir, group, r); });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < size; ++r) {
        const RankRun& got = ranks[static_cast<size_t>(r)];
        SCOPED_TRACE(name + ", rank " + std::to_string(r) + " of " + std::to_string(size));
        // The routed sum is added per rank and then over the ranks, not in slot order: float
        // rounding of logits of magnitude ~1-10 (measured ~1e-6).
        EXPECT_LE(max_abs_diff(got.prefill, one.prefill), 1e-4);
        EXPECT_LE(max_abs_diff(got.decode, one.decode), 1e-4);
        EXPECT_EQ(got.tokens, one.tokens);
        // The sum over the ranks is added in rank order on every rank: the same bits.
        EXPECT_EQ(got.prefill, ranks[0].prefill);
        EXPECT_EQ(got.decode, ranks[0].decode);
    }
    std::printf("[ranks] %-12s %d ranks: max |logit - one rank's| prefill %.3g, decode %.3g\n",
                name.c_str(), size, max_abs_diff(ranks[0].prefill, one.prefill),
                max_abs_diff(ranks[0].decode, one.decode));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RanksMatchOneRank,
                         ::testing::Combine(::testing::Values("fmt-nvfp4", "x-hash2",
                                                              "dsref-pub-a"),
                                            ::testing::Values(2, 3)));

// Engine::create refuses `o` with a one-line error containing `text`.
void expect_refused(const EngineOptions& o, const std::string& text) {
    auto e = Engine::create(o);
    ASSERT_FALSE(e.has_value()) << text;
    EXPECT_NE(e.status().message().find(text), std::string::npos) << e.status().message();
}

TEST(Ranks, RefusedWhereNotSupported) {
    EngineOptions o;
    o.model_dir = fixture_dir("fmt-nvfp4");
    o.rank_group = RankGroup::in_process(2);
    o.rank = 2;
    expect_refused(o, "rank 2 of a group of 2");
    o.rank = 0;
    o.device = "cuda";
    expect_refused(o, "CPU backend only");
    o.device = "cpu";
    o.numerics = "reference";
    expect_refused(o, "not split over ranks");
    // More ranks than routed experts (16): rank 0 of 17 would hold none.
    o.numerics = "float";
    o.rank_group = RankGroup::in_process(17);
    expect_refused(o, "17 ranks for 16 routed experts");
}

}  // namespace
}  // namespace dsv4
