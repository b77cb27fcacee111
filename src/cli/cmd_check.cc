// `dsv4 check`: conformance against a golden fixture (see include/dsv4/conformance.h).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "dsv4/conformance.h"
#include "dsv4/parallel.h"

namespace dsv4::cli {

namespace {

struct CheckArgs {
    EngineOptions engine;
    std::string expected;
    double tolerance = 0;       // 0: the mode's and device's default (run_conformance_check)
    double mean_tolerance = 0;  // 0: the mode's default
    int ranks = 1;              // > 1: the routed experts split over in-process ranks
};

// The check on every rank of an in-process group, each from its own thread (the ranks run the
// same steps, so their collectives meet); rank 0's report, failing if any rank's fails.
Expected<CheckReport> check_on_ranks(const CheckArgs& a) {
    auto group = RankGroup::in_process(a.ranks);
    std::vector<std::optional<Expected<CheckReport>>> out(static_cast<size_t>(a.ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < a.ranks; ++r) {
        threads.emplace_back([&, r] {
            EngineOptions o = a.engine;
            o.rank_group = group;
            o.rank = r;
            out[static_cast<size_t>(r)] =
                run_conformance_check(o, a.expected, a.tolerance, a.mean_tolerance);
        });
    }
    for (std::thread& t : threads) t.join();
    for (auto& r : out)
        if (!*r) return r->status();
    CheckReport report = **out[0];
    for (int r = 1; r < a.ranks; ++r)
        if (!(*out[static_cast<size_t>(r)])->pass())
            report.items.push_back({"rank " + std::to_string(r), 1, 0, false, "failed"});
    report.device += ", " + std::to_string(a.ranks) + " ranks";
    return report;
}

int run_check(CheckArgs a) {
    if (a.expected.empty())
        a.expected = (std::filesystem::path(a.engine.model_dir) / "expected.safetensors").string();
    auto report = a.ranks > 1
                      ? check_on_ranks(a)
                      : run_conformance_check(a.engine, a.expected, a.tolerance, a.mean_tolerance);
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
    cmd->add_option("--ranks", args->ranks,
                    "Split the routed experts over N ranks, threads of this process (CPU "
                    "backend; docs/parallel.md)")
        ->check(CLI::Range(1, 64));
    cmd->callback([args] { set_exit_code(run_check(*args)); });
}

}  // namespace dsv4::cli
