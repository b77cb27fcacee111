// The golden encodings of HF tokenizers (tests/data/tokenizer/cases.jsonl) and the two V4 test
// vectors of FORMATS.md §4.1.
#include <gtest/gtest.h>

#include "test_support.h"

namespace dsv4 {
namespace {

TEST(TokenizerGolden, EveryCaseEncodesExactlyAndDecodesBack) {
    const Tokenizer* tok = test::deepseek_tokenizer();
    ASSERT_NE(tok, nullptr);
    const auto cases = test::read_json_lines(DSV4_TOKENIZER_DATA_DIR "/cases.jsonl");
    ASSERT_EQ(cases.size(), 188u);
    int roundtrips = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::string text = cases[i]["text"];
        const std::vector<int32_t> expected = cases[i]["ids"];
        EXPECT_EQ(tok->encode(text), expected) << "case " << i << ": " << text;
        if (cases[i]["roundtrip"].get<bool>()) {
            EXPECT_EQ(tok->decode(expected), text) << "case " << i;
            ++roundtrips;
        }
    }
    EXPECT_GT(roundtrips, 0);
}

// More HF encodings: every range of code points whose Unicode category HF's regex engine knows
// and PCRE2's tables do not, random Unicode, slices of text files.
TEST(TokenizerGolden, MoreHfEncodings) {
    const Tokenizer* tok = test::deepseek_tokenizer();
    ASSERT_NE(tok, nullptr);
    const auto cases = test::read_json_lines(DSV4_TOKENIZER_DATA_DIR "/hf_extra.jsonl");
    ASSERT_EQ(cases.size(), 787u);
    for (size_t i = 0; i < cases.size(); ++i) {
        const std::string text = cases[i]["text"];
        const std::vector<int32_t> expected = cases[i]["ids"];
        EXPECT_EQ(tok->encode(text), expected)
            << "line " << i + 1 << " (" << cases[i]["note"].get<std::string>() << "): " << text;
        EXPECT_EQ(tok->decode(expected), text) << "line " << i + 1;
    }
}

TEST(TokenizerGolden, V4PlainTextVector) {
    const Tokenizer* tok = test::deepseek_v4_tokenizer();
    ASSERT_NE(tok, nullptr);
    const std::string text = "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ";
    const std::vector<int32_t> expected = {19923, 3,    223,   5464, 5008, 1175,  19,    940, 223,
                                           19,    438,  223,   20,   6113, 257,   76589, 131, 100,
                                           76032, 1628, 76589, 131,  108,  76589, 131,   98};
    EXPECT_EQ(tok->encode(text), expected);
    EXPECT_EQ(tok->decode(expected), text);
}

TEST(TokenizerGolden, V4ChatPromptVector) {
    const Tokenizer* tok = test::deepseek_v4_tokenizer();
    ASSERT_NE(tok, nullptr);
    const std::string text =
        "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>";
    const std::vector<int32_t> expected = {128803, 30594, 128804, 128821, 36101, 128822, 7624, 1};
    EXPECT_EQ(tok->encode(text), expected);
    EXPECT_EQ(tok->decode(expected), text);
}

TEST(TokenizerGolden, V4TableIds) {
    const Tokenizer* tok = test::deepseek_v4_tokenizer();
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->vocab_size(), 129280);
    const std::pair<const char*, int32_t> ids[] = {
        {"<｜begin▁of▁sentence｜>", 0},
        {"<｜end▁of▁sentence｜>", 1},
        {"<｜System｜>", 128799},
        {"<｜User｜>", 128803},
        {"<｜Assistant｜>", 128804},
        {"<think>", 128821},
        {"</think>", 128822},
        {"｜DSML｜", 128825},
        {"<｜latest_reminder｜>", 128828},
        {"<｜action｜>", 128829},
        {"<｜query｜>", 128830},
        {"<｜authority｜>", 128831},
        {"<｜domain｜>", 128832},
        {"<｜title｜>", 128836},
        {"<｜read_url｜>", 128845},
        {"<｜image｜>", 129279},
    };
    for (const auto& [token, id] : ids) {
        EXPECT_EQ(tok->token_to_id(token), id) << token;
        EXPECT_EQ(tok->id_to_token(id), token) << id;
    }
    // The V3 table's <｜place▁holder▁no▁799｜> is gone: V4 puts <｜System｜> there.
    EXPECT_FALSE(tok->token_to_id("<｜place▁holder▁no▁799｜>").has_value());
}

}  // namespace
}  // namespace dsv4
