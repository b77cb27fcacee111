// Log-probabilities with generated tokens (Request::logprobs): each token's own and the top n
// equal the log-softmax of the logits a session gets for the same positions; greedy tokens are
// their top choice; speculative steps report the same as plain ones; the option is checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "fixture_util.h"

namespace dsv4 {
namespace logprobs_test {  // (named: the unity build joins the tests' anonymous namespaces)
namespace {

// Every request's token events (those with a token), in submit order; drafted: the drafts fed
// (the finish events' counts), summed.
std::vector<std::vector<TokenEvent>> run(Engine& e, const std::vector<Request>& reqs,
                                         int* drafted = nullptr) {
    std::vector<std::vector<TokenEvent>> out;
    for (auto& events : test::run_requests(e, reqs, 1000)) {
        std::vector<TokenEvent> with_token;
        for (TokenEvent& ev : events) {
            if (ev.finish != FinishReason::kNone && drafted != nullptr) *drafted += ev.drafted;
            if (ev.token >= 0) with_token.push_back(std::move(ev));
        }
        out.push_back(std::move(with_token));
    }
    return out;
}

TEST(Logprobs, MatchTheSessionsLogitsAndTheGreedyChoice) {
    auto engine = test::request_engine(4);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    const int V = e.info().vocab_size;
    Request greedy;
    greedy.prompt = test::random_ids(21, V, 5);  // two prompt chunks, then decode steps
    greedy.max_tokens = 7;
    greedy.stop_at_eos = false;
    greedy.logprobs = 5;
    Request sampled = greedy;
    sampled.sampling = {0.9f, 0, 1.0f, 3};
    sampled.logprobs = 0;
    Request plain = greedy;
    plain.logprobs = -1;
    const auto out = run(e, {greedy, sampled, plain});
    ASSERT_EQ(out[0].size(), 7u);
    ASSERT_EQ(out[1].size(), 7u);
    ASSERT_EQ(out[2].size(), 7u);
    for (const TokenEvent& ev : out[2]) EXPECT_FALSE(ev.logprobs.has_value());

    for (int which : {0, 1}) {
        // The logits of the same positions, fed through a session.
        std::vector<int32_t> seq = greedy.prompt;
        for (const TokenEvent& ev : out[which]) seq.push_back(ev.token);
        seq.pop_back();  // (the last token is never fed)
        auto s = e.new_session();
        ASSERT_TRUE(s.has_value()) << s.status().message();
        std::vector<float> logits;
        ASSERT_TRUE((*s)->feed(seq, &logits, nullptr).is_ok());
        for (size_t k = 0; k < out[which].size(); ++k) {
            const TokenEvent& ev = out[which][k];
            const float* l = logits.data() + (greedy.prompt.size() - 1 + k) * V;
            ASSERT_TRUE(ev.logprobs.has_value()) << "token " << k;
            const TokenLogprobs& lp = *ev.logprobs;
            EXPECT_NEAR(lp.logprob, test::log_softmax(l, V, ev.token), 1e-5) << "token " << k;
            EXPECT_LE(lp.logprob, 0.0f);
            EXPECT_EQ(lp.top_n, which == 0 ? 5 : 0);
            for (int j = 0; j < lp.top_n; ++j) {
                EXPECT_NEAR(lp.top[j].logprob, test::log_softmax(l, V, lp.top[j].token), 1e-5);
                if (j > 0) {
                    // Most likely first, ties to the lower id.
                    const float a = l[lp.top[j - 1].token], b = l[lp.top[j].token];
                    EXPECT_TRUE(a > b || (a == b && lp.top[j - 1].token < lp.top[j].token));
                }
            }
            if (which == 0) {
                EXPECT_EQ(lp.top[0].token, ev.token) << "greedy takes the most likely token";
                EXPECT_EQ(lp.top[0].logprob, lp.logprob);
                // Nothing outside the top 5 is more likely than its last.
                const float fifth = l[lp.top[4].token];
                int above = 0;
                for (int i = 0; i < V; ++i) above += l[i] > fifth;
                EXPECT_LE(above, 4);
            }
        }
    }
}

// n-gram drafts verified in multi-token rows (the trained kjv-tiny, which repeats itself, so
// drafts are fed and some kept): the same tokens and the same log-probabilities, bit for bit, as
// plain greedy decoding (a row's logits do not depend on how the step is cut).
TEST(Logprobs, SpeculativeStepsReportWhatPlainStepsDo) {
    auto engine = test::request_engine(2, DSV4_KJV_DIR);
    ASSERT_TRUE(engine);
    Request plain;
    plain.prompt = {0, 1288};
    plain.max_tokens = 40;
    plain.stop_at_eos = false;
    plain.logprobs = kMaxTopLogprobs;
    Request spec = plain;
    spec.speculative = Speculation::kNgram;
    const auto a = run(*engine, {plain});
    int drafted = 0;
    const auto b = run(*engine, {spec}, &drafted);
    EXPECT_GT(drafted, 0) << "no multi-token step was tested";
    ASSERT_EQ(a[0].size(), 40u);
    ASSERT_EQ(b[0].size(), 40u);
    for (size_t k = 0; k < a[0].size(); ++k) {
        EXPECT_EQ(a[0][k].token, b[0][k].token) << k;
        ASSERT_TRUE(a[0][k].logprobs && b[0][k].logprobs);
        const TokenLogprobs &x = *a[0][k].logprobs, &y = *b[0][k].logprobs;
        EXPECT_EQ(x.logprob, y.logprob) << k;
        ASSERT_EQ(y.top_n, kMaxTopLogprobs);
        for (int j = 0; j < kMaxTopLogprobs; ++j) {
            EXPECT_EQ(x.top[j].token, y.top[j].token) << k << "/" << j;
            EXPECT_EQ(x.top[j].logprob, y.top[j].logprob) << k << "/" << j;
        }
    }
}

TEST(Logprobs, OutOfRangeIsRefusedAtSubmit) {
    auto engine = test::request_engine(1);
    ASSERT_TRUE(engine);
    Request r;
    r.prompt = {1, 2, 3};
    for (int bad : {-2, kMaxTopLogprobs + 1}) {
        r.logprobs = bad;
        auto id = engine->submit(r);
        ASSERT_FALSE(id.has_value());
        EXPECT_NE(id.status().message().find("logprobs"), std::string::npos)
            << id.status().message();
    }
}

}  // namespace
}  // namespace logprobs_test
}  // namespace dsv4
