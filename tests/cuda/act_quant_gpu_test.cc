// GPU tests of the fused NVFP4 activation quantizer: bit-exact with nvfp4_quantize() on fresh
// random data (f32 and bf16 inputs, one-CTA and multi-CTA grids, odd shapes, an all-zero tensor),
// the barrier re-arming across launches, and zero host synchronisation, shown by capturing the
// quantizer into a CUDA graph under cudaStreamCaptureModeGlobal (any synchronising call made
// while capturing invalidates the capture) and replaying it.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/device.h"
#include "backend/cuda/common/device_arena.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/kernels/quant/nvfp4_act_quant.h"
#include "base/fp_codes.h"
#include "cuda_test_util.h"
#include "formats/nvfp4_quant.h"

namespace dsv4::cuda {
namespace {

struct Buffers {
    DeviceArena arena;
    void* x = nullptr;
    uint8_t* packed = nullptr;
    uint8_t* scales = nullptr;
    float* global = nullptr;
    uint32_t* sync = nullptr;
};

Buffers make_buffers(int64_t rows, int64_t cols) {
    Buffers b;
    ArenaPlan plan;
    plan.add(static_cast<size_t>(rows * cols * 4));
    plan.add(static_cast<size_t>(rows * cols / 2));
    plan.add(static_cast<size_t>(rows * cols / 16));
    plan.add(4);
    plan.add(nvfp4_act_quant_workspace_bytes());
    auto arena = DeviceArena::create(plan.total());
    DSV4_ASSERT(arena.has_value(), arena.status().message());
    b.arena = std::move(arena).value();
    b.x = b.arena.alloc(static_cast<size_t>(rows * cols * 4));
    b.packed = b.arena.alloc_array<uint8_t>(static_cast<size_t>(rows * cols / 2));
    b.scales = b.arena.alloc_array<uint8_t>(static_cast<size_t>(rows * cols / 16));
    b.global = b.arena.alloc_array<float>(1);
    b.sync = b.arena.alloc_array<uint32_t>(nvfp4_act_quant_workspace_bytes() / 4);
    DSV4_CHECK_CUDA(cudaMemset(b.sync, 0, nvfp4_act_quant_workspace_bytes()));
    return b;
}

Nvfp4ActQuantArgs args_for(const Buffers& b, int64_t rows, int64_t cols, bool bf16) {
    Nvfp4ActQuantArgs a;
    a.x = b.x;
    a.x_bf16 = bf16;
    a.rows = rows;
    a.cols = cols;
    a.ldx = cols;
    a.packed = b.packed;
    a.scales = b.scales;
    a.global_scale = b.global;
    a.sync = b.sync;
    return a;
}

// Uploads x (as f32 or bf16), returns the float values the reference must see.
std::vector<float> upload_x(const Buffers& b, std::vector<float> x, bool bf16) {
    if (bf16) {
        const std::vector<uint16_t> xb = test::to_bf16(x);
        DSV4_CHECK_CUDA(cudaMemcpy(b.x, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
        return test::from_bf16(xb);
    }
    DSV4_CHECK_CUDA(cudaMemcpy(b.x, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    return x;
}

void expect_bit_exact(const Buffers& b, const std::vector<float>& x, int64_t rows, int64_t cols) {
    const Nvfp4Tensor want = nvfp4_quantize(x.data(), rows, cols);
    std::vector<uint8_t> packed(want.packed.size()), scales(want.scales.size());
    float global = 0.0f;
    DSV4_CHECK_CUDA(cudaMemcpy(packed.data(), b.packed, packed.size(), cudaMemcpyDeviceToHost));
    DSV4_CHECK_CUDA(cudaMemcpy(scales.data(), b.scales, scales.size(), cudaMemcpyDeviceToHost));
    DSV4_CHECK_CUDA(cudaMemcpy(&global, b.global, 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(f32_to_bits(global), f32_to_bits(want.global_scale))
        << global << " vs " << want.global_scale;
    size_t bad = 0;
    for (size_t i = 0; i < packed.size() && bad < 5; ++i)
        if (packed[i] != want.packed[i]) {
            ++bad;
            ADD_FAILURE() << "packed byte " << i << ": " << int(packed[i]) << " vs "
                          << int(want.packed[i]);
        }
    for (size_t i = 0; i < scales.size() && bad < 10; ++i)
        if (scales[i] != want.scales[i]) {
            ++bad;
            ADD_FAILURE() << "scale " << i << ": " << int(scales[i]) << " vs "
                          << int(want.scales[i]);
        }
}

std::vector<float> random_x(int64_t n, std::mt19937& rng) {
    std::vector<float> x = test::random_activations(n, rng);
    // Blocks of zeros, tiny blocks and a few outliers exercise every scale branch.
    for (int64_t i = 0; i + 16 <= n; i += 16 * 37)
        std::fill(x.begin() + i, x.begin() + i + 16, 0.0f);
    for (int64_t i = 16 * 5; i + 16 <= n; i += 16 * 53)
        for (int j = 0; j < 16; ++j) x[static_cast<size_t>(i + j)] *= 1e-7f;
    if (n > 100) x[static_cast<size_t>(n / 3)] = 300.0f;
    return x;
}

TEST(Nvfp4ActQuantGpu, BitExactWithTheCpuReference) {
    DSV4_REQUIRE_GPU();
    const int sms = query_device(0)->sm_count;
    std::mt19937 rng(77);
    struct Shape {
        int64_t rows, cols;
    };
    for (const Shape s : {Shape{1, 16}, Shape{3, 48}, Shape{1, 4096}, Shape{16, 4096},
                          Shape{7, 7168}, Shape{1024, 4096}, Shape{4096, 4096}}) {
        for (bool bf16 : {false, true}) {
            SCOPED_TRACE(testing::Message()
                         << s.rows << "x" << s.cols << (bf16 ? " bf16" : " f32"));
            Buffers b = make_buffers(s.rows, s.cols);
            CudaStream stream = CudaStream::create();
            // Several launches on one workspace: the grid barrier must re-arm every time.
            for (int rep = 0; rep < 3; ++rep) {
                const std::vector<float> x = upload_x(b, random_x(s.rows * s.cols, rng), bf16);
                launch_nvfp4_act_quant(args_for(b, s.rows, s.cols, bf16), sms, stream.get());
                stream.synchronize();
                expect_bit_exact(b, x, s.rows, s.cols);
            }
        }
    }
}

TEST(Nvfp4ActQuantGpu, AllZeroTensor) {
    DSV4_REQUIRE_GPU();
    const int sms = query_device(0)->sm_count;
    Buffers b = make_buffers(8, 4096);
    const std::vector<float> x(8 * 4096, 0.0f);
    upload_x(b, x, false);
    CudaStream stream = CudaStream::create();
    launch_nvfp4_act_quant(args_for(b, 8, 4096, false), sms, stream.get());
    stream.synchronize();
    expect_bit_exact(b, x, 8, 4096);
}

TEST(Nvfp4ActQuantGpu, NoHostSyncGraphCapture) {
    DSV4_REQUIRE_GPU();
    const int sms = query_device(0)->sm_count;
    std::mt19937 rng(99);
    // One-CTA (decode) and cooperative multi-CTA (prefill) grids.
    for (int64_t rows : {int64_t{4}, int64_t{2048}}) {
        SCOPED_TRACE(testing::Message() << rows << " rows");
        const int64_t cols = 4096;
        Buffers b = make_buffers(rows, cols);
        CudaStream stream = CudaStream::create();
        CudaGraph::begin_capture(stream.get());
        launch_nvfp4_act_quant(args_for(b, rows, cols, true), sms, stream.get());
        launch_nvfp4_act_quant(args_for(b, rows, cols, true), sms, stream.get());
        CudaGraph graph;
        ASSERT_EQ(CudaGraph::end_capture(stream.get(), &graph), cudaSuccess)
            << "the quantizer broke the stream capture (a host synchronisation?)";
        for (int rep = 0; rep < 3; ++rep) {
            const std::vector<float> x = upload_x(b, random_x(rows * cols, rng), true);
            graph.launch(stream.get());
            stream.synchronize();
            expect_bit_exact(b, x, rows, cols);
        }
    }
}

}  // namespace
}  // namespace dsv4::cuda
