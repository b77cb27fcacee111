// GPU tests of the backend core: the device arena (one allocation, aligned bump allocation),
// streams/events/graphs, and the launch check catching a bad launch.
#include <gtest/gtest.h>

#include <cstdint>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/device.h"
#include "backend/cuda/common/device_arena.h"
#include "backend/cuda/common/stream.h"
#include "cuda_test_util.h"

namespace dsv4::cuda {
namespace {

TEST(DeviceArenaGpu, AlignedBumpAllocation) {
    DSV4_REQUIRE_GPU();
    auto arena = DeviceArena::create(1 << 20);
    ASSERT_TRUE(arena);
    void* a = arena->alloc(10);
    void* b = arena->alloc(1000, 1024);
    void* c = arena->alloc(4);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % kArenaAlign, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 1024, 0u);
    EXPECT_GT(reinterpret_cast<uintptr_t>(c), reinterpret_cast<uintptr_t>(b));
    EXPECT_LE(arena->used(), arena->capacity());
    DSV4_CHECK_CUDA(cudaMemset(a, 0, arena->used()));
    DSV4_CHECK_CUDA(cudaDeviceSynchronize());
}

TEST(DeviceArenaGpu, TooLargeIsAnErrorNotAnAbort) {
    DSV4_REQUIRE_GPU();
    auto arena = DeviceArena::create(size_t{1} << 50);
    EXPECT_FALSE(arena);
}

TEST(DeviceArenaGpuDeathTest, AllocationAfterFreezeAborts) {
    DSV4_REQUIRE_GPU();
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
        {
            auto arena = DeviceArena::create(4096);
            arena->freeze();
            arena->alloc(16);
        },
        "after freeze");
}

TEST(StreamGpu, EventsTimeAGraph) {
    DSV4_REQUIRE_GPU();
    auto arena = DeviceArena::create(1 << 20);
    ASSERT_TRUE(arena);
    void* p = arena->alloc(1 << 20);
    CudaStream s = CudaStream::create();
    CudaGraph::begin_capture(s.get());
    DSV4_CHECK_CUDA(cudaMemsetAsync(p, 1, 1 << 20, s.get()));
    CudaGraph g;
    ASSERT_EQ(CudaGraph::end_capture(s.get(), &g), cudaSuccess);
    CudaEvent start = CudaEvent::create(), end = CudaEvent::create();
    start.record(s.get());
    g.launch(s.get());
    end.record(s.get());
    EXPECT_GE(CudaEvent::elapsed_ms(start, end), 0.0f);
}

TEST(StreamGpu, SyncInsideCaptureBreaksIt) {
    // The proof the quantizer test relies on: a host sync during a global-mode capture fails it.
    DSV4_REQUIRE_GPU();
    CudaStream s = CudaStream::create();
    CudaGraph::begin_capture(s.get());
    EXPECT_NE(cudaDeviceSynchronize(), cudaSuccess);
    CudaGraph g;
    EXPECT_NE(CudaGraph::end_capture(s.get(), &g), cudaSuccess);
    cudaGetLastError();
}

}  // namespace
}  // namespace dsv4::cuda
