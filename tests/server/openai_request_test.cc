// Request bodies to GenerationSpec: defaults, the fields that map onto the encoder and the
// sampler, and a 400 naming the field for each kind of mistake.
#include "server/openai_request.h"

#include <gtest/gtest.h>

namespace dsv4::server {
namespace {

ApiResult<GenerationSpec> chat(const std::string& body) {
    return parse_generation_request(Endpoint::kChat, body, chat::EncodingVersion::kV4);
}

// A completions body: prompt "a" and the `extra` fields (", \"key\": value...").
ApiResult<GenerationSpec> completion(const std::string& extra) {
    return parse_generation_request(Endpoint::kCompletions,
                                    R"({"model": "m", "prompt": "a")" + extra + "}",
                                    chat::EncodingVersion::kV4);
}

std::string param_of(const std::string& body) {
    auto r = chat(body);
    if (r) return "(accepted)";
    EXPECT_EQ(r.error().status, 400);
    return r.error().param;
}

TEST(OpenAIRequest, DefaultsAndMappedFields) {
    auto r = chat(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->max_tokens, 0);
    EXPECT_EQ(r->sampling.temperature, 0.0f);
    EXPECT_FALSE(r->stream);
    EXPECT_EQ(r->n, 1);
    EXPECT_EQ(r->encode.thinking_mode, chat::ThinkingMode::kChat);

    r = chat(
        R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                {"type": "text", "text": "b"}]}], "max_completion_tokens": 7, "top_k": -1, "top_p": 0.5,
                "temperature": 0.7, "seed": -3, "stop": "END", "stream": true,
                "stream_options": {"include_usage": true}, "reasoning_effort": "max", "n": 16})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->messages[0]["content"], "ab");
    EXPECT_EQ(r->max_tokens, 7);
    EXPECT_EQ(r->sampling.top_k, 0);
    EXPECT_FLOAT_EQ(r->sampling.top_p, 0.5f);
    EXPECT_EQ(r->sampling.seed, static_cast<uint64_t>(-3));
    EXPECT_EQ(r->stop, std::vector<std::string>{"END"});
    EXPECT_TRUE(r->stream && r->include_usage);
    EXPECT_FALSE(r->continuous_usage);
    EXPECT_EQ(r->encode.thinking_mode, chat::ThinkingMode::kThinking);
    EXPECT_EQ(r->n, 16);
    EXPECT_EQ(r->encode.reasoning_effort, chat::ReasoningEffort::kMax);
}

TEST(OpenAIRequest, ToolsGoOnTheSystemMessage) {
    const std::string tools =
        R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])";
    auto r =
        chat(R"({"model": "m", "messages": [{"role": "user", "content": "x"}], )" + tools + "}");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->messages.size(), 2u);
    EXPECT_EQ(r->messages[0]["role"], "system");
    EXPECT_EQ(r->messages[0]["tools"][0]["function"]["name"], "f");
    r = chat(
        R"({"model": "m", "tool_choice": "none", "messages": [{"role": "user", "content": "x"}], )" +
        tools + "}");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->messages.size(), 1u);
}

TEST(OpenAIRequest, InternalMessageKeysAreNotPassedOn) {
    auto r = chat(
        R"({"model": "m", "messages": [{"role": "user", "content": "x", "task": "t", "mask": 1}]})");
    ASSERT_TRUE(r);
    EXPECT_FALSE(r->messages[0].contains("task"));
    EXPECT_FALSE(r->messages[0].contains("mask"));
}

