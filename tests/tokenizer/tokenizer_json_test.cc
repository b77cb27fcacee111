// tokenizer.json handling on a small hand-made file (tests/data/tokenizer/tiny_tokenizer.json):
// merges, Split steps, added-token flags, and the errors for what is not supported. The
// expected ids were produced by HF tokenizers 0.23.2 from the same file.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dsv4/tokenizer.h"

namespace dsv4 {
namespace {

using nlohmann::json;

json tiny_json() {
    std::ifstream in(DSV4_TOKENIZER_DATA_DIR "/tiny_tokenizer.json");
    std::stringstream text;
    text << in.rdbuf();
    return json::parse(text.str());
}

Tokenizer tiny(const json& j = tiny_json()) {
    auto t = Tokenizer::from_json(j.dump());
    EXPECT_TRUE(t.has_value()) << t.status().message();
    return std::move(t).value();
}

TEST(TokenizerJson, EncodesLikeHf) {
    const Tokenizer t = tiny();
    const std::pair<std::string, std::vector<int32_t>> cases[] = {
        {"abc abd", {257, 32, 256, 100}},
        {"a <L>b", {97, 264, 98}},   // lstrip takes the space
        {"a\u3000 <L>", {97, 264}},  // ... any Unicode whitespace
        {"<R>  b", {265, 98}},       // rstrip
        {"<R>\u2028x", {265, 120}},
        {"x<W>", {120, 60, 87, 62}},  // single_word: glued to a word, not matched
        {" <W> ", {32, 266, 32}},
        {"<W>", {266}},
        {"_<W>", {95, 60, 87, 62}},
        {"\u00e9<W>", {260, 60, 87, 62}},
        {"<W>1", {60, 87, 62, 49}},
        {"<s>[X]<s>", {262, 263, 262}},
        {"x<ab>", {120, 267}},  // non-normalized tokens are matched first
        {"<s><s>", {262, 262}},
        {"<s><s><s>", {262, 262, 262}},
        {"123 12", {261, 51, 32, 261}},  // \p{N}{1,2} split before the BPE
        {"\u00e9\u00e9 ab", {260, 260, 32, 256}},
        {"<L><L> <L>", {264, 264, 264}},
        {"<R> <R> x", {265, 265, 120}},
        {"  <L>  ", {264, 32, 32}},
        {"", {}},
        {std::string("a\0b", 3), {97, 0, 98}},
        {"[X][X]x<ab", {263, 263, 268}},
    };
    for (const auto& [text, ids] : cases) EXPECT_EQ(t.encode(text), ids) << text;
}

TEST(TokenizerJson, ParseSpecialFalseKeepsSpecialsAsText) {
    const Tokenizer t = tiny();
    EXPECT_EQ(t.encode("<s>[X]", false), (std::vector<int32_t>{60, 115, 62, 263}));
    EXPECT_EQ(t.decode(t.encode("<s>[X]", false)), "<s>[X]");
}

TEST(TokenizerJson, MergesAsPairsLoadTheSame) {
    json j = tiny_json();
    json pairs = json::array();
    for (const auto& m : j["model"]["merges"]) {
        const std::string s = m;
        pairs.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
    }
    j["model"]["merges"] = pairs;
    EXPECT_EQ(tiny(j).encode("abc abd 12"), tiny().encode("abc abd 12"));
}

TEST(TokenizerJson, IgnoreMergesTakesWholeVocabTokens) {
    json j = tiny_json();
    j["model"]["vocab"]["abd"] = 400;
    EXPECT_EQ(tiny(j).encode("abd"), (std::vector<int32_t>{256, 100}));
    j["model"]["ignore_merges"] = true;
    EXPECT_EQ(tiny(j).encode("abd"), (std::vector<int32_t>{400}));
}

TEST(TokenizerJson, LookupsAndDecode) {
    const Tokenizer t = tiny();
    EXPECT_EQ(t.vocab_size(), 270);
    EXPECT_EQ(t.token_to_id("ab"), 256);
    EXPECT_EQ(t.token_to_id("<s>"), 262);
    EXPECT_EQ(t.id_to_token(257), "abc");
    EXPECT_EQ(t.id_to_token(263), "[X]");
    EXPECT_FALSE(t.id_to_token(5000).has_value());
    EXPECT_FALSE(t.token_to_id("nope").has_value());
    // Unknown ids are skipped, like HF.
    EXPECT_EQ(t.decode(std::vector<int32_t>{257, -1, 5000, 262}), "abc<s>");
}

TEST(TokenizerJson, AddedTokenTables) {
    Tokenizer t = tiny();
    const AddedToken extra{280, "<new>", true, false, false, false, false};
    ASSERT_TRUE(t.set_added_tokens(std::vector<AddedToken>{extra}, AddedTokensMode::kOverlay));
    EXPECT_EQ(t.encode("<new><s>"), (std::vector<int32_t>{280, 262}));
    EXPECT_EQ(t.vocab_size(), 281);
    ASSERT_TRUE(t.set_added_tokens(std::vector<AddedToken>{extra}, AddedTokensMode::kReplace));
    EXPECT_EQ(t.encode("<new>"), (std::vector<int32_t>{280}));
    EXPECT_FALSE(t.token_to_id("<s>").has_value());
    // Invalid tables are refused and leave the table as it was.
    const AddedToken twice{281, "<new>", true, false, false, false, false};
    EXPECT_FALSE(
        t.set_added_tokens(std::vector<AddedToken>{extra, twice}, AddedTokensMode::kReplace));
    EXPECT_FALSE(
        t.set_added_tokens(std::vector<AddedToken>{{-3, "x", true}}, AddedTokensMode::kReplace));
    EXPECT_FALSE(
        t.set_added_tokens(std::vector<AddedToken>{{290, "", true}}, AddedTokensMode::kReplace));
    EXPECT_EQ(t.encode("<new>"), (std::vector<int32_t>{280}));
}

// Each unsupported component is refused with an error that names it.
TEST(TokenizerJson, UnsupportedComponentsAreNamed) {
    struct Case {
        const char* pointer;
        json value;
        const char* expected;
    };
    const Case cases[] = {
        {"/normalizer", {{"type", "NFKC"}}, "NFKC"},
        {"/normalizer",
         {{"type", "Sequence"}, {"normalizers", {{{"type", "Lowercase"}}}}},
         "Lowercase"},
        {"/pre_tokenizer", {{"type", "Whitespace"}}, "ByteLevel"},
        {"/pre_tokenizer/pretokenizers/0/type", "Digits", "Digits"},
        {"/pre_tokenizer/pretokenizers/0/behavior", "MergedWithPrevious", "MergedWithPrevious"},
        {"/pre_tokenizer/pretokenizers/0/invert", true, "invert"},
        {"/pre_tokenizer/pretokenizers/0/pattern", {{"Regex", "\\bx"}}, "\\b"},
        {"/pre_tokenizer/pretokenizers/0/pattern", {{"Regex", "(unclosed"}}, "compile"},
        {"/pre_tokenizer/pretokenizers/2/add_prefix_space", true, "add_prefix_space"},
        {"/decoder", {{"type", "WordPiece"}}, "WordPiece"},
        {"/post_processor", {{"type", "RobertaProcessing"}}, "RobertaProcessing"},
        {"/model/type", "WordPiece", "WordPiece"},
        {"/model/byte_fallback", true, "byte_fallback"},
        {"/model/continuing_subword_prefix", "##", "continuing_subword_prefix"},
        {"/model/merges/0", "a b c", "a b c"},
        {"/model/merges/0", "a zz", "zz"},
        {"/model/vocab/!", 97, "repeat"},
        {"/added_tokens/0/content", "", "empty"},
    };
    for (const Case& c : cases) {
        json j = tiny_json();
        j[json::json_pointer(c.pointer)] = c.value;
        auto t = Tokenizer::from_json(j.dump(), "tiny.json");
        ASSERT_FALSE(t.has_value()) << c.pointer << " = " << c.value.dump();
        EXPECT_NE(t.status().message().find(c.expected), std::string::npos) << t.status().message();
        EXPECT_NE(t.status().message().find("tiny.json"), std::string::npos);
    }
    json no_byte = tiny_json();
    no_byte["model"]["vocab"].erase("a");
    no_byte["model"]["merges"] = json::array();
    auto t = Tokenizer::from_json(no_byte.dump());
    ASSERT_FALSE(t.has_value());
    EXPECT_NE(t.status().message().find("byte 0x61"), std::string::npos) << t.status().message();
    EXPECT_FALSE(Tokenizer::from_json("{not json").has_value());
    EXPECT_FALSE(Tokenizer::load("/nonexistent/tokenizer.json").has_value());
}

TEST(TokenizerJson, AcceptedVariants) {
    json j = tiny_json();
    j["normalizer"] = nullptr;
    j["post_processor"] = {{"type", "TemplateProcessing"}};
    j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteLevel"}}}}};
    j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "1"}};
    const Tokenizer t = tiny(j);
    EXPECT_EQ(t.encode("a1b"), (std::vector<int32_t>{97, 98}));  // the 1 is removed
    // A single ByteLevel with use_regex splits with GPT-2's pattern.
    j = tiny_json();
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    EXPECT_EQ(tiny(j).encode("ab ab"), (std::vector<int32_t>{256, 32, 256}));
}

}  // namespace
}  // namespace dsv4
