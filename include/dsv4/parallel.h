// Several ranks of one model (docs/parallel.md): expert parallelism, each rank an Engine that
// holds the whole model but a contiguous share of every layer's routed experts, with one sum
// over the ranks per layer. The ranks are threads of one process (RankGroup::in_process) or
// processes (RankGroup::connect: one rank a process, on one host or several), on the CPU
// backend or on GPUs (one a rank; the sums over NCCL, its bootstrap through this group).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "dsv4/status.h"

namespace dsv4 {

// The CUDA GPUs this process sees (CUDA_VISIBLE_DEVICES applies); 0 in a build without the
// CUDA backend or without a usable driver. Ranks on GPUs take one each (rank r: GPU r mod this).
int visible_gpus();

// What RankGroup::on_lost watches besides a connection closing.
struct RankGroupWatch {
    // The connections to the other ranks: one closing is a loss (false: a process that watches
    // its ranks' processes itself).
    bool hangups = true;
    // A step of this process's engine (the engine marks each, and its join to the group's
    // collective at load) that has not ended this many seconds after it began is a loss too (0:
    // no limit): a rank hung alive keeps its connections open, so only the time shows it. The
    // group then shuts its connections down: this rank's sum waiting over TCP fails with that
    // reason, and the other ranks see a loss.
    double step_timeout_s = 0.0;
};

class RankGroup {
  public:
    // `ranks` engines in this process, each made with EngineOptions::rank_group = this group
    // and its own EngineOptions::rank, each driven from its own thread with the same requests
    // in the same order (every step's collectives must meet on all ranks).
    static std::shared_ptr<RankGroup> in_process(int ranks);
    // This process as rank `rank` of `ranks`, the others other processes that make the same
    // call with their rank: rank 0 listens at `address` ("host:port"; the port free), the others
    // connect to it, every one within `timeout_s` (an error naming what was missing). This
    // process then drives one engine, EngineOptions::rank = rank, with the same requests in the
    // same order as the other processes. A rank that goes away fails the others' next step
    // with an error, never a hang.
    static Expected<std::shared_ptr<RankGroup>> connect(int rank, int ranks,
                                                        const std::string& address,
                                                        double timeout_s = 60.0);
    ~RankGroup();
    int size() const;
    // Rank `rank` (one this process runs) drives no more steps, done or failed: the other ranks'
    // collectives that would wait for it fail with an error instead (in process: theirs now and
    // later; over TCP: this process's connections close). Call it when a rank's run ends.
    void leave(int rank);
    // Ranks as processes only (RankGroup::connect): rank 0's `value` to every rank (the others
    // pass anything, and get rank 0's), e.g. a server's commands to its other ranks. Every rank
    // calls it in the same order as the steps' collectives; an error once the group failed (a
    // rank went away), or for an in-process group (its ranks share one process's engines).
    Expected<std::string> broadcast(int rank, const std::string& value);
    // Ranks as processes only: `lost` is called once, on a thread of the group's, when this
    // process's connection to another rank closes before this process's rank left the group
    // (that rank's process ended or its host went away; rank 0's own loss reaches every rank,
    // another rank's reaches rank 0 alone), with why. The group's sums over TCP notice a loss
    // by themselves; a sum waiting inside NCCL on a GPU does not, which is what this is for (the
    // CLI ends such a rank's process: docs/parallel.md). With `what`, also a step that outlives
    // its timeout (RankGroupWatch). Nothing for an in-process group (its ranks fail each other's
    // sums when they leave). Call it once, before the steps.
    void on_lost(std::function<void(const std::string& why)> lost, RankGroupWatch what = {});

    struct Impl;
    Impl& impl() { return *impl_; }

  private:
    explicit RankGroup(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