TEST(OpenAIRequest, MistakesName400Params) {
    const std::string m = R"("model": "m", )";
    const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
    EXPECT_EQ(param_of("{" + m + "\"messages\": 3}"), "messages");
    EXPECT_EQ(param_of(R"({"messages": [{"role": "user", "content": "x"}]})"), "model");
    EXPECT_EQ(param_of("{" + m + R"("messages": [{"role": "user"}]})"), "messages[0].content");
    EXPECT_EQ(param_of("{" + m + R"("messages": [{"role": "assistant", "tool_calls": [{}]}]})"),
              "messages[0].tool_calls[0]");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "n": 0})"), "n");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "n": 17})"), "n");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "n": 2.5})"), "n");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "top_p": 0})"), "top_p");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "max_tokens": 1.5})"), "max_tokens");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "max_tokens": 99999999999})"), "max_tokens");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "seed": 123456789012345678901234567890})"), "seed");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "stop": ["a", "b", "c", "d", "e"]})"), "stop");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "stop": [""]})"), "stop");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "temperature": NaN})"), "temperature");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "frequency_penalty": 2.5})"), "frequency_penalty");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "presence_penalty": "1"})"), "presence_penalty");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "repetition_penalty": 0})"), "repetition_penalty");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "min_tokens": -1})"), "min_tokens");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "logit_bias": [1]})"), "logit_bias");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "logit_bias": {"x": 1}})"), "logit_bias");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "logit_bias": {"12": 101}})"), "logit_bias");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "logit_bias": {"12": "1"}})"), "logit_bias");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "reasoning_effort": "huge"})"), "reasoning_effort");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "chat_template_kwargs": {"thinking": "yes"}})"),
              "chat_template_kwargs");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "response_format": {"type": "json_object"}})"),
              "response_format");
    EXPECT_EQ(param_of("{" + m + msgs + R"(, "tools": [{"type": "function"}]})"), "tools[0]");
    auto bad = chat("{\"model\": \"m\", ");
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().status, 400);
    EXPECT_NE(bad.error().message.find("not valid JSON"), std::string::npos);
}

// The logits rules: OpenAI's penalties and logit_bias, vLLM's repetition_penalty and min_tokens.
TEST(OpenAIRequest, LogitsRules) {
    const std::string head = R"({"model": "m", "messages": [{"role": "user", "content": "x"}])";
    auto r = chat(head + R"(, "presence_penalty": -1.5, "frequency_penalty": 0.25,
        "repetition_penalty": 1.2, "min_tokens": 3, "logit_bias": {"7": -100, "12": 2.5}})");
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->rules.presence_penalty, -1.5f);
    EXPECT_EQ(r->rules.frequency_penalty, 0.25f);
    EXPECT_EQ(r->rules.repetition_penalty, 1.2f);
    EXPECT_EQ(r->rules.min_tokens, 3);
    ASSERT_EQ(r->logit_bias.size(), 2u);
    std::map<int64_t, float> bias(r->logit_bias.begin(), r->logit_bias.end());
    EXPECT_EQ(bias[7], -100.0f);
    EXPECT_EQ(bias[12], 2.5f);
    auto plain = chat(head + R"(, "logit_bias": null, "presence_penalty": 0})");
    ASSERT_TRUE(plain);
    EXPECT_FALSE(plain->rules.any());
    EXPECT_TRUE(plain->logit_bias.empty());
}

