// dsv4 command line: one subcommand per cmd_*.cc file.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"

int main(int argc, char** argv) {
    CLI::App app{"dsv4: a DeepSeek-V4 inference engine"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Help for every subcommand");
    dsv4::cli::add_generate_command(app);
    dsv4::cli::add_check_command(app);
    dsv4::cli::add_info_command(app);
    dsv4::cli::add_bench_command(app);
    dsv4::cli::add_chat_command(app);
    dsv4::cli::add_tokenize_commands(app);
    dsv4::cli::add_quantize_command(app);
    dsv4::cli::add_serve_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    return dsv4::cli::exit_code();
}
