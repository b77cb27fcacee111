// The commands rank 0 of a server sends its other ranks (server/rank_commands.h): every field of
// a request survives the round trip, and anything else is a clear error.
#include "server/rank_commands.h"

#include <gtest/gtest.h>

namespace dsv4::server {
namespace {

TEST(RankCommands, EveryCommandRoundTrips) {
    Request r;
    r.prompt = {0, 17, 511, 2147483647};
    r.max_tokens = 33;
    r.sampling.temperature = 0.7f;
    r.sampling.top_k = 5;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = 18446744073709551615ull;
    r.stop_at_eos = false;
    r.speculative = Speculation::kNgram;
    r.draft_tokens = 3;
    r.logprobs = 4;
    r.rules.repetition_penalty = 1.25f;
    r.rules.frequency_penalty = -0.5f;
    r.rules.presence_penalty = 0.75f;
    r.rules.logit_bias = {{3, -100.0f}, {2147483647, 2.5f}};
    r.rules.min_tokens = 9;
    r.rules.min_tokens_stops = {4, 8};
    r.share_prompt = 18446744073709551615ull;
    auto s = decode_rank_command(encode_rank_command(RankCommand::submit(42, r)));
    ASSERT_TRUE(s) << s.status().message();
    EXPECT_EQ(s->op, RankCommand::Op::kSubmit);
    EXPECT_EQ(s->id, 42u);
    EXPECT_EQ(s->request.prompt, r.prompt);
    EXPECT_EQ(s->request.max_tokens, 33);
    EXPECT_EQ(s->request.sampling.temperature, 0.7f);
    EXPECT_EQ(s->request.sampling.top_k, 5);
    EXPECT_EQ(s->request.sampling.top_p, 0.9f);
    EXPECT_EQ(s->request.sampling.seed, r.sampling.seed);
    EXPECT_FALSE(s->request.stop_at_eos);
    EXPECT_EQ(s->request.speculative, Speculation::kNgram);
    EXPECT_EQ(s->request.draft_tokens, 3);
    EXPECT_EQ(s->request.logprobs, 4);
    const LogitsRules& u = s->request.rules;
    EXPECT_EQ(u.repetition_penalty, 1.25f);
    EXPECT_EQ(u.frequency_penalty, -0.5f);
    EXPECT_EQ(u.presence_penalty, 0.75f);
    ASSERT_EQ(u.logit_bias.size(), 2u);
    EXPECT_EQ(u.logit_bias[1].token, 2147483647);
    EXPECT_EQ(u.logit_bias[1].bias, 2.5f);
    EXPECT_EQ(u.logit_bias[0].bias, -100.0f);
    EXPECT_EQ(u.min_tokens, 9);
    EXPECT_EQ(u.min_tokens_stops, (std::vector<int32_t>{4, 8}));
    EXPECT_EQ(s->request.share_prompt, r.share_prompt);
    auto c = decode_rank_command(encode_rank_command(RankCommand::cancel(7)));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->op, RankCommand::Op::kCancel);
    EXPECT_EQ(c->id, 7u);
    EXPECT_EQ(decode_rank_command(encode_rank_command(RankCommand::step()))->op,
              RankCommand::Op::kStep);
    EXPECT_EQ(decode_rank_command(encode_rank_command(RankCommand::stop()))->op,
              RankCommand::Op::kStop);
}

TEST(RankCommands, AnythingElseIsAnError) {
    for (const char* text :
         {"", "not json", "[]", "{}", R"({"op": 3})", R"({"op": "jump"})", R"({"op": "cancel"})",
          R"({"op": "cancel", "id": "x"})", R"({"op": "submit", "id": 1})",
          R"({"op": "submit", "id": 1, "request": {"prompt": [1]}})"}) {
        const auto c = decode_rank_command(text);
        ASSERT_FALSE(c) << text;
        EXPECT_NE(c.status().message().find("rank 0"), std::string::npos) << text;
    }
    // A speculation kind past the enum.
    Request r;
    r.prompt = {5};
    std::string t = encode_rank_command(RankCommand::submit(1, r));
    t.replace(t.find("\"speculative\":0"), 15, "\"speculative\":9");
    EXPECT_FALSE(decode_rank_command(t));
}

}  // namespace
}  // namespace dsv4::server
