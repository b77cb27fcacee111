// Each CLI subcommand lives in its own cmd_*.cc and registers itself here.
#pragma once

#include <CLI/CLI.hpp>

#include "dsv4/status.h"

namespace dsv4::cli {

// Registers `generate` and `check` (cmd_generate.cc, cmd_check.cc).
void add_generate_command(CLI::App& app);
void add_check_command(CLI::App& app);
// `bench` (cmd_bench.cc).
void add_bench_command(CLI::App& app);
// `info` (cmd_info.cc).
void add_info_command(CLI::App& app);
// `chat` (cmd_chat.cc).
void add_chat_command(CLI::App& app);
// `tokenize`, `chat-encode`, `chat-parse` (cmd_tokenize.cc).
void add_tokenize_commands(CLI::App& app);
// `serve` (cmd_serve.cc).
void add_serve_command(CLI::App& app);
// `quantize` (cmd_quantize.cc).
void add_quantize_command(CLI::App& app);

// Prints a user error as the one line `error: <message>` on stderr.
void print_error(const Status& status);

// The exit status the subcommand's callback chose (0 = success).
int exit_code();
void set_exit_code(int code);

}  // namespace dsv4::cli
