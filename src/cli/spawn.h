// Ranks as processes this one starts (--processes, --gpus N; docs/parallel.md): copies of this
// program on this host, each told its rank and a rendezvous on a free local port, so that one
// command line runs every rank.
#pragma once

#include <string>
#include <vector>

#include "dsv4/status.h"

namespace dsv4::cli {

// This program's command line as main received it (set once by main).
void set_program_args(int argc, char** argv);

// A TCP port on 127.0.0.1 free at the time of the call (the kernel's choice).
Expected<int> free_local_port();

// Starts this program (/proc/self/exe) once for every entry of `extra`: main's command line with
// the entry's arguments put right after the subcommand. Each child runs in a process group of
// its own (a terminal's Ctrl-C reaches this process, which ends them) and gets SIGTERM when this
// process dies. The children's ids, or an error (after ending those already started).
Expected<std::vector<int>> spawn_self(const std::vector<std::vector<std::string>>& extra);

// Waits for every child; with `terminate` first sends each SIGTERM (this rank failed: they would
// otherwise wait for it). Ok when every child exited 0, else an error naming the first that did
// not; `names[i]` says what child i was ("rank 1").
Status wait_children(const std::vector<int>& pids, const std::vector<std::string>& names,
                     bool terminate);

}  // namespace dsv4::cli
