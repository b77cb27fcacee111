// Inputs HF never sees (bytes that are not UTF-8, NUL, megabyte lines) have defined results:
// encode never fails, decode_bytes gives the input back, decode gives valid UTF-8.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "base/utf8.h"
#include "test_support.h"
#include "tokenizer/loader.h"

namespace dsv4 {
namespace {

TEST(TokenizerRobustness, ArbitraryBytesRoundTrip) {
    const Tokenizer* tok = test::deepseek_tokenizer();
    ASSERT_NE(tok, nullptr);
    std::mt19937 rng(7);
    const std::string alphabet[] = {"a",
                                    " ",
                                    "\n",
                                    "1",
                                    "!",
                                    "é",
                                    "中",
                                    "😀",
                                    "<｜User｜>",
                                    "\xC3",
                                    "\xE4\xB8",
                                    "\xF0\x9F\x98",
                                    "\x80",
                                    "\xFF",
                                    "\xED\xA0\x80",
                                    "\xC0\xAF",
                                    std::string(1, '\0')};
    for (int iteration = 0; iteration < 3000; ++iteration) {
        std::string text;
        const int pieces = static_cast<int>(rng() % 24);
        for (int i = 0; i < pieces; ++i) {
            text += rng() % 4 == 0 ? std::string(1, static_cast<char>(rng() % 256))
                                   : alphabet[rng() % std::size(alphabet)];
        }
        const std::vector<int32_t> ids = tok->encode(text);
        ASSERT_EQ(tok->decode_bytes(ids), text) << iteration;
        const std::string decoded = tok->decode(ids);
        EXPECT_TRUE(utf8_valid(decoded)) << iteration;
        if (utf8_valid(text)) {
            EXPECT_EQ(decoded, text);
        }
    }
}

TEST(TokenizerRobustness, InvalidUtf8DecodesToReplacementCharacters) {
    const Tokenizer* tok = test::deepseek_tokenizer();
    ASSERT_NE(tok, nullptr);
    // One U+FFFD per maximal invalid subpart, as Rust's from_utf8_lossy.
    EXPECT_EQ(tok->decode(tok->encode("a\xFF"
                                      "b")),
              "a\uFFFD"
              "b");
    EXPECT_EQ(tok->decode(tok->encode("\xE4\xB8"
                                      "x")),
              "\uFFFD"
              "x");
    EXPECT_EQ(tok->decode(tok->encode("\xF0\x9F\x98")), "\uFFFD");
    EXPECT_EQ(tok->decode(tok->encode("\xED\xA0\x80")), "\uFFFD\uFFFD\uFFFD");
    // The valid text around a bad byte is encoded as it would be on its own.
    const std::vector<int32_t> hello = tok->encode("Hello");
    std::vector<int32_t> ids = tok->encode("Hello\xFF");
    ASSERT_EQ(ids.size(), hello.size() + 1);
    EXPECT_TRUE(std::equal(hello.begin(), hello.end(), ids.begin()));
}

TEST(TokenizerRobustness, EmbeddedNul) {
    const Tokenizer* tok = test::deepseek_tokenizer();
    ASSERT_NE(tok, nullptr);
    const std::string text("a\0b\0\0 c\0", 8);
    const std::vector<int32_t> ids = tok->encode(text);
    EXPECT_EQ(tok->decode(ids), text);
    // U+0100 stands for byte 0 in the byte-level alphabet.
    EXPECT_EQ(std::count(ids.begin(), ids.end(), tok->token_to_id("\xC4\x80").value()), 4);
}

TEST(TokenizerRobustness, OneMegabyteSingleLines) {
    const Tokenizer* tok = test::deepseek_tokenizer();
    ASSERT_NE(tok, nullptr);
    const size_t mb = 1 << 20;
    std::mt19937 rng(3);
    std::string random_text;
    const char* const words[] = {"the ", "中文", "123", "!?", "  ", "é", "\t", "😀", "x"};
    while (random_text.size() < mb) random_text += words[rng() % std::size(words)];
    std::string random_bytes(mb, '\0');
    for (char& c : random_bytes) c = static_cast<char>(rng() % 256);
    std::string cjk;
    while (cjk.size() < mb) cjk += "中文分词";
    const std::pair<const char*, std::string> lines[] = {
        {"letters", std::string(mb, 'a')},
        {"spaces", std::string(mb, ' ')},
        {"digits", std::string(mb, '7')},
        {"punctuation", std::string(mb, '!')},
        {"cjk", cjk},
        {"mixed", random_text},
        {"bytes", random_bytes},
    };
    for (const auto& [name, text] : lines) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::vector<int32_t> ids = tok->encode(text);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_EQ(tok->decode_bytes(ids), text) << name;
        // Quadratic behaviour would take minutes here.
        EXPECT_LT(seconds, 30.0) << name;
    }
}

TEST(TokenizerRobustness, StreamDecoderMatchesDecode) {
    const Tokenizer* tok = test::deepseek_tokenizer();
    ASSERT_NE(tok, nullptr);
    for (const std::string text :
         {"Hello, 世界! 😀👍🏽 naïve", "\xFF\xE4\xB8 ok \xF0\x9F", "<｜User｜>你好", ""}) {
        const std::vector<int32_t> ids = tok->encode(text);
        TokenStreamDecoder stream(*tok);
        std::string streamed;
        for (int32_t id : ids) {
            const std::string piece = stream.push(id);
            EXPECT_TRUE(utf8_valid(piece));
            streamed += piece;
        }
        streamed += stream.flush();
        EXPECT_EQ(streamed, tok->decode(ids)) << text;
    }
}

TEST(TokenizerRobustness, MergeStrategiesAgree) {
    std::ifstream in(DSV4_TOKENIZER_JSON);
    ASSERT_TRUE(in.good()) << "run tools/setup.sh to fetch DeepSeek's tokenizer.json";
    std::stringstream text;
    text << in.rdbuf();
    auto parts = tok::parse_tokenizer_json(text.str(), "tokenizer.json");
    ASSERT_TRUE(parts.has_value()) << parts.status().message();
    const tok::Bpe& bpe = *parts->bpe;
    std::mt19937 rng(11);
    const std::string sample = "the quick brown fox jumps over the lazy dog 中文分词测试 ééé";
    for (int iteration = 0; iteration < 2000; ++iteration) {
        std::vector<int32_t> a;
        const size_t length = 1 + rng() % 80;
        for (size_t i = 0; i < length; ++i) {
            const auto b =
                static_cast<uint8_t>(rng() % 3 == 0 ? rng() % 256 : sample[rng() % sample.size()]);
            a.push_back(bpe.byte_id(b));
        }
        std::vector<int32_t> b = a;
        bpe.merge_short(a);
        bpe.merge_long(b);
        ASSERT_EQ(a, b) << iteration;
    }
}

TEST(TokenizerRobustness, ConcurrentEncodeIsConsistent) {
    const Tokenizer* tok = test::deepseek_tokenizer();
    ASSERT_NE(tok, nullptr);
    const auto cases = test::read_json_lines(DSV4_TOKENIZER_DATA_DIR "/cases.jsonl");
    auto run = [&](bool* ok) {
        for (int round = 0; round < 5; ++round) {
            for (const auto& c : cases) {
                const std::vector<int32_t> expected = c["ids"];
                if (tok->encode(c["text"].get<std::string>()) != expected) *ok = false;
            }
        }
    };
    bool ok1 = true;
    bool ok2 = true;
    std::thread t1(run, &ok1);
    std::thread t2(run, &ok2);
    t1.join();
    t2.join();
    EXPECT_TRUE(ok1 && ok2);
}

}  // namespace
}  // namespace dsv4
