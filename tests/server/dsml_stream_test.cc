// The streaming DSML parser against chat::parse_completion (the port of DeepSeek's reference
// parser): every well-formed turn, cut into pieces at every character boundary (so each marker
// is split everywhere it can be), must stream to exactly what the reference parses from the
// whole text; nothing of a marker may leak into content on the way.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dsv4/chat.h"
#include "server/dsml_stream.h"

namespace dsv4::server {
namespace {

const std::string kEos = "<｜end▁of▁sentence｜>";

// Byte offsets where a UTF-8 character starts (pieces are whole characters, as
// TokenStreamDecoder gives them).
std::vector<size_t> char_starts(const std::string& s) {
    std::vector<size_t> at;
    for (size_t i = 0; i < s.size(); ++i)
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) at.push_back(i);
    return at;
}

// Cuts between every two characters.
std::vector<size_t> every_char(const std::string& s) {
    const auto at = char_starts(s);
    return at.size() > 1 ? std::vector<size_t>(at.begin() + 1, at.end()) : std::vector<size_t>();
}

struct Streamed {
    ParsedTurn joined;  // the deltas joined
    int name_deltas = 0;
};

Streamed stream(const std::string& text, bool thinking, const std::vector<size_t>& cuts) {
    DsmlStreamParser p(thinking);
    Streamed s;
    auto take = [&](const StreamDelta& d) {
        s.joined.reasoning += d.reasoning;
        s.joined.content += d.content;
        for (const ToolCallDelta& t : d.tool_calls) {
            if (!t.name.empty()) {
                EXPECT_EQ(t.index, static_cast<int>(s.joined.tool_calls.size()));
                s.joined.tool_calls.push_back({t.name, {}});
                ++s.name_deltas;
            }
            ASSERT_LT(t.index, static_cast<int>(s.joined.tool_calls.size())) << "arguments first";
            s.joined.tool_calls[t.index].arguments += t.arguments;
        }
    };
    size_t from = 0;
    for (size_t cut : cuts) {
        StreamDelta d;
        p.push(std::string_view(text).substr(from, cut - from), d);
        take(d);
        from = cut;
    }
    StreamDelta d;
    p.push(std::string_view(text).substr(from), d);
    take(d);
    StreamDelta end;
    p.finish(end);
    take(end);
    return s;
}

void expect_matches_reference(const std::string& turn, bool thinking) {
    SCOPED_TRACE(turn);
    auto ref = chat::parse_completion(turn, thinking ? chat::ThinkingMode::kThinking
                                                     : chat::ThinkingMode::kChat);
    ASSERT_TRUE(ref.has_value()) << ref.status().message();
    const auto check = [&](const Streamed& s, const std::string& how) {
        SCOPED_TRACE(how);
        EXPECT_EQ(s.joined.reasoning, (*ref)["reasoning_content"].get<std::string>());
        EXPECT_EQ(s.joined.content, (*ref)["content"].get<std::string>());
        const auto& calls = (*ref)["tool_calls"];
        ASSERT_EQ(s.joined.tool_calls.size(), calls.size());
        EXPECT_EQ(s.name_deltas, static_cast<int>(calls.size()));
        for (size_t i = 0; i < calls.size(); ++i) {
            EXPECT_EQ(s.joined.tool_calls[i].name, calls[i]["function"]["name"].get<std::string>());
            EXPECT_EQ(s.joined.tool_calls[i].arguments,
                      calls[i]["function"]["arguments"].get<std::string>());
        }
    };
    // The EOS token ends the turn; the server does not pass its text on, so strip it here.
    const std::string text = turn.substr(0, turn.size() - kEos.size());
    check(stream(text, thinking, {}), "whole");
    const auto starts = char_starts(text);
    check(stream(text, thinking, every_char(text)), "one character per piece");
    for (size_t k = 1; k < starts.size(); ++k)
        check(stream(text, thinking, {starts[k]}), "two pieces cut at byte " + std::to_string(starts[k]));
    // And the EOS text itself arriving as text, cut anywhere, ends the turn the same way.
    check(stream(turn, thinking, every_char(turn)), "EOS streamed as text");
}

const std::string kCalls =
    "\n\n<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris \"FR\"\n\\ é</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">[1, 2]</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"now\">\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>";

TEST(DsmlStream, ContentOnly) {
    expect_matches_reference("Hello, world!" + kEos, false);
    expect_matches_reference("héllo 世界 ends with newlines\n\n" + kEos, false);
    expect_matches_reference("lookalikes: \n\n<b> </thin <｜DSML and \n\n<" + kEos, false);
    expect_matches_reference(kEos, false);
}

TEST(DsmlStream, ThinkingSplitsReasoningFromContent) {
    expect_matches_reference("Let me think.\nStep 1</think>The answer is 4." + kEos, true);
    expect_matches_reference("</think>" + kEos, true);
    expect_matches_reference("a < b </thinking? no</think>\n\nx" + kEos, true);
}

TEST(DsmlStream, ToolCallsStreamAsTheReferenceParsesThem) {
    expect_matches_reference("Checking." + kCalls + kEos, false);
    expect_matches_reference(kCalls + kEos, false);
    expect_matches_reference("I need the weather.</think>Checking." + kCalls + kEos, true);
    expect_matches_reference(
        "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
        "<｜DSML｜parameter name=\"x\" string=\"true\"></｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos,
        false);
}

TEST(DsmlStream, ABrokenBlockBecomesContent) {
    const std::string broken = "Hi\n\n<｜DSML｜tool_calls>\nnot a call";
    const Streamed s = stream(broken, false, every_char(broken));
    EXPECT_EQ(s.joined.content, broken);
    EXPECT_TRUE(s.joined.tool_calls.empty());
    // Cut off by max_tokens inside a parameter: the text is given back, not lost.
    const std::string cut = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                            "<｜DSML｜parameter name=\"x\" string=\"true\">abc";
    const Streamed c = stream(cut, false, {});
    EXPECT_EQ(c.joined.content, cut);
    ASSERT_EQ(c.joined.tool_calls.size(), 1u);
    EXPECT_EQ(c.joined.tool_calls[0].name, "f");
}

TEST(DsmlStream, HeldBackTextIsReleasedAtTheEnd) {
    DsmlStreamParser p(false);
    StreamDelta d;
    p.push("text\n", d);
    EXPECT_EQ(d.content, "text");  // "\n" may start "\n\n<｜DSML｜tool_calls"
    p.push("\n<", d);
    EXPECT_EQ(d.content, "text");
    StreamDelta end;
    p.finish(end);
    EXPECT_EQ(end.content, "\n\n<");
}

}  // namespace
}  // namespace dsv4::server
