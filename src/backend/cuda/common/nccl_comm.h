// The ranks' sum on GPUs: one NCCL communicator a rank (docs/parallel.md). The CUDA backend
// makes it when the engine gives it a rank group; the bootstrap (NCCL's unique id, drawn by rank
// 0) travels over the group's own connections (ops::Collective::shared_once), so ranks as
// threads of one process and ranks as processes take the same path. Builds without NCCL
// (DSV4_WITH_NCCL undefined) have the same interface, every call an error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace dsv4::cuda {

// A fresh unique id's bytes (rank 0 draws it, every rank joins with it), or NCCL's error.
Expected<std::string> nccl_unique_id();

class NcclComm {
  public:
    // Rank `rank` of `ranks` joins the communicator of `unique_id` on this thread's current
    // device; every rank calls it (it returns once all have joined). Then one sum of one float
    // on `stream`, waited for: NCCL connects its peers at a communicator's first collective,
    // which must not be inside a step's graph capture. An error (NCCL's message) when the id is
    // malformed, two ranks share a GPU, or NCCL fails.
    static Expected<std::unique_ptr<NcclComm>> create(const std::string& unique_id, int rank,
                                                      int ranks, cudaStream_t stream);
    ~NcclComm();
    NcclComm(const NcclComm&) = delete;
    NcclComm& operator=(const NcclComm&) = delete;

    // x[0, n) := its sum over the ranks, in place in device memory, enqueued on `stream` (also
    // inside a graph capture). Every rank gets the same bits: NCCL reduces each element once
    // and copies the result to every rank; the order of the additions is NCCL's, not rank order.
    void all_reduce_sum(float* x, int64_t n, cudaStream_t stream);

    // Ok, or the error NCCL reported asynchronously (a peer that went away, a network error).
    Status status() const;

  private:
    struct Impl;
    explicit NcclComm(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4::cuda
