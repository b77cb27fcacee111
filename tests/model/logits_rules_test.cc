// Request logits rules (Request::rules: penalties, logit_bias, min_tokens) through the engine:
// each generated token is the arg-max of the session's logits for the same positions with the
// rules' formula applied (dsv4/sampling.h), and its log-probability is theirs; min_tokens holds
// EOS and the stop ids back; rules end with their request (a plain request on the same slot is
// untouched); a session's earlier tokens count as prompt; speculative steps keep logit_bias and
// min_tokens; bad rules are refused at submit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "fixture_util.h"

namespace dsv4 {
namespace logits_rules_test {  // (named: the unity build joins the tests' anonymous namespaces)
namespace {

// The rules applied to one row of raw logits, written from the contract (dsv4/sampling.h):
// prompt: the request's prompt; out: its outputs before this sample.
std::vector<float> apply(const float* raw, int V, const LogitsRules& u,
                         const std::vector<int32_t>& prompt, const std::vector<int32_t>& out,
                         int32_t eos) {
    std::vector<float> l(raw, raw + V);
    std::vector<int> count(V, 0);
    std::vector<bool> seen(V, false);
    for (int32_t t : prompt) seen[t] = true;
    for (int32_t t : out) {
        seen[t] = true;
        ++count[t];
    }
    for (int v = 0; v < V; ++v) {
        float x = l[v];
        if (seen[v] && u.repetition_penalty != 1.0f)
            x = x > 0 ? x / u.repetition_penalty : x * u.repetition_penalty;
        x = x - u.frequency_penalty * static_cast<float>(count[v]);
        if (count[v] > 0) x = x - u.presence_penalty;
        l[v] = x;
    }
    for (const TokenBias& b : u.logit_bias) l[b.token] += b.bias;
    if (static_cast<int>(out.size()) < u.min_tokens) {
        for (int32_t id : u.min_tokens_stops) l[id] = std::numeric_limits<float>::lowest();
        l[eos] = std::numeric_limits<float>::lowest();
    }
    return l;
}

TEST(LogitsRules, GreedyTokensAreTheArgmaxOfTheRulesFormula) {
    auto engine = test::request_engine(3);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    const int V = e.info().vocab_size;
    const int32_t eos = e.info().eos_token_id;
    Request plain;
    plain.prompt = test::random_ids(21, V, 11);  // two prompt chunks, then decode steps
    plain.max_tokens = 12;
    plain.stop_at_eos = false;
    plain.logprobs = 3;
    Request penalised = plain;
    penalised.rules.repetition_penalty = 1.7f;
    penalised.rules.frequency_penalty = 0.6f;
    penalised.rules.presence_penalty = 0.9f;
    Request biased = plain;
    biased.prompt = test::random_ids(9, V, 12);
    biased.stop_at_eos = true;
    biased.rules.logit_bias = {{5, 3.5f}, {7, -100.0f}, {V - 1, 1.25f}};
    biased.rules.min_tokens = 4;
    biased.rules.min_tokens_stops = {9, 5};
    biased.rules.frequency_penalty = -0.4f;  // (negative: repeats are favoured)
    const auto alone = test::run_requests(*test::request_engine(1), {plain});
    const auto out = test::run_requests(e, {plain, penalised, biased});
    // The plain request next to rule-bearing ones: its own tokens and log-probabilities.
    ASSERT_EQ(test::tokens_of(out[0]), test::tokens_of(alone[0]));
    bool differs = false;
    for (int which : {1, 2}) {
        const Request& r = which == 1 ? penalised : biased;
        const std::vector<int32_t> got = test::tokens_of(out[which]);
        ASSERT_FALSE(got.empty());
        differs = differs || got != test::tokens_of(out[0]);
        std::vector<int32_t> seq = r.prompt;
        seq.insert(seq.end(), got.begin(), got.end() - 1);  // (the last token is never fed)
        auto s = e.new_session();
        ASSERT_TRUE(s.has_value()) << s.status().message();
        std::vector<float> logits;
        ASSERT_TRUE((*s)->feed(seq, &logits, nullptr).is_ok());
        std::vector<int32_t> before;
        size_t k = 0;
        for (const TokenEvent& ev : out[which]) {
            if (ev.token < 0) continue;
            const std::vector<float> l = apply(logits.data() + (r.prompt.size() - 1 + k) * V, V,
                                               r.rules, r.prompt, before, eos);
            const int32_t best =
                static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
            EXPECT_EQ(ev.token, best) << "request " << which << " token " << k;
            ASSERT_TRUE(ev.logprobs.has_value());
            EXPECT_NEAR(ev.logprobs->logprob, test::log_softmax(l.data(), V, ev.token), 1e-5) << k;
            if (which == 2 && k < 4) {
                EXPECT_TRUE(ev.token != eos && ev.token != 9 && ev.token != 5) << k;
            }
            before.push_back(ev.token);
            ++k;
        }
    }
    EXPECT_TRUE(differs) << "the rules changed no token: the test shows nothing";
}

// EOS made the favourite by a bias; min_tokens holds it back for 5 tokens, then it ends the
// request; a stop id biased as much is held back as long.
TEST(LogitsRules, MinTokensHoldsEosAndStopIdsBack) {
    auto engine = test::request_engine(1);
    ASSERT_TRUE(engine);
    const int V = engine->info().vocab_size;
    const int32_t eos = engine->info().eos_token_id;
    const int32_t stop = eos == 3 ? 4 : 3;
    Request r;
    r.prompt = test::random_ids(6, V, 21);
    r.max_tokens = 10;
    r.rules.logit_bias = {{eos, 100.0f}, {stop, 99.0f}};
    r.rules.min_tokens = 5;
    r.rules.min_tokens_stops = {stop};
    const auto out = test::run_requests(*engine, {r});
    const std::vector<int32_t> got = test::tokens_of(out[0]);
    ASSERT_EQ(got.size(), 6u);
    for (int k = 0; k < 5; ++k) EXPECT_TRUE(got[k] != eos && got[k] != stop) << k;
    EXPECT_EQ(got[5], eos);
    EXPECT_EQ(out[0].back().finish, FinishReason::kEos);
    // Without min_tokens, EOS comes first.
    r.rules.min_tokens = 0;
    EXPECT_EQ(test::tokens_of(test::run_requests(*engine, {r})[0]), std::vector<int32_t>{eos});
}

// A request with rules, then plain requests on the same slot: the plain ones are untouched, as
// is a session's feed after a request with rules ran on it.
TEST(LogitsRules, EndWithTheirRequest) {
    auto engine = test::request_engine(1);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    const int V = e.info().vocab_size;
    Request plain;
    plain.prompt = test::random_ids(7, V, 31);
    plain.max_tokens = 6;
    plain.stop_at_eos = false;
    Request ruled = plain;
    ruled.rules.presence_penalty = 2.0f;
    ruled.rules.logit_bias = {{2, 50.0f}};
    const auto before = test::tokens_of(test::run_requests(e, {plain})[0]);
    EXPECT_NE(test::tokens_of(test::run_requests(e, {ruled})[0]), before);
    EXPECT_EQ(test::tokens_of(test::run_requests(e, {plain})[0]), before);

    auto s = e.new_session();
    ASSERT_TRUE(s.has_value());
    std::vector<float> fresh, after;
    ASSERT_TRUE((*s)->feed(plain.prompt, nullptr, &fresh).is_ok());
    (*s)->reset();
    Request on_session = ruled;
    on_session.session = s->get();
    test::run_requests(e, {on_session});
    (*s)->reset();
    ASSERT_TRUE((*s)->feed(plain.prompt, nullptr, &after).is_ok());
    EXPECT_EQ(fresh, after);
}

// A request continuing a session counts the session's earlier tokens as prompt (the repetition
// penalty's "seen"): its tokens are those of one request whose prompt is the whole sequence,
// whether the session was fed directly or by an earlier request (a chat's turns).
TEST(LogitsRules, SessionTokensCountAsPrompt) {
    auto engine = test::request_engine(4);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    const int V = e.info().vocab_size;
    const int32_t eos = e.info().eos_token_id;
    const std::vector<int32_t> a = test::random_ids(40, V, 41), b = test::random_ids(6, V, 42);
    std::vector<int32_t> ab = a;
    ab.insert(ab.end(), b.begin(), b.end());
    Request ruled;
    ruled.max_tokens = 8;
    ruled.stop_at_eos = false;
    ruled.rules.repetition_penalty = 5.0f;
    ruled.rules.frequency_penalty = 0.5f;
    auto whole = [&](const std::vector<int32_t>& prompt) {
        Request r = ruled;
        r.prompt = prompt;
        return test::tokens_of(test::run_requests(e, {r})[0]);
    };
    auto s = e.new_session();
    ASSERT_TRUE(s.has_value()) << s.status().message();
    // Fed directly, then a request with b: the tokens of one request with a and b.
    ASSERT_TRUE((*s)->feed(a, nullptr, nullptr).is_ok());
    Request on = ruled;
    on.prompt = b;
    on.session = s->get();
    const std::vector<int32_t> got = test::tokens_of(test::run_requests(e, {on})[0]);
    ASSERT_EQ(got.size(), 8u);
    EXPECT_EQ(got, whole(ab));
    // The formula with a and b as the prompt gives each token; with b alone (a's tokens not
    // seen) some other one: the test tells the two apart.
    {
        auto raw = e.new_session();
        ASSERT_TRUE(raw.has_value());
        std::vector<int32_t> seq = ab;
        seq.insert(seq.end(), got.begin(), got.end() - 1);
        std::vector<float> logits;
        ASSERT_TRUE((*raw)->feed(seq, &logits, nullptr).is_ok());
        std::vector<int32_t> before;
        bool differs = false;
        for (size_t k = 0; k < got.size(); ++k) {
            const float* row = logits.data() + (ab.size() - 1 + k) * V;
            auto best = [&](const std::vector<int32_t>& prompt) {
                const std::vector<float> l = apply(row, V, ruled.rules, prompt, before, eos);
                return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
            };
            EXPECT_EQ(got[k], best(ab)) << "token " << k;
            differs = differs || best(b) != got[k];
            before.push_back(got[k]);
        }
        EXPECT_TRUE(differs) << "a's tokens changed no choice: the test shows nothing";
    }

    // A chat's two turns: a request with a, then one with its last token (never fed) and b.
    (*s)->reset();
    Request turn1 = ruled;
    turn1.prompt = a;
    turn1.max_tokens = 4;
    turn1.session = s->get();
    const std::vector<int32_t> out1 = test::tokens_of(test::run_requests(e, {turn1})[0]);
    ASSERT_EQ(out1.size(), 4u);
    Request turn2 = ruled;
    turn2.prompt = {out1.back()};
    turn2.prompt.insert(turn2.prompt.end(), b.begin(), b.end());
    turn2.session = s->get();
    std::vector<int32_t> seq = a;
    seq.insert(seq.end(), out1.begin(), out1.end());
    seq.insert(seq.end(), b.begin(), b.end());
    EXPECT_EQ(test::tokens_of(test::run_requests(e, {turn2})[0]), whole(seq));

    // A copy carries the tokens with the cache.
    auto copy = e.new_session();
    ASSERT_TRUE(copy.has_value()) << copy.status().message();
    (*s)->reset();
    ASSERT_TRUE((*s)->feed(a, nullptr, nullptr).is_ok());
    ASSERT_TRUE((*copy)->copy_from(**s).is_ok());
    on.session = copy->get();
    EXPECT_EQ(test::tokens_of(test::run_requests(e, {on})[0]), got);
}

// n-gram drafts (kjv-tiny repeats itself) with logit_bias and min_tokens: the tokens of the
// same request without drafts (a draft's sample sees the rules at its own position).
TEST(LogitsRules, SpeculativeStepsKeepBiasAndMinTokens) {
    auto engine = test::request_engine(1, DSV4_KJV_DIR);
    ASSERT_TRUE(engine);
    Request plain;
    plain.prompt = {0, 1288};
    plain.max_tokens = 40;
    plain.rules.logit_bias = {{1288, -3.0f}, {5, 2.0f}};
    plain.rules.min_tokens = 30;
    Request spec = plain;
    spec.speculative = Speculation::kNgram;
    const auto a = test::run_requests(*engine, {plain});
    const auto b = test::run_requests(*engine, {spec});
    int drafted = 0;
    for (const TokenEvent& ev : b[0]) drafted += ev.drafted;
    EXPECT_GT(drafted, 0) << "no multi-token step was tested";
    EXPECT_GE(test::tokens_of(a[0]).size(), 30u);
    EXPECT_EQ(test::tokens_of(a[0]), test::tokens_of(b[0]));
}

TEST(LogitsRules, BadRulesAreRefusedAtSubmit) {
    auto engine = test::request_engine(1);
    ASSERT_TRUE(engine);
    const int V = engine->info().vocab_size;
    auto refused = [&](const std::function<void(Request&)>& change, const std::string& what) {
        Request r;
        r.prompt = {1, 2, 3};
        r.max_tokens = 4;
        change(r);
        auto id = engine->submit(r);
        ASSERT_FALSE(id.has_value()) << what;
        EXPECT_NE(id.status().message().find(what), std::string::npos) << id.status().message();
    };
    refused([](Request& r) { r.rules.repetition_penalty = 0.0f; }, "repetition_penalty");
    refused([](Request& r) { r.rules.repetition_penalty = NAN; }, "repetition_penalty");
    refused([](Request& r) { r.rules.frequency_penalty = 2.5f; }, "frequency_penalty");
    refused([](Request& r) { r.rules.presence_penalty = -2.01f; }, "presence_penalty");
    refused(
        [](Request& r) {
            r.rules.presence_penalty = 0.5f;
            r.speculative = Speculation::kNgram;
        },
        "speculative");
    refused([&](Request& r) { r.rules.logit_bias = {{V, 1.0f}}; }, "logit_bias token");
    refused([](Request& r) { r.rules.logit_bias = {{3, 100.5f}}; }, "logit_bias values");
    refused([](Request& r) { r.rules.logit_bias = {{3, 1.0f}, {3, 2.0f}}; }, "twice");
    refused([](Request& r) { r.rules.logit_bias.resize(kMaxLogitBias + 1, {1, 0.0f}); }, "entries");
    refused([](Request& r) { r.rules.min_tokens = 5; }, "min_tokens");
    refused([](Request& r) { r.rules.min_tokens = -1; }, "min_tokens");
    refused([&](Request& r) { r.rules.min_tokens_stops = {-1}; }, "stop token id");
}

}  // namespace
}  // namespace logits_rules_test
}  // namespace dsv4
