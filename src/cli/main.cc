// dsv4 command line: one subcommand per cmd_*.cc file. Exit codes: commands.h.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "cli/spawn.h"

int main(int argc, char** argv) {
    namespace cli = dsv4::cli;
    CLI::App app{"dsv4: a DeepSeek-V4 inference engine"};
    cli::set_program_args(argc, argv);  // (--processes and --gpus start copies of it)
    app.require_subcommand(0, 1);
    app.set_help_all_flag("--help-all", "Help for every subcommand");
    app.set_version_flag("--version", std::string("dsv4 ") + DSV4_VERSION);
    app.footer("Exit codes: 0 ok, 1 runtime or input-file error, 2 usage error, 3 check failed.");
    cli::add_generate_command(app);
    cli::add_chat_command(app);
    cli::add_check_command(app);
    cli::add_perplexity_command(app);
    cli::add_info_command(app);
    cli::add_bench_command(app);
    cli::add_quantize_command(app);
    cli::add_tokenize_commands(app);
    cli::add_serve_command(app);
    // A first word that is neither a flag nor a command: say so plainly.
    if (argc > 1 && argv[1][0] != '-') {
        try {
            app.get_subcommand(argv[1]);
        } catch (const CLI::OptionNotFound&) {
            std::fprintf(stderr, "error: unknown command '%s' (dsv4 --help lists the commands)\n",
                         argv[1]);
            return cli::kExitUsage;
        }
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return cli::kExitUsage;
    }
    if (app.get_subcommands().empty()) {
        std::fputs(app.help().c_str(), stdout);
        return cli::kExitUsage;
    }
    return cli::exit_code();
}
