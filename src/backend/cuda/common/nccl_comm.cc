#include "backend/cuda/common/nccl_comm.h"

#include <algorithm>

#include "backend/cuda/common/check.cuh"
#include "base/check.h"

#if defined(DSV4_WITH_NCCL)
#include <nccl.h>
#endif

namespace dsv4::cuda {

#if defined(DSV4_WITH_NCCL)

namespace {

Status nccl_error(const char* what, ncclResult_t r, ncclComm_t comm = nullptr) {
    const char* last = ncclGetLastError(comm);
    return error("NCCL ", what, ": ", ncclGetErrorString(r),
                 last != nullptr && last[0] != '\0' ? str_cat(" (", last, ")") : std::string());
}

}  // namespace

struct NcclComm::Impl {
    ncclComm_t comm = nullptr;
};

Expected<std::string> nccl_unique_id() {
    ncclUniqueId id;
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
        return nccl_error("unique id", r);
    return std::string(id.internal, sizeof id.internal);
}

Expected<std::unique_ptr<NcclComm>> NcclComm::create(const std::string& unique_id, int rank,
                                                     int ranks, cudaStream_t stream) {
    ncclUniqueId id;
    if (unique_id.size() != sizeof id.internal)
        return error("NCCL: a unique id of ", unique_id.size(), " bytes (", sizeof id.internal,
                     " expected: rank 0 could not draw one)");
    std::copy(unique_id.begin(), unique_id.end(), id.internal);
    auto impl = std::make_unique<Impl>();
    if (const ncclResult_t r = ncclCommInitRank(&impl->comm, ranks, id, rank); r != ncclSuccess)
        return nccl_error(str_cat("rank ", rank, " of ", ranks, " joining").c_str(), r);
    std::unique_ptr<NcclComm> comm(new NcclComm(std::move(impl)));
    // The first collective connects the peers (allocations, proxy threads): now, not in a
    // capture. One float of device memory, summed and waited for.
    float* one = nullptr;
    DSV4_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&one), sizeof(float), stream));
    DSV4_CHECK_CUDA(cudaMemsetAsync(one, 0, sizeof(float), stream));
    const ncclResult_t r =
        ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, comm->impl_->comm, stream);
    DSV4_CHECK_CUDA(cudaFreeAsync(one, stream));
    DSV4_CHECK_CUDA(cudaStreamSynchronize(stream));
    if (r != ncclSuccess) return nccl_error("first sum", r, comm->impl_->comm);
    DSV4_RETURN_IF_ERROR(comm->status());
    return comm;
}

NcclComm::NcclComm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NcclComm::~NcclComm() {
    // Abort, not destroy: destroy waits for the peers' outstanding work, which a rank that
    // failed never finishes; abort frees this rank's resources without them.
    if (impl_ != nullptr && impl_->comm != nullptr) (void)ncclCommAbort(impl_->comm);
}

void NcclComm::all_reduce_sum(float* x, int64_t n, cudaStream_t stream) {
    const ncclResult_t r =
        ncclAllReduce(x, x, static_cast<size_t>(n), ncclFloat32, ncclSum, impl_->comm, stream);
    // An enqueue error is an invalid argument or a broken communicator: the step cannot go on.
    DSV4_ASSERT(r == ncclSuccess, nccl_error("all-reduce", r, impl_->comm).message());
}

Status NcclComm::status() const {
    ncclResult_t async = ncclSuccess;
    if (const ncclResult_t r = ncclCommGetAsyncError(impl_->comm, &async); r != ncclSuccess)
        return nccl_error("state", r, impl_->comm);
    if (async != ncclSuccess) return nccl_error("communicator", async, impl_->comm);
    return Status::ok();
}

#else  // no NCCL in this build

struct NcclComm::Impl {};

Expected<std::string> nccl_unique_id() {
    return error("this build has no NCCL (configure with NCCL installed: docs/parallel.md)");
}

Expected<std::unique_ptr<NcclComm>> NcclComm::create(const std::string&, int, int, cudaStream_t) {
    return nccl_unique_id().status();
}

NcclComm::NcclComm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclComm::~NcclComm() = default;

void NcclComm::all_reduce_sum(float*, int64_t, cudaStream_t) {
    DSV4_ASSERT(false, "NcclComm without NCCL");
}

Status NcclComm::status() const {
    return Status::ok();
}

#endif

}  // namespace dsv4::cuda
