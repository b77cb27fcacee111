#include "cli/ranks.h"

#include <mutex>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/spawn.h"
#include "dsv4/parallel.h"

namespace dsv4::cli {

void add_rank_options(CLI::App* cmd, RankArgs& r) {
    cmd->add_option("--ranks", r.ranks,
                    "Split the routed experts over N ranks: threads of this process, or one "
                    "process each (--rendezvous, --processes); on CUDA a GPU each "
                    "(docs/parallel.md)")
        ->check(CLI::Range(1, 64));
    cmd->add_option("--rank", r.rank,
                    "This process's rank of --ranks N, with --rendezvous (start every rank "
                    "0..N-1 as a process of its own)")
        ->check(CLI::Range(0, 63));
    cmd->add_option("--rendezvous", r.rendezvous,
                    "HOST:PORT where rank 0 listens and the other ranks connect (the port free "
                    "on rank 0's host)");
    cmd->add_option("--rendezvous-timeout", r.rendezvous_timeout,
                    "Seconds every rank waits for the others to join (default 60)")
        ->check(finite_number(0.1, 86400, false));
    cmd->add_flag("--processes", r.processes,
                  "With --ranks N: one process a rank on this host, ranks 1..N-1 started by "
                  "this one (rank 0)");
    cmd->add_option("--gpus", r.gpus,
                    "Run on N GPUs of this host, one process each: --device cuda --ranks N "
                    "--processes (rank r on GPU r)")
        ->check(CLI::Range(1, 64));
}

namespace {

// The combinations that make no sense, however they were reached.
Status usage_error(const RankArgs& r) {
    if (r.rank >= 0 && r.rendezvous.empty())
        return error("--rank needs --rendezvous HOST:PORT (ranks as processes)");
    if (r.processes && r.ranks < 2) return error("--processes needs --ranks N >= 2");
    if (!r.rendezvous.empty() && (r.ranks < 2 || r.rank < 0 || r.rank >= r.ranks))
        return error("--rendezvous needs --ranks N >= 2 and --rank R with 0 <= R < N");
    return Status::ok();
}

}  // namespace

Status apply_gpus(int gpus, int& ranks, EngineOptions& e) {
    if (gpus <= 0) return Status::ok();
    if (ranks != 1 && ranks != gpus)
        return error("--gpus ", gpus, " runs ", gpus, " ranks: leave --ranks ", ranks, " out");
    if (e.device != "auto" && e.device != "cuda")
        return error("--gpus runs on CUDA, not --device ", e.device,
                     " (--gpus N is --device cuda --ranks N)");
    e.device = "cuda";
    ranks = gpus;
    return Status::ok();
}

Status check_rank_args(RankArgs& r, EngineOptions& e) {
    DSV4_RETURN_IF_ERROR(apply_gpus(r.gpus, r.ranks, e));
    if (r.gpus > 1) r.processes = true;
    // Ranks on GPUs run one process each (NCCL's usual model), started by this one unless
    // started by hand: a lost rank then ends the command (RankWatch) instead of leaving the
    // others inside a sum on their GPUs.
    if (e.device == "cuda" && r.ranks > 1 && r.rendezvous.empty()) r.processes = true;
    DSV4_RETURN_IF_ERROR(usage_error(r));
    if (r.processes && r.rendezvous.empty()) {
        DSV4_ASSIGN_OR_RETURN(const int port, free_local_port());
        r.rendezvous = "127.0.0.1:" + std::to_string(port);
        r.rank = 0;
        r.start_others = true;
    }
    return Status::ok();
}

namespace {

// Ranks 1..N-1 as this program's processes (spawn.h), told the rendezvous; then rank 0 here.
Status run_starting_others(const EngineOptions& base, const RankArgs& r,
                           const std::function<Status(const EngineOptions&, int rank)>& body) {
    std::vector<std::vector<std::string>> extra;
    std::vector<std::string> names;
    for (int k = 1; k < r.ranks; ++k) {
        extra.push_back({"--rank", std::to_string(k), "--rendezvous", r.rendezvous});
        names.push_back("rank " + std::to_string(k));
    }
    DSV4_ASSIGN_OR_RETURN(std::vector<int> pids, spawn_self(extra));
    RankWatch watch(std::move(pids), std::move(names));
    RankArgs mine = r;
    mine.start_others = false;
    const Status s = run_on_ranks(base, mine, body);
    // (rank 0 failing ends the others: they would wait for it, in a rendezvous or a sum)
    const Status others = watch.finish(/*terminate=*/!s.is_ok());
    return s.is_ok() ? others : s;
}

}  // namespace

Status run_on_ranks(const EngineOptions& base, const RankArgs& r,
                    const std::function<Status(const EngineOptions&, int rank)>& body) {
    DSV4_RETURN_IF_ERROR(usage_error(r));
    if (r.start_others) return run_starting_others(base, r, body);
    if (!r.rendezvous.empty()) {
        DSV4_ASSIGN_OR_RETURN(
            auto group, RankGroup::connect(r.rank, r.ranks, r.rendezvous, r.rendezvous_timeout));
        EngineOptions o = base;
        o.rank_group = group;
        o.rank = r.rank;
        Status s = body(o, r.rank);
        group->leave(r.rank);
        // (each process prints its own error: the other ranks' say whose)
        return s.is_ok() || r.rank == 0 ? s : s.with_context("rank " + std::to_string(r.rank));
    }
    if (r.ranks <= 1) return body(base, 0);
    auto group = RankGroup::in_process(r.ranks);
    std::mutex m;
    Status first = Status::ok();  // the first failure in time: the cause of the others'
    std::vector<std::thread> threads;
    for (int k = 0; k < r.ranks; ++k) {
        threads.emplace_back([&, k] {
            EngineOptions o = base;
            o.rank_group = group;
            o.rank = k;
            const Status s = body(o, k);
            {
                std::lock_guard<std::mutex> lock(m);
                if (!s.is_ok() && first.is_ok()) first = s;
            }
            group->leave(k);  // (after recording: a rank failing because of it comes later)
        });
    }
    for (std::thread& t : threads) t.join();
    return first;
}

std::string ranks_note(const RankArgs& r) {
    if (!r.rendezvous.empty())
        return ", rank " + std::to_string(r.rank) + " of " + std::to_string(r.ranks) + " processes";
    return r.ranks > 1 ? ", " + std::to_string(r.ranks) + " ranks" : "";
}

}  // namespace dsv4::cli
