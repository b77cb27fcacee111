// Ranks as processes this one starts (--processes, --gpus N; docs/parallel.md): copies of this
// program on this host, each told its rank and a rendezvous on a free local port, so that one
// command line runs every rank.
#pragma once

#include <memory>
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

// Watches the ranks rank 0 started while it runs its own (a thread). A rank that fails (a status
// other than 0, a signal) usually fails rank 0's next collective too, and rank 0 ends with an
// error; but a rank whose sum waits on a GPU for the lost one (inside NCCL) would wait forever.
// So when rank 0 has not ended 3 s after a started rank failed, the watch says so on stderr and
// sends this process SIGTERM (a server shuts down as on Ctrl-C; other commands end), then
// SIGKILL 10 s later if it still runs.
class RankWatch {
  public:
    // pids[i] is names[i] ("rank 1").
    RankWatch(std::vector<int> pids, std::vector<std::string> names);
    ~RankWatch();
    RankWatch(const RankWatch&) = delete;
    RankWatch& operator=(const RankWatch&) = delete;

    // Rank 0 ended: `terminate` (it failed) sends the others SIGTERM (they would wait for it);
    // then waits for every one. Ok when every one exited 0, else an error naming the first that
    // did not.
    Status finish(bool terminate);

  private:
    struct State;
    std::unique_ptr<State> s_;
};

}  // namespace dsv4::cli
