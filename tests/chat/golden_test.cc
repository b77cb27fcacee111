// DeepSeek's reference encoder outputs (tests/data/chat): every prompt reproduced byte for
// byte, every rejection rejected, every completion parsed to the same message.
#include <gtest/gtest.h>

#include <optional>

#include <fstream>
#include <string>
#include <vector>

#include "dsv4/chat.h"

namespace dsv4::chat {
namespace {

// The lines are read with Python's number model (big integers, -0.0), as the reference read
// its inputs.
std::vector<Json> read_cases(const std::string& name) {
    std::vector<Json> cases;
    std::ifstream in(std::string(DSV4_CHAT_DATA_DIR) + "/" + name);
    EXPECT_TRUE(in.good()) << "cannot open " << name;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        auto value = parse_json(line);
        EXPECT_TRUE(value.has_value()) << name << ": " << value.status().message();
        if (value) cases.push_back(std::move(value).value());
    }
    return cases;
}

std::string label(const Json& c, size_t index) {
    return c.contains("id") ? c["id"].get<std::string>() : "line " + std::to_string(index + 1);
}

// The reference's reason, when it is one the reference gives on purpose (its asserts and
// ValueErrors, stored with or without the class name); nullopt for the interpreter's own
// TypeError/AttributeError texts on malformed input, which an independent port words
// differently (it still must reject), and for str.join's TypeError that the reference
// surfaces without a class name.
std::optional<std::string> deliberate_reason(const std::string& message) {
    const size_t colon = message.find(": ");
    std::string cls = colon == std::string::npos ? "" : message.substr(0, colon);
    std::string rest = message;
    if (cls.size() > 5 && cls.compare(cls.size() - 5, 5, "Error") == 0)
        rest = message.substr(colon + 2);
    else
        cls.clear();
    if (cls == "TypeError" || cls == "AttributeError" || cls == "KeyError" ||
        cls == "IndexError" || rest.rfind("sequence item ", 0) == 0)
        return std::nullopt;
    return rest;
}

// Returns the number of cases that expect a rejection.
int check_encode_cases(const std::vector<Json>& cases) {
    int errors = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const Json& c = cases[i];
        const EncodingVersion version =
            c.contains("encoding") ? *parse_encoding_version(c["encoding"].get<std::string>())
                                   : EncodingVersion::kV4;
        auto prompt = encode_messages_kwargs(c["messages"], c["kwargs"], version);
        if (c.contains("error")) {
            ++errors;
            EXPECT_FALSE(prompt.has_value())
                << label(c, i) << " should be rejected (" << c["error_message"].get<std::string>()
                << "), got " << *prompt;
            const auto reason = deliberate_reason(c["error_message"].get<std::string>());
            if (!prompt && reason) {
                EXPECT_EQ(prompt.status().message(), *reason) << label(c, i);
            }
        } else {
            EXPECT_TRUE(prompt.has_value()) << label(c, i) << ": " << prompt.status().message();
            if (prompt) {
                EXPECT_EQ(*prompt, c["prompt"].get<std::string>()) << label(c, i);
            }
        }
    }
    return errors;
}

int check_parse_cases(const std::vector<Json>& cases) {
    int errors = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const Json& c = cases[i];
        const ThinkingMode mode =
            c["thinking_mode"] == "thinking" ? ThinkingMode::kThinking : ThinkingMode::kChat;
        auto result = parse_completion(c["text"].get<std::string>(), mode);
        if (c.contains("error")) {
            ++errors;
            EXPECT_FALSE(result.has_value()) << label(c, i) << " should be rejected";
            const auto reason = deliberate_reason(c["error_message"].get<std::string>());
            if (!result && reason) {
                EXPECT_EQ(result.status().message(), *reason) << label(c, i);
            }
        } else {
            EXPECT_TRUE(result.has_value()) << label(c, i) << ": " << result.status().message();
            if (result) {
                EXPECT_EQ(*result, c["result"]) << label(c, i) << "\n got " << result->dump();
            }
        }
    }
    return errors;
}

TEST(ChatGolden, EncodeEveryCase) {
    const std::vector<Json> cases = read_cases("encode.jsonl");
    ASSERT_EQ(cases.size(), 60u);
    EXPECT_EQ(check_encode_cases(cases), 6);
}

TEST(ChatGolden, ParseEveryCase) {
    const std::vector<Json> cases = read_cases("parse.jsonl");
    ASSERT_EQ(cases.size(), 22u);
    EXPECT_EQ(check_parse_cases(cases), 11);
}

TEST(ChatGolden, EncodeRandomInputsLikeTheReference) {
    const std::vector<Json> cases = read_cases("encode_fuzz.jsonl");
    ASSERT_EQ(cases.size(), 360u);
    EXPECT_GT(check_encode_cases(cases), 0);
}

TEST(ChatGolden, ParseRandomCompletionsLikeTheReference) {
    const std::vector<Json> cases = read_cases("parse_fuzz.jsonl");
    ASSERT_EQ(cases.size(), 300u);
    EXPECT_GT(check_parse_cases(cases), 0);
}

}  // namespace
}  // namespace dsv4::chat
