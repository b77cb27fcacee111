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
    // With a rendezvous: this process is rank `rank` of `ranks`, the others other processes.
    int rank = -1;
    std::string rendezvous;
    double rendezvous_timeout = 60;
};

// This process as one rank of a group of processes (RankGroup::connect); its own report.
Expected<CheckReport> check_as_rank(const CheckArgs& a) {
    if (a.ranks < 2 || a.rank < 0 || a.rank >= a.ranks)
        return error("--rendezvous needs --ranks N >= 2 and --rank R with 0 <= R < N");
    DSV4_ASSIGN_OR_RETURN(auto group,
                          RankGroup::connect(a.rank, a.ranks, a.rendezvous, a.rendezvous_timeout));
    EngineOptions o = a.engine;
    o.rank_group = group;
    o.rank = a.rank;
    DSV4_ASSIGN_OR_RETURN(CheckReport report,
                          run_conformance_check(o, a.expected, a.tolerance, a.mean_tolerance));
    report.device +=
        ", rank " + std::to_string(a.rank) + " of " + std::to_string(a.ranks) + " processes";
    return report;
}

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
    if (a.rank >= 0 && a.rendezvous.empty()) {
        print_error(error("--rank needs --rendezvous HOST:PORT (ranks as processes)"));
        return kExitError;
    }
    auto report = !a.rendezvous.empty() ? check_as_rank(a)
                  : a.ranks > 1
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
                    "Split the routed experts over N ranks, threads of this process, or with "
                    "--rendezvous one process each (CPU backend; docs/parallel.md)")
        ->check(CLI::Range(1, 64));
    cmd->add_option("--rank", args->rank,
                    "This process's rank of --ranks N, with --rendezvous (start every rank "
                    "0..N-1 as a process of its own)")
        ->check(CLI::Range(0, 63));
    cmd->add_option("--rendezvous", args->rendezvous,
                    "HOST:PORT where rank 0 listens and the other ranks connect (the port free "
                    "on rank 0's host)");
    cmd->add_option("--rendezvous-timeout", args->rendezvous_timeout,
                    "Seconds every rank waits for the others to join (default 60)")
        ->check(finite_number(0.1, 86400, false));
    cmd->callback([args] { set_exit_code(run_check(*args)); });
}

}  // namespace dsv4::cli
