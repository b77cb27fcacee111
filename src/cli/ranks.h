// The rank options that check, generate, bench and serve share (docs/parallel.md): the routed
// experts split over --ranks N engines, threads of this process, or one process each (with
// --rendezvous, every process started by hand; with --processes or --gpus N, by this one).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "dsv4/engine.h"
#include "dsv4/status.h"

namespace dsv4::cli {

struct RankArgs {
    int ranks = 1;
    int rank = -1;           // with a rendezvous: this process's rank
    std::string rendezvous;  // HOST:PORT: ranks as processes
    double rendezvous_timeout = 60;
    bool processes = false;     // --processes: this process starts the other ranks' processes
    int gpus = 0;               // --gpus N: --device cuda --ranks N --processes
    bool start_others = false;  // (check_rank_args: this is rank 0 and starts ranks 1..N-1)
    // --stop-on-lost-rank (always on CUDA): ranks as processes end this one (PeerWatch) when
    // another's process ends before this rank's run.
    bool stop_on_lost = false;
    // --step-timeout: ranks as processes end this one when a step of its engine outlives it
    // (RankGroupWatch); < 0: not given (check_rank_args: 300 s on CUDA, else none), 0: none.
    double step_timeout = -1;
};

// --ranks, --rank, --rendezvous, --rendezvous-timeout, --processes, --gpus,
// --stop-on-lost-rank, --step-timeout.
void add_rank_options(CLI::App* cmd, RankArgs& r);

// A usage error in the combination (--rank without --rendezvous, --gpus beside another device,
// ...), or ok, after resolving --gpus (into the ranks, --processes and e's device), ranks on
// cuda without a rendezvous (into --processes: on GPUs one process a rank) and
// --processes without a rendezvous (this process is rank 0, at a free port of 127.0.0.1 that
// the ranks it starts are told): from then on every rank looks like one given --rank and
// --rendezvous.
Status check_rank_args(RankArgs& r, EngineOptions& e);

// --gpus N (N > 0) into `ranks` = N and e's device cuda; a usage error beside another --ranks
// or --device. Nothing for gpus = 0. (check_rank_args calls it; `dsv4 info` has no rank args.)
Status apply_gpus(int gpus, int& ranks, EngineOptions& e);

// Runs body(options, rank) for every rank this process drives, options = base with the rank's
// group and rank set: --ranks 1: rank 0 alone on this thread (base unchanged); in process:
// every rank on a thread of its own; with --rendezvous: this process's rank once the others
// have joined (with start_others: after starting ranks 1..N-1, waited for before returning).
// Every rank must run the same steps (their collectives meet); a rank whose body
// returns leaves the group, so the others fail instead of waiting for it. The error returned is
// the first rank's to fail (the others' follow from it); ok when every rank's body was.
// `rank == 0` in the body is the rank that prints.
Status run_on_ranks(const EngineOptions& base, const RankArgs& r,
                    const std::function<Status(const EngineOptions&, int rank)>& body);

// ", rank R of N processes" / ", N ranks" / "": what a report adds to its device.
std::string ranks_note(const RankArgs& r);

}  // namespace dsv4::cli
