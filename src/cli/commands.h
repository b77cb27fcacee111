// Each CLI subcommand lives in its own cmd_*.cc and registers itself here; the plumbing they
// share (engine options, validators, errors, exit codes) is declared once, below.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "dsv4/engine.h"
#include "dsv4/status.h"

namespace dsv4::cli {

// Exit codes of every subcommand (README, "Exit codes").
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;  // runtime or input-file error (model, fixture, text file)
inline constexpr int kExitUsage = 2;  // bad command line: unknown flag, value out of range
inline constexpr int kExitCheckFailed = 3;  // `check` ran and a comparison failed

void add_generate_command(CLI::App& app);    // cmd_generate.cc
void add_check_command(CLI::App& app);       // cmd_check.cc
void add_bench_command(CLI::App& app);       // cmd_bench.cc
void add_info_command(CLI::App& app);        // cmd_info.cc
void add_chat_command(CLI::App& app);        // cmd_chat.cc
void add_tokenize_commands(CLI::App& app);   // cmd_tokenize.cc: tokenize, chat-encode, chat-parse
void add_quantize_command(CLI::App& app);    // cmd_quantize.cc
void add_perplexity_command(CLI::App& app);  // cmd_perplexity.cc
void add_serve_command(CLI::App& app);       // cmd_serve.cc

// --model, --device, --max-context, --max-seqs, --cache-gib, --max-chunk, --threads.
// synthetic: --model becomes optional beside --synthetic / --layers / --format (Engine::create
// asks for one of the two).
void add_engine_options(CLI::App* cmd, EngineOptions& e, bool synthetic = false);
// --temperature, --top-k, --top-p, --seed, each range-checked.
void add_sampling_options(CLI::App* cmd, SamplingParams& s, bool with_top_k = true);
// --repetition-penalty, --frequency-penalty, --presence-penalty, --min-tokens (LogitsRules).
void add_rules_options(CLI::App* cmd, LogitsRules& r);
// --speculative off|mtp|ngram and --draft-tokens (a Request's speculative and draft_tokens).
struct SpeculativeArgs {
    std::string mode = "off";
    int draft_tokens = 0;
    Speculation speculation() const;
};
void add_speculative_options(CLI::App* cmd, SpeculativeArgs& s);

// Validators whose messages are one short line (CLI11's own print the bounds in full).
CLI::Validator whole_number(long long lo, long long hi);
// A finite number in [lo, hi] (lo excluded when lo_open).
CLI::Validator finite_number(double lo, double hi, bool lo_open = false);

// Prints a user error as the one line `error: <message>` on stderr.
void print_error(const Status& status);

// Tells a person at a terminal that the command reads JSON lines from stdin (it would
// otherwise seem to hang).
void note_reading_stdin(const char* what);

// The exit status the subcommand's callback chose.
int exit_code();
void set_exit_code(int code);

}  // namespace dsv4::cli
