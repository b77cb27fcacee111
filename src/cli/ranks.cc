#include "cli/ranks.h"

#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
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
                    "0..N-1 as a process of its own; under mpirun or srun the launcher's rank "
                    "and size are taken when --rank is left out)")
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
    cmd->add_flag("--stop-on-lost-rank", r.stop_on_lost,
                  "Ranks as processes: end this rank's process 3 s after another rank's process "
                  "ends first (always on CUDA, where a sum would wait inside NCCL for the lost "
                  "rank forever; on the CPU the sums fail by themselves, and a server goes on, "
                  "failing its requests)");
    cmd->add_option("--step-timeout", r.step_timeout,
                    "Ranks as processes: end this rank's process when a step has not ended "
                    "SECONDS after it began, as when another rank hangs (default 300 on CUDA, "
                    "none on the CPU; 0: none)")
        ->check(finite_number(0, 86400, false));
}

namespace {

constexpr double kCudaStepTimeout = 300;  // seconds (--step-timeout's default on CUDA)

// The combinations that make no sense, however they were reached.
Status usage_error(const RankArgs& r) {
    if (r.rank >= 0 && r.rendezvous.empty())
        return error("--rank needs --rendezvous HOST:PORT (ranks as processes)");
    if (r.processes && r.ranks < 2) return error("--processes needs --ranks N >= 2");
    if (!r.rendezvous.empty() && (r.ranks < 2 || r.rank < 0 || r.rank >= r.ranks))
        return error("--rendezvous needs --ranks N >= 2 and --rank R with 0 <= R < N");
    return Status::ok();
}

// This process's rank and the size of its job as a parallel launcher set them in the
// environment (mpirun / mpiexec of Open MPI, of MPICH or Intel MPI, Slurm's srun); nothing when
// none did; an error for a value that is not a number.
struct LauncherRank {
    int rank = 0, size = 0;
    std::string size_var;
};
Expected<std::optional<LauncherRank>> launcher_rank() {
    static constexpr const char* kVars[][2] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},  // Open MPI
        {"PMI_RANK", "PMI_SIZE"},                          // MPICH, Intel MPI (Hydra)
        {"SLURM_PROCID", "SLURM_NTASKS"},                  // srun
    };
    for (const auto& v : kVars) {
        const char* rank = std::getenv(v[0]);
        const char* size = std::getenv(v[1]);
        if (rank == nullptr || size == nullptr) continue;
        LauncherRank l;
        l.size_var = v[1];
        auto number = [](const char* name, const char* text, int& out) -> Status {
            char* end = nullptr;
            const long n = std::strtol(text, &end, 10);
            if (end == text || *end != '\0' || n < 0 || n > 1 << 20)
                return error("the launcher's ", name, "='", text, "' is not a rank or a size");
            out = static_cast<int>(n);
            return Status::ok();
        };
        DSV4_RETURN_IF_ERROR(number(v[0], rank, l.rank));
        DSV4_RETURN_IF_ERROR(number(v[1], size, l.size));
        return std::optional<LauncherRank>(l);
    }
    return std::optional<LauncherRank>();
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
    // The watches' flags, for ranks as processes only.
    const bool as_processes = r.processes || !r.rendezvous.empty();
    for (const auto& [given, flag] : {std::pair{r.stop_on_lost, "--stop-on-lost-rank"},
                                      std::pair{r.step_timeout >= 0, "--step-timeout"}})
        if (given && !as_processes)
            return error(flag, " is for ranks as processes (--rendezvous, --processes, --gpus)");
    if (e.device == "cuda") r.stop_on_lost = true;
    // (A CUDA step takes milliseconds to seconds; one waiting inside NCCL for a hung rank would
    // wait forever. A CPU step of a large model may take minutes: no limit unless asked.)
    if (r.step_timeout < 0 && as_processes)
        r.step_timeout = e.device == "cuda" ? kCudaStepTimeout : 0;
    // Started by a parallel launcher (mpirun, srun: one process a rank, on one host or
    // several) with --rendezvous and no --rank: the rank and the size it set.
    if (!r.rendezvous.empty() && r.rank < 0) {
        DSV4_ASSIGN_OR_RETURN(const std::optional<LauncherRank> l, launcher_rank());
        if (l) {
            if (r.ranks != 1 && r.ranks != l->size)
                return error("--ranks ", r.ranks, " but the launcher started ", l->size,
                             " processes (", l->size_var, ")");
            r.ranks = l->size;
            r.rank = l->rank;
        }
    }
    DSV4_RETURN_IF_ERROR(usage_error(r));
    if (r.processes && r.rendezvous.empty()) {
        DSV4_ASSIGN_OR_RETURN(const int port, free_local_port());
        r.rendezvous = "127.0.0.1:" + std::to_string(port);
        r.rank = 0;
        r.start_others = true;
        // The ranks started here share this host's GPUs, one each: two on one GPU would meet
        // only inside NCCL's join (its "duplicate GPU" error).
        if (e.device == "cuda") {
            const int gpus = visible_gpus();
            if (gpus < r.ranks)
                return error(r.ranks, " ranks on GPUs need a GPU each: ", gpus,
                             " visible here (ranks on several hosts: start each with --rank R "
                             "--rendezvous ADDR)");
        }
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
    // (The watch here sees every other rank end: its children; a hung one, the step timeout.)
    mine.stop_on_lost = false;
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
        std::optional<PeerWatch> watch;
        if (r.stop_on_lost || r.step_timeout > 0)
            watch.emplace(*group, r.rank, RankGroupWatch{r.stop_on_lost, r.step_timeout});
        Status s = body(o, r.rank);
        if (watch) {
            const Status lost = watch->finish();  // (the cause, where the body ended for it)
            if (!lost.is_ok()) s = lost;
        }
        group->leave(r.rank);
        // (each process prints its own error: the other ranks' say whose, once: the engine's
        // errors of joining the group already do)
        const std::string whose = "rank " + std::to_string(r.rank);
        if (s.is_ok() || r.rank == 0 || s.message().rfind(whose + ": ", 0) == 0) return s;
        return s.with_context(whose);
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
