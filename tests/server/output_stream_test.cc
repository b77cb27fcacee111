// OutputStream on scripted token sequences through the byte-level test tokenizer (the V4
// markers are single tokens there, as in the real one): a tool call produced token by token
// gives OpenAI deltas and a final message equal to chat::parse_completion's; stop strings cut
// across tokens end the text before the match.
#include "server/output_stream.h"

#include <gtest/gtest.h>

#include "dsv4/tokenizer.h"

namespace dsv4::server {
namespace {

const Tokenizer& tokenizer() {
    static const Tokenizer tok = [] {
        auto t = load_model_tokenizer("", DSV4_TEST_TOKENIZER, nullptr);
        DSV4_ASSERT(t.has_value(), t.status().message());
        return std::move(*t);
    }();
    return tok;
}

GenerationSpec chat_spec(bool thinking) {
    GenerationSpec spec;
    spec.endpoint = Endpoint::kChat;
    spec.encode.thinking_mode =
        thinking ? chat::ThinkingMode::kThinking : chat::ThinkingMode::kChat;
    return spec;
}

struct Output {
    StreamDelta joined;
    chat::Json message;
};

Output run(const GenerationSpec& spec, const std::string& text) {
    OutputStream out(tokenizer(), spec);
    Output r;
    auto take = [&](const StreamDelta& d) {
        r.joined.reasoning += d.reasoning;
        r.joined.content += d.content;
        for (const auto& t : d.tool_calls) r.joined.tool_calls.push_back(t);
    };
    for (int32_t id : tokenizer().encode(text, /*parse_special=*/true)) {
        take(out.push(id));
        if (out.stopped()) break;
    }
    take(out.finish());
    r.message = out.message("call_x_");
    return r;
}

TEST(OutputStream, TheMarkersAreSingleTokens) {
    for (const char* marker : {"｜DSML｜", "</think>", "<think>", "<｜end▁of▁sentence｜>"})
        EXPECT_EQ(tokenizer().encode(marker, true).size(), 1u) << marker;
}

TEST(OutputStream, ToolCallTokenByToken) {
    const std::string turn =
        "Let me look.</think>On it.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"search\">\n"
        "<｜DSML｜parameter name=\"q\" string=\"true\">dsv4 \"server\"</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"n\" string=\"false\">3</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    const Output r = run(chat_spec(true), turn);
    EXPECT_EQ(r.joined.reasoning, "Let me look.");
    EXPECT_EQ(r.joined.content, "On it.");
    ASSERT_FALSE(r.joined.tool_calls.empty());
    EXPECT_EQ(r.joined.tool_calls[0].name, "search");
    std::string args;
    for (const auto& t : r.joined.tool_calls) args += t.arguments;
    EXPECT_EQ(args, R"({"q": "dsv4 \"server\"", "n": 3})");
    EXPECT_EQ(r.message["reasoning_content"], "Let me look.");
    EXPECT_EQ(r.message["content"], "On it.");
    ASSERT_EQ(r.message["tool_calls"].size(), 1u);
    EXPECT_EQ(r.message["tool_calls"][0]["id"], "call_x_0");
    EXPECT_EQ(r.message["tool_calls"][0]["function"]["name"], "search");
    EXPECT_EQ(r.message["tool_calls"][0]["function"]["arguments"], args);
}

TEST(OutputStream, AnUnfinishedTurnFallsBackToTheStreamedParse) {
    // Cut by max_tokens inside the reasoning: the reference parser rejects it (no </think>).
    const Output r = run(chat_spec(true), "still thinking");
    EXPECT_EQ(r.message["reasoning_content"], "still thinking");
    EXPECT_EQ(r.message["content"], "");
    EXPECT_FALSE(r.message.contains("tool_calls"));
}

TEST(OutputStream, StopStringsCutAcrossTokens) {
    GenerationSpec spec;
    spec.endpoint = Endpoint::kCompletions;
    spec.stop = {"STOP", "zz"};
    const Output r = run(spec, "one two STOP three");
    EXPECT_EQ(r.joined.content, "one two ");
    const Output partial = run(spec, "almost ST");  // a prefix of a stop string is text at the end
    EXPECT_EQ(partial.joined.content, "almost ST");
    GenerationSpec chat = chat_spec(false);
    chat.stop = {"\n\n"};
    const Output c = run(chat, "para one\n\npara two");
    EXPECT_EQ(c.joined.content, "para one");
    EXPECT_EQ(c.message["content"], "para one");
    // include_stop_str_in_output: the output ends with the match (the earliest one).
    spec.include_stop_str_in_output = true;
    EXPECT_EQ(run(spec, "one two STOP three zz").joined.content, "one two STOP");
    chat.include_stop_str_in_output = true;
    EXPECT_EQ(run(chat, "para one\n\npara two").message["content"], "para one\n\n");
    // min_tokens: a stop string matches only where it ends after the first min_tokens tokens'
    // text (vLLM's rule): not inside it, but across its end.
    spec.include_stop_str_in_output = false;
    const auto tokens_in = [](const char* t) {
        return static_cast<int>(tokenizer().encode(t, true).size());
    };
    spec.rules.min_tokens = tokens_in("zz a");
    EXPECT_EQ(run(spec, "zz abc zz def").joined.content, "zz abc ");
    spec.rules.min_tokens = tokens_in("one two ST");
    EXPECT_EQ(run(spec, "one two STOP three").joined.content, "one two ");
    // (A stop inside the first tokens that is also the start of a longer one does not match
    // once the text goes on past them.)
    GenerationSpec two = spec;
    two.stop = {"ab", "abc"};
    two.rules.min_tokens = tokens_in("xab");
    EXPECT_EQ(run(two, "xabd ab").joined.content, "xabd ");
}

}  // namespace
}  // namespace dsv4::server
