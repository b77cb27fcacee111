#include "cli/ranks.h"

#include <mutex>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "dsv4/parallel.h"

namespace dsv4::cli {

void add_rank_options(CLI::App* cmd, RankArgs& r) {
    cmd->add_option("--ranks", r.ranks,
                    "Split the routed experts over N ranks, threads of this process, or with "
                    "--rendezvous one process each (CPU backend; docs/parallel.md)")
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
}

Status check_rank_args(const RankArgs& r) {
    if (r.rank >= 0 && r.rendezvous.empty())
        return error("--rank needs --rendezvous HOST:PORT (ranks as processes)");
    if (!r.rendezvous.empty() && (r.ranks < 2 || r.rank < 0 || r.rank >= r.ranks))
        return error("--rendezvous needs --ranks N >= 2 and --rank R with 0 <= R < N");
    return Status::ok();
}

Status run_on_ranks(const EngineOptions& base, const RankArgs& r,
                    const std::function<Status(const EngineOptions&, int rank)>& body) {
    DSV4_RETURN_IF_ERROR(check_rank_args(r));
    if (!r.rendezvous.empty()) {
        DSV4_ASSIGN_OR_RETURN(
            auto group, RankGroup::connect(r.rank, r.ranks, r.rendezvous, r.rendezvous_timeout));
        EngineOptions o = base;
        o.rank_group = group;
        o.rank = r.rank;
        Status s = body(o, r.rank);
        group->leave(r.rank);
        return s;
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
