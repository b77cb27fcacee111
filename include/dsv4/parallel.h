// Several ranks of one model (docs/parallel.md): expert parallelism, each rank an Engine that
// holds the whole model but a contiguous share of every layer's routed experts, with one sum
// over the ranks per layer. Today the ranks are threads of one process on the CPU backend
// (RankGroup::in_process); ranks on GPUs over NCCL are not written yet.
#pragma once

#include <memory>

namespace dsv4 {

class RankGroup {
  public:
    // `ranks` engines in this process, each made with EngineOptions::rank_group = this group
    // and its own EngineOptions::rank, each driven from its own thread with the same requests
    // in the same order (every step's collectives must meet on all ranks).
    static std::shared_ptr<RankGroup> in_process(int ranks);
    ~RankGroup();
    int size() const;

    struct Impl;
    Impl& impl() { return *impl_; }

  private:
    explicit RankGroup(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
