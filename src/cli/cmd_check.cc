// `dsv4 check`: conformance against a golden fixture (see include/dsv4/conformance.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "cli/commands.h"
#include "cli/ranks.h"
#include "dsv4/conformance.h"

namespace dsv4::cli {

namespace {

struct CheckArgs {
    EngineOptions engine;
    std::string expected;
    double tolerance = 0;       // 0: the mode's and device's default (run_conformance_check)
    double mean_tolerance = 0;  // 0: the mode's default
    RankArgs ranks;
};

// The check on every rank this process drives (ranks.h); rank 0's report (this process's, for
// ranks as processes), failing if another rank's comparison failed.
Expected<CheckReport> check(const CheckArgs& a) {
    std::vector<CheckReport> reports(static_cast<size_t>(std::max(1, a.ranks.ranks)));
    const int mine = a.ranks.rendezvous.empty() ? 0 : a.ranks.rank;
    DSV4_RETURN_IF_ERROR(run_on_ranks(a.engine, a.ranks, [&](const EngineOptions& o, int rank) {
        DSV4_ASSIGN_OR_RETURN(reports[static_cast<size_t>(rank)],
                              run_conformance_check(o, a.expected, a.tolerance, a.mean_tolerance));
        return Status::ok();
    }));
    CheckReport report = reports[static_cast<size_t>(mine)];
    if (a.ranks.rendezvous.empty())
        for (int r = 1; r < a.ranks.ranks; ++r)
            if (!reports[static_cast<size_t>(r)].pass())
                report.items.push_back({"rank " + std::to_string(r), 1, 0, false, "failed"});
    report.device += ranks_note(a.ranks);
    return report;
}

int run_check(CheckArgs a) {
    if (a.expected.empty())
        a.expected = (std::filesystem::path(a.engine.model_dir) / "expected.safetensors").string();
    if (Status st = check_rank_args(a.ranks, a.engine); !st.is_ok()) {
        print_error(st);
        return kExitUsage;
    }
    auto report = check(a);
    if (!report) {
        print_error(report.status());
        return kExitError;
    }
    for (const auto& item : report->items) {
        std::printf("%-16s %s  max_abs=%.3g  tol=%.3g", item.name.c_str(),
                    item.pass ? "PASS" : "FAIL", item.max_abs_error, item.tolerance);
        if (item.mean_tolerance > 0)
            std::printf("  mean_abs=%.3g  mean_tol=%.3g", item.mean_abs_error, item.mean_tolerance);
        std::printf("  %s\n", item.detail.c_str());
    }
    std::printf("%s on %s (%.2f s)\n", report->pass() ? "PASS" : "FAIL", report->device.c_str(),
                report->seconds);
    return report->pass() ? kExitOk : kExitCheckFailed;
}

}  // namespace

void add_check_command(CLI::App& app) {
    auto args = std::make_shared<CheckArgs>();
    CLI::App* cmd =
        app.add_subcommand("check", "Compare against a golden fixture (transformers or dsref)");
    cmd->footer("Example: dsv4 check --model tests/data/golden/tiny-mix");
    add_engine_options(cmd, args->engine);
    cmd->add_option("--expected", args->expected,
                    "expected.safetensors (default: the one in the model folder)");
    cmd->add_option("--tolerance", args->tolerance,
                    "Max abs logit error (default: 1e-4 on cpu, 1e-3 on cuda, 0.5 with "
                    "--numerics reference)")
        ->check(finite_number(0, 1e30, true));
    cmd->add_option("--mean-tolerance", args->mean_tolerance,
                    "Mean abs logit error (default: 2e-2 with --numerics reference, else not "
                    "checked)")
        ->check(finite_number(0, 1e30, true));
    add_rank_options(cmd, args->ranks);
    cmd->callback([args] { set_exit_code(run_check(*args)); });
}

}  // namespace dsv4::cli
