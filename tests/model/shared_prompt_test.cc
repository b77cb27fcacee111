// Prompt sharing (Request::share_prompt): requests with one key and one prompt give exactly the
// tokens they give apart (greedy and seeded, logprobs too), while the prompt is fed once
// (Engine::prompt_tokens_fed); those that find no slot in time, or whose leader is cancelled,
// prefill on their own; other keys, other prompts and penalties do not share.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "fixture_util.h"

namespace dsv4 {
namespace shared_prompt_test {  // (named: the unity build joins the tests' anonymous namespaces)
namespace {

// Four choices of one prompt: greedy, and seeded temperature sampling (choice i: seed 7 + i).
std::vector<Request> choices(int V, uint64_t key) {
    std::vector<Request> reqs(4);
    for (int i = 0; i < 4; ++i) {
        reqs[i].prompt = test::random_ids(37, V, 3);  // three prompt chunks
        reqs[i].max_tokens = 9;
        reqs[i].stop_at_eos = false;
        reqs[i].sampling = i == 0 ? SamplingParams{} : SamplingParams{0.9f, 0, 0.95f, 7u + i};
        reqs[i].logprobs = 2;
        reqs[i].share_prompt = key;
    }
    return reqs;
}

void expect_same_events(const std::vector<std::vector<TokenEvent>>& a,
                        const std::vector<std::vector<TokenEvent>>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(test::tokens_of(a[i]), test::tokens_of(b[i])) << "choice " << i;
        for (size_t k = 0; k < a[i].size() && k < b[i].size(); ++k)
            if (a[i][k].logprobs && b[i][k].logprobs) {
                EXPECT_EQ(a[i][k].logprobs->logprob, b[i][k].logprobs->logprob) << i << "/" << k;
            }
    }
}

TEST(SharedPrompt, ChoicesGiveTheirOwnTokensFromOnePrefill) {
    auto engine = test::request_engine(4);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    const int V = e.info().vocab_size;
    std::vector<std::vector<TokenEvent>> apart;
    const int64_t fed0 = e.prompt_tokens_fed();
    for (const Request& r : choices(V, 0)) apart.push_back(test::run_requests(e, {r})[0]);
    EXPECT_EQ(e.prompt_tokens_fed() - fed0, 4 * 37);
    const int64_t fed1 = e.prompt_tokens_fed();
    const auto shared = test::run_requests(e, choices(V, 42));
    EXPECT_EQ(e.prompt_tokens_fed() - fed1, 36 + 4) << "the prefix once, the last token each";
    expect_same_events(shared, apart);
    // Another key, or another prompt: no sharing.
    std::vector<Request> mixed = choices(V, 5);
    mixed[1].share_prompt = 6;
    mixed[2].prompt.back() = (mixed[2].prompt.back() + 1) % V;
    const int64_t fed2 = e.prompt_tokens_fed();
    test::run_requests(e, mixed);
    EXPECT_EQ(e.prompt_tokens_fed() - fed2, 36 + 1 + 37 + 37 + 1);
}

// Two slots for four choices: the two that get theirs after the prefix prefill on their own.
// A cancelled leader: its follower prefills on its own. Penalties never share.
TEST(SharedPrompt, LateOrOrphanedFollowersPrefillThemselves) {
    auto engine = test::request_engine(2);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    const int V = e.info().vocab_size;
    std::vector<std::vector<TokenEvent>> apart;
    for (const Request& r : choices(V, 0)) apart.push_back(test::run_requests(e, {r})[0]);
    const int64_t fed0 = e.prompt_tokens_fed();
    expect_same_events(test::run_requests(e, choices(V, 9)), apart);
    EXPECT_EQ(e.prompt_tokens_fed() - fed0, 36 + 2 + 2 * 37);

    std::vector<Request> two = choices(V, 10);
    two.resize(2);
    auto leader = e.submit(two[0]);
    auto follower = e.submit(two[1]);
    ASSERT_TRUE(leader && follower);
    std::vector<TokenEvent> events, mine;
    ASSERT_TRUE(e.step(&events).is_ok());  // the leader's first chunk
    e.cancel(*leader);
    while (!e.idle()) {
        events.clear();
        ASSERT_TRUE(e.step(&events).is_ok());
        for (const TokenEvent& ev : events)
            if (ev.id == *follower) mine.push_back(ev);
    }
    EXPECT_EQ(test::tokens_of(mine), test::tokens_of(apart[1]));

    std::vector<Request> penalised = choices(V, 11);
    for (Request& r : penalised) r.rules.presence_penalty = 0.5f;
    const int64_t fed1 = e.prompt_tokens_fed();
    test::run_requests(e, penalised);
    EXPECT_EQ(e.prompt_tokens_fed() - fed1, 4 * 37);
}

// n-gram drafts and logit_bias with a shared prompt (kjv-tiny repeats itself): the tokens apart.
TEST(SharedPrompt, WithDraftsAndBiases) {
    auto engine = test::request_engine(3, DSV4_KJV_DIR);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    std::vector<Request> reqs(3);
    for (int i = 0; i < 3; ++i) {
        reqs[i].prompt = {0, 1288, 119, 1288, 119};
        reqs[i].max_tokens = 24;
        reqs[i].speculative = Speculation::kNgram;
        reqs[i].sampling = {0.7f, 0, 1.0f, 100u + i};
        reqs[i].rules.logit_bias = {{119, 1.5f}};
        reqs[i].share_prompt = 3;
    }
    std::vector<std::vector<TokenEvent>> apart;
    for (Request r : reqs) {
        r.share_prompt = 0;
        apart.push_back(test::run_requests(e, {r})[0]);
    }
    const int64_t fed0 = e.prompt_tokens_fed();
    const auto shared = test::run_requests(e, reqs);
    EXPECT_EQ(e.prompt_tokens_fed() - fed0, 4 + 3);
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(test::tokens_of(shared[i]), test::tokens_of(apart[i])) << "choice " << i;
}

}  // namespace
}  // namespace shared_prompt_test
}  // namespace dsv4
