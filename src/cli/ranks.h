// The rank options that check, generate and bench share (docs/parallel.md): the routed experts
// split over --ranks N engines, threads of this process, or with --rendezvous one process each.
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
};

// --ranks, --rank, --rendezvous, --rendezvous-timeout.
void add_rank_options(CLI::App* cmd, RankArgs& r);

// A usage error in the combination (--rank without --rendezvous, ...), or ok.
Status check_rank_args(const RankArgs& r);

// Runs body(options, rank) for every rank this process drives, options = base with the rank's
// group and rank set: --ranks 1: rank 0 alone on this thread (base unchanged); in process:
// every rank on a thread of its own; with --rendezvous: this process's rank once the others
// have joined. Every rank must run the same steps (their collectives meet); a rank whose body
// returns leaves the group, so the others fail instead of waiting for it. The error returned is
// the first rank's to fail (the others' follow from it); ok when every rank's body was.
// `rank == 0` in the body is the rank that prints.
Status run_on_ranks(const EngineOptions& base, const RankArgs& r,
                    const std::function<Status(const EngineOptions&, int rank)>& body);

// ", rank R of N processes" / ", N ranks" / "": what a report adds to its device.
std::string ranks_note(const RankArgs& r);

}  // namespace dsv4::cli
