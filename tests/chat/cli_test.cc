// `dsv4 tokenize`, `dsv4 chat-encode` and `dsv4 chat-parse` end to end: the golden files
// through the binary, answers compared line by line.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dsv4/chat.h"

namespace dsv4::chat {
namespace {

struct CliRun {
    int status = -1;
    std::vector<Json> lines;
};

// Runs the binary with `args`, stdin from `input` (a file), and parses each output line.
CliRun run_cli(const std::string& args, const std::string& input) {
    const std::string command = std::string(DSV4_CLI_BINARY) + " " + args + " < '" + input + "'";
    CliRun run;
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return run;
    std::string out;
    char buffer[65536];
    size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
    const int raw = pclose(pipe);
    run.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    size_t start = 0;
    while (start < out.size()) {
        const size_t end = out.find('\n', start);
        const std::string line = out.substr(start, end - start);
        auto value = parse_json(line);
        EXPECT_TRUE(value.has_value()) << "not JSON: " << line;
        if (value) run.lines.push_back(std::move(value).value());
        start = end == std::string::npos ? out.size() : end + 1;
    }
    return run;
}

std::vector<Json> read_lines(const std::string& path) {
    std::vector<Json> lines;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty()) lines.push_back(*parse_json(line));
    }
    return lines;
}

std::string write_temp(const std::string& name, const std::string& text) {
    const auto path = std::filesystem::temp_directory_path() /
                      ("dsv4_cli_test_" + std::to_string(::getpid()) + "_" + name);
    std::ofstream(path) << text;
    return path.string();
}

TEST(Cli, ChatEncodeGolden) {
    const std::string input = DSV4_CHAT_DATA_DIR "/encode.jsonl";
    const std::vector<Json> golden = read_lines(input);
    const CliRun run = run_cli("chat-encode", input);
    EXPECT_EQ(run.status, 0);
    ASSERT_EQ(run.lines.size(), golden.size());
    for (size_t i = 0; i < golden.size(); ++i) {
        if (golden[i].contains("error")) {
            EXPECT_EQ(run.lines[i].value("error", false), true) << golden[i]["id"];
            EXPECT_TRUE(run.lines[i]["message"].is_string());
        } else {
            EXPECT_EQ(run.lines[i]["prompt"], golden[i]["prompt"]) << golden[i]["id"];
        }
    }
}

TEST(Cli, ChatParseGolden) {
    const std::string input = DSV4_CHAT_DATA_DIR "/parse.jsonl";
    const std::vector<Json> golden = read_lines(input);
    const CliRun run = run_cli("chat-parse", input);
    EXPECT_EQ(run.status, 0);
    ASSERT_EQ(run.lines.size(), golden.size());
    for (size_t i = 0; i < golden.size(); ++i) {
        if (golden[i].contains("error")) {
            EXPECT_EQ(run.lines[i].value("error", false), true) << golden[i]["id"];
        } else {
            EXPECT_EQ(run.lines[i]["result"], golden[i]["result"]) << golden[i]["id"];
        }
    }
}

TEST(Cli, TokenizeAndDecode) {
    const std::vector<Json> cases = read_lines(DSV4_TOKENIZER_DATA_DIR "/cases.jsonl");
    std::string texts;
    std::string ids;
    for (const Json& c : cases) {
        texts += dump_json(Json{{"text", c["text"]}}) + "\n";
        ids += dump_json(Json{{"ids", c["ids"]}}) + "\n";
    }
    const std::string tokenizer = "--tokenizer '" DSV4_TOKENIZER_JSON "'";
    const CliRun encoded = run_cli("tokenize " + tokenizer, write_temp("texts", texts));
    ASSERT_EQ(encoded.status, 0) << "is " DSV4_TOKENIZER_JSON " there? (tools/setup.sh)";
    ASSERT_EQ(encoded.lines.size(), cases.size());
    const CliRun decoded = run_cli("tokenize --decode " + tokenizer, write_temp("ids", ids));
    ASSERT_EQ(decoded.lines.size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
        EXPECT_EQ(encoded.lines[i]["ids"], cases[i]["ids"]) << i;
        if (cases[i]["roundtrip"] == true) {
            EXPECT_EQ(decoded.lines[i]["text"], cases[i]["text"]) << i;
        }
    }
    // The V4 vector, with V4's added tokens over the V3 file, from --text.
    const CliRun v4 = run_cli("tokenize --v4-added-tokens " + tokenizer +
                                  " --text '<｜User｜>你好<｜Assistant｜><think>推理</think>答案"
                                  "<｜end▁of▁sentence｜>'",
                              "/dev/null");
    ASSERT_EQ(v4.lines.size(), 1u);
    EXPECT_EQ(dump_json(v4.lines[0]),
              R"({"ids": [128803, 30594, 128804, 128821, 36101, 128822, 7624, 1]})");
    // Bad lines get an error line each and the exit status says so.
    const CliRun bad =
        run_cli("tokenize --decode " + tokenizer,
                write_temp("bad", "{\"ids\": [1, 99999999]}\nnot json\n{\"ids\": [2]}\n"));
    EXPECT_EQ(bad.status, 1);
    ASSERT_EQ(bad.lines.size(), 3u);
    EXPECT_EQ(bad.lines[0].value("error", false), true);
    EXPECT_EQ(bad.lines[1].value("error", false), true);
    EXPECT_EQ(bad.lines[2]["text"], "<｜▁pad▁｜>");
}

}  // namespace
}  // namespace dsv4::chat
