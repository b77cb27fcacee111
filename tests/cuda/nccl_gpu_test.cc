// The ranks' sum over NCCL (docs/parallel.md) as far as one GPU can run it: a communicator of
// one rank goes through the same bootstrap (a unique id, ncclCommInitRank, the first sum waited
// for) and the same sum inside a step graph captured in thread-local mode as the ranks on
// several GPUs do; a malformed id is an error, not an abort. (Two ranks on one GPU are NCCL's
// "duplicate GPU" error: gpu_golden.ranks-share-a-gpu runs that through the CLI.)
#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/nccl_comm.h"
#include "backend/cuda/common/stream.h"
#include "cuda_test_util.h"

namespace dsv4::cuda {
namespace {

#if defined(DSV4_WITH_NCCL)

TEST(NcclGpu, OneRankSumsInsideACapturedGraph) {
    DSV4_REQUIRE_GPU();
    DSV4_CHECK_CUDA(cudaSetDevice(0));
    CudaStream stream = CudaStream::create();
    auto id = nccl_unique_id();
    ASSERT_TRUE(id.has_value()) << id.status().message();
    auto comm = NcclComm::create(*id, 0, 1, stream.get());
    ASSERT_TRUE(comm.has_value()) << comm.status().message();
    EXPECT_TRUE((*comm)->status().is_ok());

    // An odd length. The graph: the sum of x, a copy of x into tmp, the sum of tmp; a sum over
    // one rank leaves its buffer as it is, so after the replays both hold x's values (tmp
    // only if the copy ran between the sums, in stream order).
    const int64_t n = 1001;
    std::vector<float> host(n);
    for (int64_t i = 0; i < n; ++i) host[i] = 0.25f * static_cast<float>(i % 37) - 3.0f;
    float *x = nullptr, *tmp = nullptr;
    DSV4_CHECK_CUDA(cudaMalloc(&x, n * sizeof(float)));
    DSV4_CHECK_CUDA(cudaMalloc(&tmp, n * sizeof(float)));
    DSV4_CHECK_CUDA(cudaMemcpy(x, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));

    CudaGraph graph;
    CudaGraph::begin_capture(stream.get(), /*thread_local_mode=*/true);
    (*comm)->all_reduce_sum(x, n, stream.get());
    DSV4_CHECK_CUDA(
        cudaMemcpyAsync(tmp, x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream.get()));
    (*comm)->all_reduce_sum(tmp, n, stream.get());
    ASSERT_EQ(CudaGraph::end_capture(stream.get(), &graph), cudaSuccess);
    ASSERT_TRUE(graph.valid());
    for (int replay = 0; replay < 3; ++replay) graph.launch(stream.get());
    stream.synchronize();
    std::vector<float> got_x(n), got_tmp(n);
    DSV4_CHECK_CUDA(cudaMemcpy(got_x.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
    DSV4_CHECK_CUDA(cudaMemcpy(got_tmp.data(), tmp, n * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got_x, host);
    EXPECT_EQ(got_tmp, host);
    EXPECT_TRUE((*comm)->status().is_ok()) << (*comm)->status().message();
    cudaFree(x);
    cudaFree(tmp);
}

TEST(NcclGpu, AMalformedIdIsAnError) {
    DSV4_REQUIRE_GPU();
    DSV4_CHECK_CUDA(cudaSetDevice(0));
    CudaStream stream = CudaStream::create();
    auto comm = NcclComm::create("", 0, 1, stream.get());
    ASSERT_FALSE(comm.has_value());
    EXPECT_NE(comm.status().message().find("unique id of 0 bytes"), std::string::npos)
        << comm.status().message();
}

#else

TEST(NcclGpu, ABuildWithoutNcclSaysSo) {
    auto id = nccl_unique_id();
    ASSERT_FALSE(id.has_value());
    EXPECT_NE(id.status().message().find("no NCCL"), std::string::npos);
}

#endif

}  // namespace
}  // namespace dsv4::cuda
