// The tensor-core linear (backend/cuda/gemm_op.h): its weight decode against the GEMV layout's
// host model, and the backend's grouped and packed linears of >= 256 rows (the default
// DSV4_CUDA_GEMM_MIN_ROWS; whole weights and row ranges: CudaOpsGpu.QuantizedLinear)
// against double products of the dequantized weights, in every format. FP8 with arbitrary f32
// block scales is not bf16-exact after one scalar: it must stay on the GEMV (and still match).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/device_arena.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemv_op.h"
#include "backend/cuda/kernels/gemm/gemm_dequant.h"
#include "base/fp_codes.h"
#include "cuda_test_util.h"
#include "ops_gpu_util.h"

namespace dsv4 {
namespace {

using namespace ops_gpu_test;  // NOLINT(google-build-using-namespace): the shared helpers
using cuda::test::TestFormat;

constexpr TestFormat kFormats[] = {TestFormat::kNvfp4, TestFormat::kMxfp4, TestFormat::kFp8E8m0,
                                   TestFormat::kFp8F32, TestFormat::kBf16};

bool exact_format(TestFormat f) {
    return f != TestFormat::kFp8F32;
}

// Rows [64, 64 + 133) of a 200 x 352 weight decoded: bf16(w / alpha) * alpha is the host
// model's value (gemv_unpack_row) for the exact formats, and the check pass says which formats
// those are.
TEST(GemmGpu, DequantMatchesTheGemvHostModel) {
    DSV4_REQUIRE_GPU();
    std::mt19937 rng(41);
    const int64_t N = 200, K = 352, row0 = 64, rows = 133;
    for (TestFormat f : kFormats) {
        const auto ow = cuda::test::random_weight(f, N, K, rng);
        const QuantWeight* parts[] = {&ow.w};
        auto packed = cuda::gemv_repack(parts, 1, 1);
        ASSERT_TRUE(packed.has_value()) << packed.status().message();
        auto arena = cuda::DeviceArena::create(size_t{16} << 20);
        ASSERT_TRUE(arena.has_value());
        const cuda::GemvWeight w = cuda::upload_gemv_weight(*packed, *arena);
        auto* out = arena->alloc_array<uint16_t>(rows * K);
        auto* alpha = arena->alloc_array<float>(1);
        auto* flag = arena->alloc_array<int>(1);
        DSV4_CHECK_CUDA(cudaMemset(flag, 0, sizeof(int)));
        cuda::GemmDequantArgs d;
        d.format = w.shape.format;
        d.w_tiles = w.tiles;
        d.w_scales = w.scales;
        d.out_scale = w.out_scale;
        d.k = K;
        d.k_tiles = w.shape.k_tiles();
        d.row0 = row0;
        d.rows = rows;
        d.out = out;
        d.alpha = alpha;
        d.inexact = flag;
        cuda::launch_gemm_dequant(d, nullptr);
        std::vector<uint16_t> got(rows * K);
        float a = 0;
        int inexact = 0;
        DSV4_CHECK_CUDA(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost));
        DSV4_CHECK_CUDA(cudaMemcpy(&a, alpha, sizeof a, cudaMemcpyDeviceToHost));
        DSV4_CHECK_CUDA(cudaMemcpy(&inexact, flag, sizeof inexact, cudaMemcpyDeviceToHost));
        const char* name = cuda::test::test_format_name(f);
        // (These rows' flag; a whole-weight check of the exact formats must pass too.)
        EXPECT_EQ(inexact != 0, !exact_format(f)) << name;
        if (!exact_format(f)) continue;
        std::vector<float> ref(K);
        int64_t bad = 0;
        for (int64_t r = 0; r < rows; ++r) {
            cuda::gemv_unpack_row(*packed, 0, row0 + r, ref.data());
            for (int64_t k = 0; k < K; ++k) {
                const double v = static_cast<double>(bf16_to_f32(got[r * K + k])) * a;
                bad += std::fabs(v - ref[k]) > 0x1p-22 * std::fabs(ref[k]);
            }
        }
        EXPECT_EQ(bad, 0) << name << ": decoded values off the host model";
        d.row0 = 0;
        d.rows = N;
        d.out = nullptr;
        DSV4_CHECK_CUDA(cudaMemset(flag, 0, sizeof(int)));
        cuda::launch_gemm_dequant(d, nullptr);
        DSV4_CHECK_CUDA(cudaMemcpy(&inexact, flag, sizeof inexact, cudaMemcpyDeviceToHost));
        EXPECT_EQ(inexact, 0) << name << ": whole weight";
    }
}

// Grouped (wo_a's shape: group j reads x columns [j K, (j+1) K) and weight rows j N..) and the
// parts of a packed group, at 260 rows.
TEST(GemmGpu, GroupedAndPackedLinears) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(47);
    const int64_t K = 320, M = 260;
    const ops::ActType f32 = ops::ActType::kF32;
    for (TestFormat f : kFormats) {
        const char* name = cuda::test::test_format_name(f);
        {
            const int64_t g = 3, N = 128, ldx = g * K + 8, ldy = g * N + 3;
            const auto ow = cuda::test::random_weight(f, g * N, K, rng);
            auto w = be->upload_weight(ow.w, {ops::WeightRole::kAttention, 0});
            ASSERT_TRUE(w.has_value()) << w.status().message();
            const ops::Weight rw = cpu_ref::wrap(ow.w);
            const auto x = randn(M * ldx, rng);
            Dev<float> dx(*be, x), dy(*be, M * ldy);
            std::vector<float> ref(M * ldy, 0.0f);
            const int64_t runs = cuda_gemm_runs(*be);
            be->linear(
                {dx.p, &*w, dy.p, M, N, 0, ldx, ldy, f32, f32, false, false, static_cast<int>(g)});
            EXPECT_EQ(cuda_gemm_runs(*be) - runs, exact_format(f) ? 1 : 0) << name;
            cpu_ref::linear({x.data(), &rw, ref.data(), M, N, 0, ldx, ldy, f32, f32, false, false,
                             static_cast<int>(g)});
            auto y = dy.get();
            for (int64_t m = 0; m < M; ++m)  // the padding columns are not written
                for (int64_t n = g * N; n < ldy; ++n) y[m * ldy + n] = 0.0f;
            expect_close((std::string("gemm grouped ") + name).c_str(), y, ref, 0.0,
                         2e-4 * max_abs(ref));
        }
        const int64_t rows[] = {128, 64, 192};
        std::vector<cuda::test::OwnedWeight> ow;
        std::vector<ops::Weight> dw;
        for (int64_t n : rows) {
            ow.push_back(cuda::test::random_weight(f, n, K, rng));
            auto w = be->upload_weight(ow.back().w, {ops::WeightRole::kAttention, 0});
            ASSERT_TRUE(w.has_value()) << w.status().message();
            dw.push_back(*w);
        }
        const ops::Weight* parts[] = {&dw[0], &dw[1], &dw[2]};
        auto packed = be->pack_rows(parts);
        ASSERT_TRUE(packed.has_value() && packed->valid()) << name;
        const auto x = randn(M * K, rng);
        Dev<float> dx(*be, x);
        const int64_t runs = cuda_gemm_runs(*be);
        const auto y = run_linear_group(*be, *packed, dw, dx.p, M);
        EXPECT_EQ(cuda_gemm_runs(*be) - runs, exact_format(f) ? 3 : 0) << name;
        for (int i = 0; i < 3; ++i) {
            int64_t bad = 0;
            const double worst =
                worst_over_bound(ow[i].w, x, M, K, K, y[i], rows[i], 0, rows[i], &bad);
            std::printf("[gemm] packed %-8s part %d worst err/tol = %.3g\n", name, i, worst);
            EXPECT_EQ(bad, 0) << name << " packed part " << i;
        }
    }
}

}  // namespace
}  // namespace dsv4
