// The command line refuses what it cannot run: every case a one-line error naming the flag or
// file, with the documented exit code (0 ok, 1 runtime/input error, 2 usage, 3 check failed).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

struct CliRun {
    int code = -1;  // -1: killed by a signal
    std::string out, err;
};

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

CliRun dsv4(const std::string& args) {
    const fs::path dir = fs::temp_directory_path();
    const std::string tag = std::to_string(::getpid());
    const fs::path out = dir / ("dsv4_cli_out_" + tag), err = dir / ("dsv4_cli_err_" + tag);
    const std::string cmd = std::string(DSV4_CLI_PATH) + " " + args + " </dev/null >" +
                            out.string() + " 2>" + err.string();
    const int rc = std::system(cmd.c_str());
    CliRun r{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, slurp(out), slurp(err)};
    fs::remove(out);
    fs::remove(err);
    return r;
}

const std::string kModel = std::string(" --model ") + DSV4_GOLDEN_DIR + "/small-rates";

struct Case {
    const char* name;
    std::string args;
    int code;
    const char* needle;  // in stderr, which is one line
};

class CliRefuses : public ::testing::TestWithParam<Case> {};

TEST_P(CliRefuses, OneLineErrorAndExitCode) {
    const Case& c = GetParam();
    const CliRun r = dsv4(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_LT(r.err.size(), 200u) << r.err;  // no 310-digit bounds
}

const std::string gen = "generate" + kModel + " --prompt-ids 1,2";

INSTANTIATE_TEST_SUITE_P(
    BadInput, CliRefuses,
    ::testing::Values(
        Case{"huge_context", gen + " --max-context 2147483647", 1, "exceeds the model's"},
        Case{"context_not_a_number", gen + " --max-context 1e400", 2, "--max-context"},
        Case{"bench_huge_prompt", "bench" + kModel + " --prompt-len 2000000000", 2, "--prompt-len"},
        Case{"bench_respects_context", "bench" + kModel + " --max-context 10 --prompt-len 20", 2,
             "exceed --max-context 10"},
        Case{"synthetic_too_many_layers", "bench --device cpu --synthetic v4-flash --layers 50", 1,
             "--layers 50 outside"},
        Case{"synthetic_and_model", "bench" + kModel + " --synthetic v4-flash", 2, "excludes"},
        Case{"synthetic_bad_format", "bench --synthetic v4-flash --format fp8", 2, "--format"},
        Case{"synthetic_bad_config", "bench --device cpu --synthetic /no/such.json", 1,
             "cannot read synthetic config"},
        Case{"bench_bad_batch_list", "bench" + kModel + " --batch 1,x", 2, "--batch"},
        Case{"bench_mtp_without_block",
             "bench --device cpu --synthetic " + std::string(DSV4_DSREF_DIR) +
                 "/dsref-pub-a/config.json --speculative mtp",
             2, "add --synthetic-mtp"},
        Case{"bench_synthetic_mtp_without_synthetic", "bench" + kModel + " --synthetic-mtp", 2,
             "--synthetic"},
        Case{"bench_bad_speculative", "bench" + kModel + " --speculative eagle", 2,
             "--speculative"},
        Case{"bench_min_tokens_past_decode", "bench" + kModel + " --decode 4 --min-tokens 5", 2,
             "exceeds --decode"},
        Case{"bench_penalty_with_drafts",
             "bench" + kModel + " --speculative ngram --presence-penalty 0.5", 2,
             "--speculative off"},
        Case{"bench_bad_logprobs", "bench" + kModel + " --logprobs 21", 2, "--logprobs"},
        Case{"serve_mtp_without_block",
             "serve" + kModel + " --tokenizer " + DSV4_TINY_TOKENIZER +
                 " --port 0 --speculative mtp",
             1, "needs the checkpoint's MTP block"},
        Case{
            "serve_drafts_without_speculation",
            "serve" + kModel + " --tokenizer " + DSV4_TINY_TOKENIZER + " --port 0 --draft-tokens 2",
            1, "without speculative decoding"},
        Case{"serve_rank_without_rendezvous",
             "serve" + kModel + " --tokenizer " + DSV4_TINY_TOKENIZER + " --port 0 --rank 1", 2,
             "--rank needs --rendezvous"},
        Case{"serve_rendezvous_rank_past_ranks",
             "serve" + kModel + " --tokenizer " + DSV4_TINY_TOKENIZER +
                 " --port 0 --ranks 2 --rank 2 --rendezvous 127.0.0.1:1",
             2, "--rank"},
        Case{"processes_without_ranks", "check --device cpu" + kModel + " --processes", 2,
             "--processes needs --ranks"},
        Case{"stop_on_lost_rank_in_process", gen + " --ranks 2 --stop-on-lost-rank", 2,
             "--stop-on-lost-rank is for ranks as processes"},
        Case{"step_timeout_in_process", gen + " --ranks 2 --step-timeout 5", 2,
             "--step-timeout is for ranks as processes"},
        Case{"step_timeout_negative", gen + " --ranks 2 --processes --step-timeout -1", 2,
             "--step-timeout"},
        Case{"gpus_beside_other_ranks", gen + " --gpus 2 --ranks 3", 2, "--gpus 2 runs 2 ranks"},
        Case{"gpus_beside_cpu", gen + " --gpus 2 --device cpu", 2, "--gpus runs on CUDA"},
        Case{"gpus_beyond_visible", gen + " --gpus 33", 2, "33 ranks on GPUs need a GPU each"},
        Case{"no_model", "bench --device cpu", 1, "no model"},
        Case{"max_tokens_negative", gen + " --max-tokens -1", 2, "--max-tokens"},
        Case{"temperature_negative", gen + " --temperature -1", 2, "--temperature"},
        Case{"temperature_nan", gen + " --temperature nan", 2, "not a finite number"},
        Case{"temperature_inf", gen + " --temperature inf", 2, "not a finite number"},
        Case{"top_p_above_one", gen + " --top-p 2", 2, "--top-p"},
        Case{"top_p_nan", gen + " --top-p nan", 2, "--top-p"},
        Case{"top_p_negative", gen + " --top-p -0.5", 2, "--top-p"},
        Case{"top_k_negative", gen + " --top-k -1", 2, "--top-k"},
        Case{"seed_negative", gen + " --seed -1", 2, "--seed"},
        Case{"repetition_penalty_zero", gen + " --repetition-penalty 0", 2, "--repetition-penalty"},
        Case{"frequency_penalty_out_of_range", gen + " --frequency-penalty 2.5", 2,
             "--frequency-penalty"},
        Case{"presence_penalty_nan", gen + " --presence-penalty nan", 2, "not a finite number"},
        Case{"min_tokens_over_max_tokens", gen + " --max-tokens 4 --min-tokens 5", 1,
             "min_tokens must be in [0, max_tokens = 4]"},
        Case{"draft_tokens_too_many", gen + " --speculative ngram --draft-tokens 5", 2,
             "--draft-tokens"},
        Case{"draft_tokens_without_speculation", gen + " --draft-tokens 2", 1,
             "without speculative decoding"},
        Case{"kv_cache_unknown", gen + " --kv-cache fp4", 2, "--kv-cache"},
        Case{"indexer_cache_unknown", gen + " --indexer-cache int8", 2, "--indexer-cache"},
        Case{"max_seqs_zero", gen + " --max-seqs 0", 2, "--max-seqs"},
        Case{"cache_budget_too_small", gen + " --cache-gib 0.0000001", 1, "holds no sequence"},
        Case{"device_unknown", gen + " --device tpu", 2, "--device"},
        Case{"tolerance_negative", "check" + kModel + " --tolerance -1", 2, "--tolerance"},
        Case{"info_ranks_zero", "info" + kModel + " --ranks 0", 2, "--ranks"},
        Case{"info_gpus_beside_cpu", "info" + kModel + " --gpus 2 --device cpu", 2,
             "--gpus N is --device cuda"},
        Case{"info_more_ranks_than_experts", "info" + kModel + " --ranks 64", 1,
             "at most that many ranks"},
        Case{"prompt_and_ids", gen + " --prompt hi", 2, "exactly one of"},
        Case{"unknown_command", "bogus", 2, "unknown command 'bogus'"},
        Case{"unknown_flag", gen + " --bogus", 2, "--bogus"},
        Case{"missing_model_folder", "generate --model /nonexistent --prompt-ids 1", 1,
             "/nonexistent"},
        Case{"token_outside_vocab", "generate" + kModel + " --prompt-ids 1,99999", 1,
             "outside the vocabulary"},
        Case{"perplexity_missing_text", "perplexity" + kModel + " --text /nonexistent.txt", 1,
             "/nonexistent.txt"},
        Case{"perplexity_stride_over_context",
             "perplexity" + kModel + " --text /dev/null --context 8 --stride 9", 2, "--stride"}),
    [](const auto& p) { return std::string(p.param.name); });

TEST(Cli, VersionHelpAndNoArguments) {
    const CliRun v = dsv4("--version");
    EXPECT_EQ(v.code, 0);
    EXPECT_EQ(v.out.rfind("dsv4 ", 0), 0u) << v.out;
    const CliRun none = dsv4("");
    EXPECT_EQ(none.code, 2);
    EXPECT_NE(none.out.find("generate"), std::string::npos) << none.out;  // the command list
    for (const char* cmd : {"generate", "chat", "check", "perplexity", "info", "bench", "quantize",
                            "tokenize", "chat-encode", "chat-parse"}) {
        const CliRun h = dsv4(std::string(cmd) + " --help");
        EXPECT_EQ(h.code, 0) << cmd;
        EXPECT_NE(h.out.find("xample"), std::string::npos) << cmd << " --help has no example";
    }
}

// The memory plan over ranks: every rank's line, the routed experts split contiguously.
TEST(Cli, InfoPrintsTheRankPlan) {
    const CliRun r = dsv4("info --device cpu" + kModel + " --ranks 3");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("plan over 3 ranks"), std::string::npos) << r.out;
    for (const char* rank : {"\n     0  ", "\n     1  ", "\n     2  "})
        EXPECT_NE(r.out.find(rank), std::string::npos) << rank << "\n" << r.out;
}

TEST(Cli, TokenizerMayBeAFolder) {
    const std::string folder = fs::path(DSV4_TINY_TOKENIZER).parent_path().string();
    const fs::path tmp = fs::temp_directory_path() / ("dsv4_tokdir_" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    fs::copy_file(DSV4_TINY_TOKENIZER, tmp / "tokenizer.json",
                  fs::copy_options::overwrite_existing);
    const CliRun r = dsv4("generate" + kModel + " --tokenizer " + tmp.string() +
                          " --prompt hello --max-tokens 2 --ignore-eos");
    EXPECT_EQ(r.code, 0) << r.err;
    fs::remove_all(tmp);
}

}  // namespace
}  // namespace dsv4
