// The typed API (EncodeOptions) against the reference's keyword arguments, the encoding
// versions' reasoning-effort tables, and context handling.
#include <gtest/gtest.h>

#include "dsv4/chat.h"

namespace dsv4::chat {
namespace {

Json messages() {
    return *parse_json(R"([{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": "Hello!", "reasoning_content": "greet"},
                           {"role": "user", "content": "2+2?"}])");
}

std::string encode_or_fail(const Json& m, const EncodeOptions& o) {
    auto prompt = encode_messages(m, o);
    EXPECT_TRUE(prompt.has_value()) << prompt.status().message();
    return prompt ? *prompt : std::string();
}

TEST(ChatOptions, TypedOptionsMatchKeywordArguments) {
    EncodeOptions o;
    o.thinking_mode = ThinkingMode::kChat;
    const Json kwargs = *parse_json(R"({"thinking_mode": "chat", "drop_thinking": true,
        "add_default_bos_token": true, "reasoning_effort": null})");
    EXPECT_EQ(encode_or_fail(messages(), o), *encode_messages_kwargs(messages(), kwargs));
    EXPECT_EQ(encode_or_fail(messages(), o),
              "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜></think>Hello!"
              "<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜></think>");
}

TEST(ChatOptions, ThinkingDropsEarlierReasoning) {
    EncodeOptions o;
    EXPECT_EQ(encode_or_fail(messages(), o),
              "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜></think>Hello!"
              "<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜><think>");
    o.drop_thinking = false;
    EXPECT_EQ(encode_or_fail(messages(), o),
              "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Hi<｜Assistant｜><think>greet</think>"
              "Hello!<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜><think>");
}

TEST(ChatOptions, ReasoningEffortPerVersion) {
    const Json m = *parse_json(R"([{"role": "user", "content": "Q"}])");
    const std::string tail = "<｜User｜>Q<｜Assistant｜><think>";
    const std::string absolute =
        "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n";
    const std::string beyond = "Reasoning Effort: Beyond maximum — exhaustive, relentless";
    EncodeOptions o;
    // The original release: null and high are the same; max adds the Absolute paragraph.
    o.reasoning_effort = ReasoningEffort::kHigh;
    EXPECT_EQ(encode_or_fail(m, o), "<｜begin▁of▁sentence｜>" + tail);
    o.reasoning_effort = ReasoningEffort::kMax;
    EXPECT_EQ(encode_or_fail(m, o).rfind("<｜begin▁of▁sentence｜>" + absolute, 0), 0u);
    o.reasoning_effort = ReasoningEffort::kLow;
    EXPECT_FALSE(encode_messages(m, o).has_value());
    // Flash-0731: low (= default) nothing, high the Absolute paragraph, max the Beyond one.
    o.version = EncodingVersion::kV4Flash0731;
    for (ReasoningEffort e : {ReasoningEffort::kDefault, ReasoningEffort::kLow}) {
        o.reasoning_effort = e;
        EXPECT_EQ(encode_or_fail(m, o), "<｜begin▁of▁sentence｜>" + tail);
    }
    o.reasoning_effort = ReasoningEffort::kHigh;
    const std::string high = encode_or_fail(m, o);
    EXPECT_EQ(high.rfind("<｜begin▁of▁sentence｜>" + absolute, 0), 0u);
    o.reasoning_effort = ReasoningEffort::kMax;
    const std::string max = encode_or_fail(m, o);
    EXPECT_EQ(max.rfind("<｜begin▁of▁sentence｜>" + beyond, 0), 0u);
    EXPECT_EQ(max.substr(max.size() - tail.size()), tail);
    // Chat mode never adds a paragraph.
    o.thinking_mode = ThinkingMode::kChat;
    EXPECT_EQ(encode_or_fail(m, o), "<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜></think>");
}

TEST(ChatOptions, VersionNames) {
    EXPECT_EQ(parse_encoding_version("v4"), EncodingVersion::kV4);
    EXPECT_EQ(parse_encoding_version("v4-flash-0731"), EncodingVersion::kV4Flash0731);
    EXPECT_FALSE(parse_encoding_version("v3").has_value());
    EXPECT_EQ(encoding_version_name(EncodingVersion::kV4Flash0731), "v4-flash-0731");
}

TEST(ChatOptions, ContextIsNotEmitted) {
    EncodeOptions o;
    o.context = messages();
    const Json next =
        *parse_json(R"([{"role": "assistant", "content": "4", "reasoning_content": "add"}])");
    // No BOS with a context; the new assistant turn follows the last user, so it keeps its
    // reasoning.
    EXPECT_EQ(encode_or_fail(next, o), "add</think>4<｜end▁of▁sentence｜>");
}

TEST(ChatOptions, KeywordArgumentErrors) {
    const Json m = messages();
    EXPECT_FALSE(encode_messages_kwargs(m, *parse_json(R"({"drop_thinking": true})")).has_value());
    EXPECT_FALSE(encode_messages_kwargs(m, *parse_json(R"({"thinking_mode": "chat", "tools": []})"))
                     .has_value());
    EXPECT_FALSE(encode_messages_kwargs(m, *parse_json("[]")).has_value());
    // thinking_mode is only checked when something is rendered.
    EXPECT_EQ(*encode_messages_kwargs(Json::array(), *parse_json(R"({"thinking_mode": "bad"})")),
              "<｜begin▁of▁sentence｜>");
}

}  // namespace
}  // namespace dsv4::chat
