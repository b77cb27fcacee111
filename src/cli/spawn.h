// Ranks as processes this one starts (--processes, --gpus N; docs/parallel.md): copies of this
// program on this host, each told its rank and a rendezvous on a free local port, so that one
// command line runs every rank.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dsv4/parallel.h"
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

// How a rank's process ends itself when it outlives a rank it cannot go on without: a rank that
// fails usually fails the others' next collective too, and they end with an error; but a sum
// waiting on a GPU for the lost rank (inside NCCL) would wait forever. A watch thread calls
// step() every few milliseconds from the moment of the loss until the process's own run ends: 3 s
// after the loss it says why on stderr and sends this process SIGTERM (a server shuts down as on
// Ctrl-C; other commands end), then SIGKILL 10 s later if it still runs.
class StopAfterLoss {
  public:
    // `who`: this process's rank as the message names it ("rank 0").
    explicit StopAfterLoss(std::string who) : who_(std::move(who)) {}
    // Whether there is more to do (SIGKILL not yet sent).
    bool step(std::chrono::steady_clock::duration since_loss, const std::string& why);
    // Whether it has sent SIGTERM.
    bool stopping() const { return termed_; }

  private:
    std::string who_;
    bool termed_ = false, killed_ = false;
};

// Watches the ranks rank 0 started while it runs its own (a thread): reaps them, and when one
// fails, StopAfterLoss unless rank 0 ends first.
class RankWatch {
  public:
    // pids[i] is names[i] ("rank 1").
    RankWatch(std::vector<int> pids, std::vector<std::string> names);
    ~RankWatch();
    RankWatch(const RankWatch&) = delete;
    RankWatch& operator=(const RankWatch&) = delete;

    // Rank 0 ended: `terminate` (it failed) sends the others SIGTERM (they would wait for it);
    // then waits for every one: one still running 30 s after rank 0 ended well gets SIGTERM (a
    // rank hung alive), and SIGKILL 10 s after its SIGTERM. Ok when every one exited 0 by
    // itself, else an error naming the first that did not.
    Status finish(bool terminate);

  private:
    struct State;
    std::unique_ptr<State> s_;
};

// Watches the other ranks of a group of processes while this one runs its rank (ranks started
// by hand or by a launcher, --rank R --rendezvous; rank 0 of --processes for the step timeout
// only): when a connection to another rank closes or a step outlives its timeout
// (RankGroup::on_lost, `what`), StopAfterLoss unless this rank's run ends first.
class PeerWatch {
  public:
    PeerWatch(RankGroup& group, int rank, RankGroupWatch what);
    ~PeerWatch();
    PeerWatch(const PeerWatch&) = delete;
    PeerWatch& operator=(const PeerWatch&) = delete;

    // This rank's run ended: stops watching. The loss that stopped this process, else ok (a
    // rank that ended normally just before this one is no failure).
    Status finish();

  private:
    struct State;
    std::shared_ptr<State> s_;  // (shared with the group's callback, which may outlive this)
    std::thread thread_;
};

}  // namespace dsv4::cli