// Log-probabilities: chat's logprobs + top_logprobs, completions' integer count (-1: none).
TEST(OpenAIRequest, Logprobs) {
    const std::string head = R"({"model": "m", "messages": [{"role": "user", "content": "x"}])";
    auto r = chat(head + "}");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->logprobs, -1);
    r = chat(head + R"(, "logprobs": true})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->logprobs, 0);
    r = chat(head + R"(, "logprobs": true, "top_logprobs": 20})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->logprobs, 20);
    r = chat(head + R"(, "logprobs": false})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->logprobs, -1);
    EXPECT_EQ(param_of(head + R"(, "top_logprobs": 2})"), "top_logprobs");
    EXPECT_EQ(param_of(head + R"(, "logprobs": true, "top_logprobs": 21})"), "top_logprobs");
    EXPECT_EQ(param_of(head + R"(, "logprobs": 3})"), "logprobs");
    auto k = completion(R"(, "logprobs": 5)");
    ASSERT_TRUE(k);
    EXPECT_EQ(k->logprobs, 5);
    k = completion(R"(, "logprobs": null)");
    ASSERT_TRUE(k);
    EXPECT_EQ(k->logprobs, -1);
    for (const char* bad :
         {R"(, "logprobs": 21)", R"(, "logprobs": -1)", R"(, "logprobs": true)"}) {
        k = completion(bad);
        ASSERT_FALSE(k) << bad;
        EXPECT_EQ(k.error().param, "logprobs") << bad;
    }
}

TEST(OpenAIRequest, CompletionPrompts) {
    auto parse = [](const std::string& body) {
        return parse_generation_request(Endpoint::kCompletions, body, chat::EncodingVersion::kV4);
    };
    auto r = parse(R"({"model": "m", "prompt": ["one text"]})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->prompt_text, "one text");
    r = parse(R"({"model": "m", "prompt": [[1, 2, 3]]})");
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->prompt_is_ids);
    EXPECT_EQ(r->prompt_ids.size(), 3u);
    EXPECT_FALSE(parse(R"({"model": "m", "prompt": ["a", "b"]})"));
    EXPECT_FALSE(parse(R"({"model": "m", "prompt": [1, "b"]})"));
    EXPECT_FALSE(parse(R"({"model": "m"})"));
}

// vLLM's extensions ignore_eos, stop_token_ids and include_stop_str_in_output (both endpoints),
// and completions' echo.
TEST(OpenAIRequest, VllmExtensionsAndEcho) {
    const std::string head = R"({"model": "m", "messages": [{"role": "user", "content": "x"}])";
    auto r = chat(head + "}");
    ASSERT_TRUE(r);
    EXPECT_FALSE(r->ignore_eos);
    EXPECT_TRUE(r->stop_token_ids.empty());
    EXPECT_FALSE(r->echo);
    r = chat(head + R"(, "ignore_eos": true, "stop_token_ids": [1, 7, 129279]})");
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->ignore_eos);
    EXPECT_EQ(r->stop_token_ids, (std::vector<int64_t>{1, 7, 129279}));
    EXPECT_FALSE(r->include_stop_str_in_output);
    r = chat(head + R"(, "stream_options": {"continuous_usage_stats": true}})");
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->continuous_usage);
    EXPECT_EQ(param_of(head + R"(, "stream_options": {"continuous_usage_stats": 1}})"),
              "stream_options.continuous_usage_stats");
    r = chat(head + R"(, "include_stop_str_in_output": true})");
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->include_stop_str_in_output);
    EXPECT_EQ(param_of(head + R"(, "include_stop_str_in_output": "y"})"),
              "include_stop_str_in_output");
    r = chat(head + R"(, "stop_token_ids": null})");
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->stop_token_ids.empty());
    EXPECT_EQ(param_of(head + R"(, "ignore_eos": 1})"), "ignore_eos");
    EXPECT_EQ(param_of(head + R"(, "stop_token_ids": 3})"), "stop_token_ids");
    EXPECT_EQ(param_of(head + R"(, "stop_token_ids": [1.5]})"), "stop_token_ids");
    EXPECT_EQ(param_of(head + R"(, "stop_token_ids": ["1"]})"), "stop_token_ids");
    std::string many = head + R"(, "stop_token_ids": [0)";
    for (int i = 1; i <= kMaxStopTokenIds; ++i) many += ", " + std::to_string(i);
    EXPECT_EQ(param_of(many + "]}"), "stop_token_ids");
    // (Ids outside the vocabulary are build_prompt's to refuse: it knows the vocabulary.)
    EXPECT_EQ(param_of(head + R"(, "echo": true})"), "echo");  // chat: not supported

    auto k = completion(R"(, "echo": true)");
    ASSERT_TRUE(k);
    EXPECT_TRUE(k->echo);
    k = completion(R"(, "echo": true, "logprobs": 2)");
    ASSERT_FALSE(k);
    EXPECT_EQ(k.error().param, "echo");
    k = completion(R"(, "echo": "yes")");
    ASSERT_FALSE(k);
    EXPECT_EQ(k.error().param, "echo");
}

}  // namespace
}  // namespace dsv4::server
