// GPU tests of the weight GEMV against the dequant_row CPU reference on fresh random data:
// every format, bf16 and f32 activations, f32 and bf16 outputs, M = 1..16, odd shapes
// (N = 17, K = 48), the V4-Flash shapes, grouped launches with device expert ids, row-block
// quads split between warps, repeatability, capture into a CUDA graph, the MoE step's chain
// (w1|w3, then w2 with the combine) under PDL, and the same as one launch (the SwiGLU chain).
// Tolerances: docs/numerics-cuda.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/device.h"
#include "backend/cuda/common/device_arena.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/gemv_op.h"
#include "backend/cuda/kernels/gemv/gemv_chain.h"
#include "base/fp_codes.h"
#include "cuda_test_util.h"

namespace dsv4::cuda {
namespace {

using test::OwnedWeight;
using test::TestFormat;

struct Case {
    TestFormat format = TestFormat::kNvfp4;
    int64_t n = 0, k = 0;
    int m = 1;
    int n_experts = 1;     // experts stored
    int parts = 1;         // parts concatenated along n (w1 + w3)
    std::vector<int> ids;  // groups -> experts (device ids); empty: one group per expert
    bool shared_x = true;  // one x for every group
    bool x_f32 = false;
    bool y_bf16 = false;
    bool pdl = false;
    int min_tiles_per_warp = 0;  // 1 forces many warps (split row blocks)
    int ctas_per_sm = 0;         // 0: default
    int depth = 0;               // pipeline stages; 0: default
    bool ids_ready = false;      // expert ids read before the PDL wait
    bool accumulate = false;     // y += (y starts from random values)
    bool sum_groups = false;     // every group adds into one y, scaled by a random group scale
    bool zero = false;           // with accumulate: y starts as NaN and the launch clears it
    // > 0: the launch runs the first live_groups groups only, counted on the device
    // (GemvArgs::n_groups_dev); the later groups' y must keep what it held.
    int live_groups = 0;
};

std::string describe(const Case& c) {
    std::string s = std::string(test::test_format_name(c.format)) + " n=" + std::to_string(c.n) +
                    " k=" + std::to_string(c.k) + " m=" + std::to_string(c.m) +
                    " experts=" + std::to_string(c.n_experts) + "x" + std::to_string(c.parts) +
                    " groups=" + std::to_string(c.ids.empty() ? c.n_experts : c.ids.size()) +
                    (c.shared_x ? " shared-x" : " per-group-x") + (c.x_f32 ? " x=f32" : " x=bf16") +
                    (c.y_bf16 ? " y=bf16" : " y=f32") + (c.pdl ? " pdl" : "") +
                    (c.min_tiles_per_warp ? " split" : "") +
                    (c.ctas_per_sm ? " ctas=" + std::to_string(c.ctas_per_sm) : "") +
                    (c.depth ? " depth=" + std::to_string(c.depth) : "") +
                    (c.ids_ready ? " ids-ready" : "") + (c.accumulate ? " accumulate" : "") +
                    (c.sum_groups ? " sum-groups" : "") + (c.zero ? " zero" : "") +
                    (c.live_groups ? " live=" + std::to_string(c.live_groups) : "");
    return s;
}

// Worst |err| / bound over the outputs; > 1 fails. Printed for docs/numerics-cuda.md.
struct Outcome {
    double worst_ratio = 0.0;
    double max_rel_l2 = 0.0;
};

double tolerance(const Case& c, double abs_sum, double ref) {
    // FP32 accumulation (tensor-core adds are not RNE) bounded relative to sum |w x|; the f32
    // activation split carries ~2^-17 of x; a bf16 output adds its rounding (half an ulp is up
    // to 2^-8 relative; one ulp leaves room for the FP32 error carried into it).
    double t = 2e-5 * abs_sum + 1e-30;
    if (c.x_f32) t += std::ldexp(1.0, -16) * abs_sum;
    if (c.y_bf16) t += std::ldexp(1.0, -7) * std::fabs(ref);
    // Accumulation: up to (splits x groups) FP32 adds onto y, each rounding relative to a
    // running sum bounded by |y_init| + sum |w x| <= |ref| + 2 sum |w x|.
    if (c.accumulate) t += std::ldexp(1.0, -17) * (std::fabs(ref) + 2.0 * abs_sum);
    return t;
}

// n router weights (the MoE combine's group scales), uniform in [0.05, 1).
std::vector<float> router_weights(int64_t n, std::mt19937& rng) {
    std::vector<float> w(static_cast<size_t>(n));
    std::uniform_real_distribution<float> u(0.05f, 1.0f);
    for (float& v : w) v = u(rng);
    return w;
}

// `count` random checkpoint tensors of rows x cols.
std::vector<OwnedWeight> random_weights(TestFormat f, int count, int64_t rows, int64_t cols,
                                        std::mt19937& rng) {
    std::vector<OwnedWeight> owned;
    owned.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) owned.push_back(test::random_weight(f, rows, cols, rng));
    return owned;
}

// gemv_repack of owned[first, first + n_experts * parts), in [expert][part] order.
Expected<GemvPacked> repack(const std::vector<OwnedWeight>& owned, int n_experts, int parts,
                            size_t first = 0) {
    std::vector<const QuantWeight*> ptrs;
    for (int i = 0; i < n_experts * parts; ++i) ptrs.push_back(&owned[first + i].w);
    return gemv_repack(ptrs.data(), n_experts, parts);
}

Outcome run_case(const Case& c, uint32_t seed, int repeats = 1) {
    SCOPED_TRACE(describe(c));
    Outcome out;
    std::mt19937 rng(seed);
    const int groups = c.ids.empty() ? c.n_experts : static_cast<int>(c.ids.size());
    const int64_t part_rows = c.n / c.parts;

    // Weights: n_experts x parts random checkpoint tensors.
    const std::vector<OwnedWeight> owned =
        random_weights(c.format, c.n_experts * c.parts, part_rows, c.k, rng);
    auto packed = repack(owned, c.n_experts, c.parts);
    EXPECT_TRUE(packed) << (packed ? "" : packed.status().message());
    if (!packed) return out;

    // Activations.
    const int64_t x_count = (c.shared_x ? 1 : groups) * c.m * c.k;
    std::vector<float> x = test::random_activations(x_count, rng);
    std::vector<uint16_t> x_bf = test::to_bf16(x);
    if (!c.x_f32) x = test::from_bf16(x_bf);

    const auto dev = query_device(0);
    const int y_sets = c.sum_groups ? 1 : groups;
    const int64_t y_count = static_cast<int64_t>(y_sets) * c.m * c.n;
    std::vector<float> group_scale(static_cast<size_t>(groups), 1.0f);
    if (c.sum_groups) {
        std::uniform_real_distribution<float> u(0.05f, 1.0f);
        for (float& v : group_scale) v = u(rng);
    }
    std::vector<float> y_init(static_cast<size_t>(y_count), 0.0f);
    if (c.accumulate && !c.zero) y_init = test::random_activations(y_count, rng);
    ArenaPlan plan;
    plan.add(static_cast<size_t>(packed->shape.device_bytes()));
    plan.add(static_cast<size_t>(x_count) * 4);
    plan.add(static_cast<size_t>(y_count) * 4);
    plan.add(GemvWorkspace::bytes(groups * packed->shape.row_blocks()));
    plan.add(static_cast<size_t>(groups) * 4);
    plan.add(static_cast<size_t>(groups) * 4);
    auto arena = DeviceArena::create(plan.total());
    EXPECT_TRUE(arena);
    if (!arena) return out;
    CudaStream stream = CudaStream::create();
    const GemvWeight w = upload_gemv_weight(*packed, *arena);
    void* d_x = arena->alloc(static_cast<size_t>(x_count) * 4);
    if (c.x_f32) {
        DSV4_CHECK_CUDA(cudaMemcpy(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    } else {
        DSV4_CHECK_CUDA(cudaMemcpy(d_x, x_bf.data(), x_bf.size() * 2, cudaMemcpyHostToDevice));
    }
    void* d_y = arena->alloc(static_cast<size_t>(y_count) * 4);
    const GemvWorkspace ws = GemvWorkspace::create(*arena, groups * packed->shape.row_blocks(),
                                                   dev->sm_count, stream.get());
    int32_t* d_ids = nullptr;
    if (!c.ids.empty()) {
        d_ids = arena->alloc_array<int32_t>(c.ids.size());
        DSV4_CHECK_CUDA(cudaMemcpy(d_ids, c.ids.data(), c.ids.size() * 4, cudaMemcpyHostToDevice));
    }
    int32_t* d_live = nullptr;
    if (c.live_groups > 0) {
        d_live = arena->alloc_array<int32_t>(1);
        DSV4_CHECK_CUDA(cudaMemcpy(d_live, &c.live_groups, 4, cudaMemcpyHostToDevice));
    }
    float* d_group_scale = nullptr;
    if (c.sum_groups) {
        d_group_scale = arena->alloc_array<float>(static_cast<size_t>(groups));
        DSV4_CHECK_CUDA(cudaMemcpy(d_group_scale, group_scale.data(), group_scale.size() * 4,
                                   cudaMemcpyHostToDevice));
    }
    arena->freeze();

    const DType xt = c.x_f32 ? DType::kF32 : DType::kBF16;
    const DType yt = c.y_bf16 ? DType::kBF16 : DType::kF32;
    const TensorView xv =
        c.shared_x ? TensorView(d_x, xt, {c.m, c.k}) : TensorView(d_x, xt, {groups, c.m, c.k});
    const TensorView yv =
        c.sum_groups ? TensorView(d_y, yt, {c.m, c.n}) : TensorView(d_y, yt, {groups, c.m, c.n});
    GemvOptions opt;
    opt.expert_ids = d_ids;
    opt.pdl = c.pdl;
    opt.ids_ready = c.ids_ready;
    opt.launch.min_tiles_per_warp = c.min_tiles_per_warp;
    opt.launch.ctas_per_sm = c.ctas_per_sm;
    opt.launch.depth = c.depth;
    opt.accumulate = c.accumulate;
    opt.sum_groups = c.sum_groups;
    opt.group_scale = d_group_scale;
    opt.zero = c.zero;
    opt.n_groups_dev = d_live;

    // CPU reference per group (summed with the group scales for sum_groups), plus y_init.
    const size_t ysize = static_cast<size_t>(y_count);
    std::vector<double> ref(y_init.begin(), y_init.end()), abs_sum(ysize);
    for (int g = 0; g < groups; ++g) {
        const int e = c.ids.empty() ? g : c.ids[static_cast<size_t>(g)];
        const float* xg = x.data() + (c.shared_x ? 0 : g * c.m * c.k);
        std::vector<double> yr(static_cast<size_t>(c.m * c.n)), ar(yr.size());
        for (int p = 0; p < c.parts; ++p) {
            std::vector<double> yp(static_cast<size_t>(c.m * part_rows)), ap(yp.size());
            test::reference_gemv(owned[static_cast<size_t>(e * c.parts + p)].w, xg, c.m, yp.data(),
                                 ap.data());
            for (int t = 0; t < c.m; ++t)
                for (int64_t r = 0; r < part_rows; ++r) {
                    yr[static_cast<size_t>(t * c.n + p * part_rows + r)] =
                        yp[static_cast<size_t>(t * part_rows + r)];
                    ar[static_cast<size_t>(t * c.n + p * part_rows + r)] =
                        ap[static_cast<size_t>(t * part_rows + r)];
                }
        }
        const size_t at = c.sum_groups ? 0 : static_cast<size_t>(g) * c.m * c.n;
        const double gs = group_scale[static_cast<size_t>(g)];
        for (size_t i = 0; i < yr.size(); ++i) {
            ref[at + i] += gs * yr[i];
            abs_sum[at + i] += gs * ar[i];
        }
    }

    std::vector<uint8_t> first;
    for (int rep = 0; rep < repeats; ++rep) {
        if (c.accumulate && !c.zero) {
            DSV4_CHECK_CUDA(cudaMemcpyAsync(d_y, y_init.data(), ysize * 4, cudaMemcpyHostToDevice,
                                            stream.get()));
        } else {
            // Poison: NaN everywhere, so an unwritten output fails.
            DSV4_CHECK_CUDA(cudaMemsetAsync(d_y, 0xff, ysize * (c.y_bf16 ? 2 : 4), stream.get()));
        }
        gemv(w, xv, yv, groups, ws, opt, stream.get());
        stream.synchronize();
        std::vector<uint8_t> raw(ysize * (c.y_bf16 ? 2 : 4));
        DSV4_CHECK_CUDA(cudaMemcpy(raw.data(), d_y, raw.size(), cudaMemcpyDeviceToHost));
        if (rep == 0) {
            first = raw;
        } else if (c.min_tiles_per_warp == 0 && !c.sum_groups &&
                   groups * packed->shape.row_blocks() / 4 * packed->shape.k_tiles() <= 2) {
            // At most two units (the default per warp): one warp, no split quad, so the result
            // is bitwise stable. Split quads add in a varying order (docs/numerics-cuda.md).
            EXPECT_EQ(raw, first) << "unsplit results differ between launches";
        }
        double err2 = 0.0, ref2 = 0.0;
        int reported = 0;
        // Outputs of the groups not run (live_groups): the bytes they held before the launch.
        const size_t run_end = c.live_groups > 0 && !c.sum_groups
                                   ? static_cast<size_t>(c.live_groups) * c.m * c.n
                                   : ysize;
        for (size_t i = run_end; i < ysize; ++i) {
            const size_t b = c.y_bf16 ? 2 : 4;
            uint8_t want[4];
            if (c.accumulate && !c.zero)
                std::memcpy(want, &y_init[i], 4);
            else
                std::memset(want, 0xff, 4);
            if (std::memcmp(raw.data() + b * i, want, b) != 0 && reported++ < 5)
                ADD_FAILURE() << "output " << i << " of a group not run was written";
        }
        for (size_t i = 0; i < run_end; ++i) {
            float v;
            if (c.y_bf16) {
                uint16_t b;
                std::memcpy(&b, raw.data() + 2 * i, 2);
                v = bf16_to_f32(b);
            } else {
                std::memcpy(&v, raw.data() + 4 * i, 4);
            }
            const double err = std::fabs(static_cast<double>(v) - ref[i]);
            const double tol = tolerance(c, abs_sum[i], ref[i]);
            const double ratio = std::isfinite(v) ? err / tol : 1e30;
            out.worst_ratio = std::max(out.worst_ratio, ratio);
            err2 += err * err;
            ref2 += ref[i] * ref[i];
            if (ratio > 1.0 && reported++ < 5)
                ADD_FAILURE() << "output " << i << ": got " << v << ", want " << ref[i]
                              << " (tolerance " << tol << ")";
        }
        out.max_rel_l2 = std::max(out.max_rel_l2, std::sqrt(err2 / std::max(ref2, 1e-300)));
    }
    std::printf("[ gemv ] %-90s worst err/tol %.3g  rel-L2 %.3g\n", describe(c).c_str(),
                out.worst_ratio, out.max_rel_l2);
    return out;
}

const TestFormat kAllFormats[] = {TestFormat::kNvfp4, TestFormat::kMxfp4, TestFormat::kFp8E8m0,
                                  TestFormat::kFp8F32, TestFormat::kBf16};

int64_t small_k(TestFormat f) {
    return f == TestFormat::kMxfp4 ? 96 : 48;
}

TEST(GemvGpu, OddShapesEveryVariant) {
    DSV4_REQUIRE_GPU();
    uint32_t seed = 1000;
    for (TestFormat f : kAllFormats) {
        for (int m : {1, 2, 3, 8, 9, 16}) {
            for (int variant = 0; variant < 4; ++variant) {
                Case c;
                c.format = f;
                c.n = 17;
                c.k = small_k(f);
                c.m = m;
                c.x_f32 = variant & 1;
                c.y_bf16 = variant & 2;
                run_case(c, seed++, 2);
            }
        }
    }
}

TEST(GemvGpu, SplitQuadsRepeatWithinTolerance) {
    DSV4_REQUIRE_GPU();
    uint32_t seed = 2000;
    for (TestFormat f : kAllFormats) {
        for (int m : {1, 5, 12}) {
            Case c;
            c.format = f;
            c.n = 100;
            c.k = 2048;
            c.m = m;
            c.min_tiles_per_warp = 1;  // one unit per warp: many warps per quad
            c.x_f32 = m == 5;
            run_case(c, seed++, 3);
        }
    }
}

TEST(GemvGpu, GroupedExpertsWithDeviceIds) {
    DSV4_REQUIRE_GPU();
    uint32_t seed = 3000;
    for (TestFormat f : {TestFormat::kNvfp4, TestFormat::kMxfp4, TestFormat::kFp8E8m0}) {
        for (int m : {1, 4}) {
            Case c;  // w1 + w3 of 7 selected experts out of 9, one shared input
            c.format = f;
            c.n = 2 * 128;
            c.k = 512;
            c.m = m;
            c.n_experts = 9;
            c.parts = 2;
            c.ids = {8, 2, 5, 0, 7, 3, 1};
            c.pdl = true;
            run_case(c, seed++, 2);
            Case d = c;  // w2: per-group inputs
            d.n = 512;
            d.k = 128;
            d.parts = 1;
            d.shared_x = false;
            run_case(d, seed++, 2);
        }
    }
}

// Groups counted on the device (the MoE's decode groups, GemvArgs::n_groups_dev): the groups
// run give the reference, the others are neither read nor written; every format, plain and
// accumulating into a cleared y, groups of 4 rows with repeated experts, the default grid and
// one CTA an SM, and every group live.
TEST(GemvGpu, GroupsCountedOnTheDevice) {
    DSV4_REQUIRE_GPU();
    uint32_t seed = 3100;
    for (TestFormat f : {TestFormat::kNvfp4, TestFormat::kMxfp4, TestFormat::kFp8E8m0}) {
        for (int live : {1, 6, 11}) {
            for (int ctas : {0, 1}) {
                Case c;
                c.format = f;
                c.n = 2 * 128;
                c.k = 512;
                c.m = 4;
                c.n_experts = 9;
                c.parts = 2;
                c.ids = {0, 2, 2, 5, 7, 8, 8, 8, 3, 1, 4};
                c.x_f32 = true;
                c.shared_x = false;
                c.live_groups = live;
                c.ctas_per_sm = ctas;
                run_case(c, seed++, 1);
                Case d = c;  // accumulating into a cleared y, as the MoE's w1|w3 and w2 do
                d.accumulate = true;
                d.zero = true;
                run_case(d, seed++, 1);
            }
        }
    }
}

TEST(GemvGpu, FlashShapes) {
    DSV4_REQUIRE_GPU();
    uint32_t seed = 4000;
    struct Shape {
        const char* name;
        int64_t n, k;
        int experts, parts;
        bool grouped_x;
    };
    const Shape shapes[] = {
        {"expert w1+w3 (2 of 7)", 4096, 4096, 2, 2, false},
        {"expert w2 (2 of 7)", 4096, 2048, 2, 1, true},
        {"wq_a", 1024, 4096, 1, 1, false},
        {"wkv", 512, 4096, 1, 1, false},
        {"wq_b", 32768, 1024, 1, 1, false},
        {"indexer wq_b", 8192, 1024, 1, 1, false},
        {"wo_b", 4096, 8192, 1, 1, false},
        {"wo_a (2 of 8 groups)", 1024, 4096, 2, 1, true},
    };
    for (const Shape& s : shapes) {
        for (TestFormat f : {TestFormat::kNvfp4, TestFormat::kFp8E8m0}) {
            for (int m : {1, 8}) {
                Case c;
                c.format = f;
                c.n = s.n;
                c.k = s.k;
                c.m = m;
                c.n_experts = s.experts;
                c.parts = s.parts;
                c.shared_x = !s.grouped_x;
                c.y_bf16 = m == 8;
                std::printf("[ gemv ] %s\n", s.name);
                run_case(c, seed++);
            }
        }
    }
}

TEST(GemvGpu, MxfpAndBf16FlashShapes) {
    DSV4_REQUIRE_GPU();
    uint32_t seed = 5000;
    Case c;  // routed experts are MXFP4 in the release checkpoint
    c.format = TestFormat::kMxfp4;
    c.n = 4096;
    c.k = 4096;
    c.n_experts = 2;
    c.parts = 2;
    c.m = 1;
    run_case(c, seed++);
    Case b;  // bf16 compressor-sized matrix, f32 activations
    b.format = TestFormat::kBf16;
    b.n = 1024;
    b.k = 4096;
    b.m = 3;
    b.x_f32 = true;
    run_case(b, seed++);
}

TEST(GemvGpu, EveryGridAndDepth) {
    DSV4_REQUIRE_GPU();
    uint32_t seed = 7000;
    // Grids of 1..4 CTAs per SM and both pipeline depths, on a split and an unsplit shape,
    // plain and grouped with the expert ids read before the PDL wait.
    for (int ctas = 1; ctas <= 4; ++ctas) {
        for (int depth : {2, 4}) {
            Case c;
            c.format = TestFormat::kNvfp4;  // depth 4 exists for NVFP4, bf16 x, f32 y, m <= 8
            c.n = 300;
            c.k = 1024;
            c.m = ctas;
            c.depth = depth;
            c.ctas_per_sm = ctas;
            c.min_tiles_per_warp = ctas;
            c.pdl = true;
            run_case(c, seed++, 2);
            Case g = c;
            g.format = depth == 2 ? TestFormat::kMxfp4 : TestFormat::kNvfp4;
            g.n = 128;
            g.k = 256;
            g.n_experts = 5;
            g.ids = {4, 1, 3};
            g.ids_ready = true;
            g.shared_x = false;
            g.min_tiles_per_warp = 0;
            run_case(g, seed++, 2);
        }
    }
}

TEST(GemvGpu, AccumulateIntoY) {
    DSV4_REQUIRE_GPU();
    uint32_t seed = 9000;
    // y += x W^T on odd shapes, every format, split and unsplit quads.
    for (TestFormat f : kAllFormats) {
        for (int m : {1, 3, 9}) {
            for (int split : {0, 1}) {
                Case c;
                c.format = f;
                c.n = 100;
                c.k = small_k(f) * 8;
                c.m = m;
                c.x_f32 = m == 3;
                c.min_tiles_per_warp = split;
                c.accumulate = true;
                run_case(c, seed++, 2);
            }
        }
    }
    // The MoE combine: 7 of 9 experts (w2-like, one input each) summed into one y with
    // per-group scales, ids read before the wait; and a V4-Flash w2 shape.
    for (TestFormat f : {TestFormat::kNvfp4, TestFormat::kMxfp4, TestFormat::kFp8E8m0}) {
        Case d;
        d.format = f;
        d.n = 256;
        d.k = 512;
        d.m = 2;
        d.n_experts = 9;
        d.ids = {8, 2, 5, 0, 7, 3, 1};
        d.shared_x = false;
        d.pdl = true;
        d.ids_ready = true;
        d.accumulate = true;
        d.sum_groups = true;
        run_case(d, seed++, 2);
    }
    Case w2;
    w2.format = TestFormat::kNvfp4;
    w2.n = 4096;
    w2.k = 2048;
    w2.n_experts = 2;
    w2.shared_x = false;
    w2.accumulate = true;
    w2.sum_groups = true;
    run_case(w2, seed++);
}

// Accumulate mode into a y the launch clears itself (y_zero): y starts as NaN, so an output
// added to before it was cleared, or never cleared, fails. Odd shapes, every format, split and
// unsplit quads, groups with their own outputs and summed into one; two launches each, so the
// second also checks that the first left the workspace's counters at zero.
TEST(GemvGpu, AccumulateIntoClearedY) {
    DSV4_REQUIRE_GPU();
    uint32_t seed = 9500;
    for (TestFormat f : kAllFormats) {
        for (int m : {1, 5, 11}) {
            for (int split : {0, 1}) {
                Case c;
                c.format = f;
                c.n = 176;
                c.k = small_k(f) * 7;
                c.m = m;
                c.x_f32 = m == 5;
                c.min_tiles_per_warp = split;
                c.pdl = split == 1;
                c.accumulate = true;
                c.zero = true;
                run_case(c, seed++, 2);
            }
        }
    }
    // Selected experts (ids read after the wait, or before it), the MoE's w1|w3 (one shared x)
    // and w2 (an x per group; its own outputs or summed).
    for (int variant = 0; variant < 6; ++variant) {
        Case d;
        d.format = variant < 3 ? TestFormat::kNvfp4 : TestFormat::kMxfp4;
        d.n = variant % 3 == 0 ? 128 : 192;
        d.k = variant % 3 == 0 ? 128 : 512;
        d.m = variant % 3 == 2 ? 3 : 1;
        d.n_experts = 9;
        d.ids = {8, 2, 5, 0, 7, 3, 1};
        d.shared_x = variant % 3 == 0;
        d.pdl = true;
        d.ids_ready = variant % 2 == 1;
        d.accumulate = true;
        d.sum_groups = variant == 2 || variant == 5;
        d.zero = true;
        run_case(d, seed++, 2);
    }
    // A V4-Flash wq_b shape at one token: many warps, each clearing a share of 32768 outputs.
    Case q;
    q.format = TestFormat::kNvfp4;
    q.n = 32768;
    q.k = 1024;
    q.x_f32 = true;
    q.pdl = true;
    q.accumulate = true;
    q.zero = true;
    run_case(q, seed++, 3);
}

// A chain of dependent launches with PDL (each GEMV's input is the previous one's output, f32),
// captured in a graph: the weights of launch i + 1 are requested while launch i runs, and the
// result must still be that of the sequential chain. Plain and accumulating (into zeros).
void run_dependent_chain(bool accumulate, bool zero = false) {
    SCOPED_TRACE(zero ? "accumulate into cleared y" : accumulate ? "accumulate" : "plain");
    std::mt19937 rng(8000);
    constexpr int kDim = 512, kLinks = 12;
    // NVFP4 test weights shrink a vector (|w| ~ 0.01), so 12 links stay in range.
    const std::vector<OwnedWeight> owned = random_weights(TestFormat::kNvfp4, 2, kDim, kDim, rng);
    std::vector<GemvPacked> packed;
    for (size_t i = 0; i < owned.size(); ++i) {
        auto p = repack(owned, 1, 1, i);
        ASSERT_TRUE(p);
        packed.push_back(std::move(*p));
    }
    const auto dev = query_device(0);
    ArenaPlan plan;
    for (auto& p : packed) plan.add(static_cast<size_t>(p.shape.device_bytes()));
    for (int i = 0; i <= kLinks; ++i) plan.add(kDim * 4);
    plan.add(GemvWorkspace::bytes(kDim / 16));
    auto arena = DeviceArena::create(plan.total());
    ASSERT_TRUE(arena);
    CudaStream stream = CudaStream::create();
    std::vector<GemvWeight> w;
    for (auto& p : packed) w.push_back(upload_gemv_weight(p, *arena));
    std::vector<float*> v;
    for (int i = 0; i <= kLinks; ++i) v.push_back(arena->alloc_array<float>(kDim));
    const GemvWorkspace ws = GemvWorkspace::create(*arena, kDim / 16, dev->sm_count, stream.get());
    std::vector<float> x = test::random_activations(kDim, rng);
    DSV4_CHECK_CUDA(cudaMemcpy(v[0], x.data(), kDim * 4, cudaMemcpyHostToDevice));
    for (int i = 1; i <= kLinks; ++i)
        DSV4_CHECK_CUDA(cudaMemset(v[i], accumulate && !zero ? 0 : 0xff, kDim * 4));
    GemvOptions opt;
    opt.pdl = true;
    opt.accumulate = accumulate;
    opt.zero = zero;
    opt.launch.min_tiles_per_warp = 1;
    CudaGraph::begin_capture(stream.get());
    for (int i = 0; i < kLinks; ++i) {
        gemv(w[i % 2], TensorView(v[i], DType::kF32, {1, kDim}),
             TensorView(v[i + 1], DType::kF32, {1, kDim}), 1, ws, opt, stream.get());
    }
    CudaGraph graph;
    ASSERT_EQ(CudaGraph::end_capture(stream.get(), &graph), cudaSuccess);
    graph.launch(stream.get());
    stream.synchronize();
    // Each link against the CPU reference on the GPU's own input for it, so the bound does not
    // compound.
    std::vector<float> in(kDim), out(kDim);
    DSV4_CHECK_CUDA(cudaMemcpy(in.data(), v[0], kDim * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < kLinks; ++i) {
        DSV4_CHECK_CUDA(cudaMemcpy(out.data(), v[i + 1], kDim * 4, cudaMemcpyDeviceToHost));
        std::vector<double> ref(kDim), abs_sum(kDim);
        test::reference_gemv(owned[static_cast<size_t>(i % 2)].w, in.data(), 1, ref.data(),
                             abs_sum.data());
        for (int r = 0; r < kDim; ++r) {
            // f32 activations: the hi/lo split carries ~2^-16 of x (docs/numerics-cuda.md).
            const double tol = (2e-5 + std::ldexp(1.0, -16)) * abs_sum[static_cast<size_t>(r)];
            ASSERT_NEAR(out[static_cast<size_t>(r)], ref[static_cast<size_t>(r)], tol)
                << "link " << i << " output " << r;
        }
        in = out;
    }
}

TEST(GemvGpu, DependentChainWithPdl) {
    DSV4_REQUIRE_GPU();
    run_dependent_chain(false);
    run_dependent_chain(true);
    run_dependent_chain(true, /*zero=*/true);
}

// The MoE step as a decode step runs it, for several tokens in one captured graph: each token's
// expert ids are copied into one shared ids buffer, then w1|w3 of the selected experts (ids read
// after its PDL wait) accumulates into zeros, then w2 (ids read *before* its wait: ids_ready)
// adds every expert's output times its router weight into one y (the combine), reading w1|w3's
// f32 output as its per-group input. Every token must see its own ids and inputs: a launch that
// read the ids or activations too early would mix tokens.
TEST(GemvGpu, MoeStepChainWithPdl) {
    DSV4_REQUIRE_GPU();
    std::mt19937 rng(9000);
    constexpr int kExperts = 6, kGroups = 3, kTokens = 4;
    constexpr int64_t kHidden = 256, kPart = 64, kInter = 2 * kPart;  // w1 | w3 rows
    const int ids[kTokens][kGroups] = {{5, 0, 3}, {1, 4, 2}, {0, 5, 1}, {3, 2, 4}};
    const std::vector<OwnedWeight> o13 =
        random_weights(TestFormat::kNvfp4, kExperts * 2, kPart, kHidden, rng);
    const std::vector<OwnedWeight> o2 =
        random_weights(TestFormat::kNvfp4, kExperts, kHidden, kInter, rng);
    auto packed13 = repack(o13, kExperts, 2);
    auto packed2 = repack(o2, kExperts, 1);
    ASSERT_TRUE(packed13 && packed2);

    std::vector<float> x = test::from_bf16(test::to_bf16(test::random_activations(kHidden, rng)));
    const std::vector<uint16_t> x_bf = test::to_bf16(x);
    const std::vector<float> scales = router_weights(kTokens * kGroups, rng);

    const auto dev = query_device(0);
    ArenaPlan plan;
    plan.add(static_cast<size_t>(packed13->shape.device_bytes()));
    plan.add(static_cast<size_t>(packed2->shape.device_bytes()));
    plan.add(kHidden * 2);
    plan.add(kTokens * kGroups * 4);  // every token's ids
    plan.add(kGroups * 4);            // the shared ids buffer
    plan.add(kTokens * kGroups * 4);  // router weights
    plan.add(static_cast<size_t>(kTokens) * kGroups * kInter * 4);
    plan.add(static_cast<size_t>(kTokens) * kHidden * 4);
    plan.add(GemvWorkspace::bytes(kGroups * packed2->shape.row_blocks()));
    auto arena = DeviceArena::create(plan.total());
    ASSERT_TRUE(arena);
    CudaStream stream = CudaStream::create();
    const GemvWeight w13 = upload_gemv_weight(*packed13, *arena);
    const GemvWeight w2 = upload_gemv_weight(*packed2, *arena);
    auto* d_x = arena->alloc_array<uint16_t>(kHidden);
    auto* d_ids_all = arena->alloc_array<int32_t>(kTokens * kGroups);
    auto* d_ids = arena->alloc_array<int32_t>(kGroups);
    auto* d_scales = arena->alloc_array<float>(kTokens * kGroups);
    auto* d_h = arena->alloc_array<float>(static_cast<size_t>(kTokens) * kGroups * kInter);
    auto* d_y = arena->alloc_array<float>(static_cast<size_t>(kTokens) * kHidden);
    const GemvWorkspace ws = GemvWorkspace::create(*arena, kGroups * packed2->shape.row_blocks(),
                                                   dev->sm_count, stream.get());
    arena->freeze();
    DSV4_CHECK_CUDA(cudaMemcpy(d_x, x_bf.data(), kHidden * 2, cudaMemcpyHostToDevice));
    DSV4_CHECK_CUDA(cudaMemcpy(d_ids_all, ids, sizeof(ids), cudaMemcpyHostToDevice));
    DSV4_CHECK_CUDA(cudaMemcpy(d_scales, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
    DSV4_CHECK_CUDA(cudaMemset(d_h, 0, static_cast<size_t>(kTokens) * kGroups * kInter * 4));
    DSV4_CHECK_CUDA(cudaMemset(d_y, 0, static_cast<size_t>(kTokens) * kHidden * 4));

    GemvOptions o13opt;
    o13opt.expert_ids = d_ids;
    o13opt.pdl = true;
    o13opt.accumulate = true;
    GemvOptions o2opt = o13opt;
    o2opt.ids_ready = true;
    o2opt.sum_groups = true;
    CudaGraph::begin_capture(stream.get());
    for (int t = 0; t < kTokens; ++t) {
        DSV4_CHECK_CUDA(cudaMemcpyAsync(d_ids, d_ids_all + t * kGroups, kGroups * 4,
                                        cudaMemcpyDeviceToDevice, stream.get()));
        float* h = d_h + static_cast<int64_t>(t) * kGroups * kInter;
        gemv(w13, TensorView(d_x, DType::kBF16, {1, kHidden}),
             TensorView(h, DType::kF32, {kGroups, 1, kInter}), kGroups, ws, o13opt, stream.get());
        o2opt.group_scale = d_scales + t * kGroups;
        gemv(w2, TensorView(h, DType::kF32, {kGroups, 1, kInter}),
             TensorView(d_y + t * kHidden, DType::kF32, {1, kHidden}), kGroups, ws, o2opt,
             stream.get());
    }
    CudaGraph graph;
    ASSERT_EQ(CudaGraph::end_capture(stream.get(), &graph), cudaSuccess);
    graph.launch(stream.get());
    stream.synchronize();

    std::vector<float> h(static_cast<size_t>(kTokens) * kGroups * kInter);
    std::vector<float> y(static_cast<size_t>(kTokens) * kHidden);
    DSV4_CHECK_CUDA(cudaMemcpy(h.data(), d_h, h.size() * 4, cudaMemcpyDeviceToHost));
    DSV4_CHECK_CUDA(cudaMemcpy(y.data(), d_y, y.size() * 4, cudaMemcpyDeviceToHost));
    Case c13;  // tolerances: bf16 input, accumulated into zeros
    c13.accumulate = true;
    Case c2 = c13;  // f32 input (w1|w3's output)
    c2.x_f32 = true;
    for (int t = 0; t < kTokens; ++t) {
        SCOPED_TRACE(testing::Message() << "token " << t);
        // w1|w3 of each selected expert against the reference.
        for (int g = 0; g < kGroups; ++g) {
            for (int part = 0; part < 2; ++part) {
                std::vector<double> ref(kPart), abs_sum(kPart);
                test::reference_gemv(o13[static_cast<size_t>(ids[t][g] * 2 + part)].w, x.data(), 1,
                                     ref.data(), abs_sum.data());
                for (int64_t r = 0; r < kPart; ++r) {
                    const float v =
                        h[static_cast<size_t>((t * kGroups + g) * kInter + part * kPart + r)];
                    ASSERT_NEAR(v, ref[static_cast<size_t>(r)],
                                tolerance(c13, abs_sum[static_cast<size_t>(r)],
                                          ref[static_cast<size_t>(r)]))
                        << "group " << g << " part " << part << " row " << r;
                }
            }
        }
        // w2 and the combine, on the GPU's own w1|w3 output (the bound does not compound).
        std::vector<double> ref(kHidden, 0.0), abs_sum(kHidden, 0.0);
        for (int g = 0; g < kGroups; ++g) {
            std::vector<double> yg(kHidden), ag(kHidden);
            test::reference_gemv(o2[static_cast<size_t>(ids[t][g])].w,
                                 h.data() + (t * kGroups + g) * kInter, 1, yg.data(), ag.data());
            const double s = scales[static_cast<size_t>(t * kGroups + g)];
            for (int64_t r = 0; r < kHidden; ++r) {
                ref[static_cast<size_t>(r)] += s * yg[static_cast<size_t>(r)];
                abs_sum[static_cast<size_t>(r)] += s * ag[static_cast<size_t>(r)];
            }
        }
        for (int64_t r = 0; r < kHidden; ++r) {
            ASSERT_NEAR(y[static_cast<size_t>(t * kHidden + r)], ref[static_cast<size_t>(r)],
                        tolerance(c2, abs_sum[static_cast<size_t>(r)], ref[static_cast<size_t>(r)]))
                << "output " << r;
        }
    }
}

// The SwiGLU chain (gemv_chain.h, kSwiglu): w1|w3, the clipped SwiGLU and w2 in one launch, for
// several tokens in one captured graph under PDL, each token with its own expert ids (copied
// into one shared ids buffer) and router weights, so the per-group counts must return to zero
// after every launch. w1|w3's output h is checked against the reference, and the output against
// w2 of the SwiGLU of the GPU's own h (the bound does not compound). Shapes: 2I a multiple of
// 64; I = 80 (k-tiles past I zero-padded, h rows not on 64-row quads); and a grid of one SM and
// one CTA (4 warps), so a warp's w2 segment spans more k-tiles than its SwiGLU buffer holds.
TEST(GemvGpu, SwigluChainMatchesTheReference) {
    DSV4_REQUIRE_GPU();
    struct ChainCase {
        TestFormat format;
        int64_t hidden, inter;
        int experts, groups;
        float limit;
        int depth;
        bool one_cta;
    };
    const ChainCase cases[] = {
        {TestFormat::kNvfp4, 256, 64, 6, 3, 0.0f, 2, false},
        {TestFormat::kMxfp4, 256, 64, 6, 3, 0.0f, 2, false},
        {TestFormat::kNvfp4, 192, 80, 9, 7, 0.25f, 2, false},
        {TestFormat::kMxfp4, 192, 80, 9, 7, 0.25f, 4, false},
        {TestFormat::kNvfp4, 128, 640, 3, 2, 0.5f, 2, true},
        {TestFormat::kNvfp4, 128, 640, 3, 2, 0.5f, 4, true},
    };
    constexpr int kTokens = 3;
    uint32_t seed = 9100;
    for (const ChainCase& cc : cases) {
        SCOPED_TRACE(testing::Message()
                     << test::test_format_name(cc.format) << " D=" << cc.hidden << " I=" << cc.inter
                     << " groups=" << cc.groups << " L=" << cc.limit << " depth=" << cc.depth
                     << (cc.one_cta ? " one CTA" : ""));
        std::mt19937 rng(seed++);
        const int64_t D = cc.hidden, I = cc.inter, G = cc.groups;
        const std::vector<OwnedWeight> o13 = random_weights(cc.format, cc.experts * 2, I, D, rng);
        const std::vector<OwnedWeight> o2 = random_weights(cc.format, cc.experts, D, I, rng);
        auto packed13 = repack(o13, cc.experts, 2);
        auto packed2 = repack(o2, cc.experts, 1);
        ASSERT_TRUE(packed13 && packed2);
        std::vector<int32_t> ids(kTokens * G);
        for (int t = 0; t < kTokens; ++t) {
            std::vector<int32_t> order(static_cast<size_t>(cc.experts));
            for (int e = 0; e < cc.experts; ++e) order[static_cast<size_t>(e)] = e;
            std::shuffle(order.begin(), order.end(), rng);
            for (int g = 0; g < G; ++g) ids[static_cast<size_t>(t * G + g)] = order[g];
        }
        const std::vector<float> x = test::random_activations(kTokens * D, rng);
        const std::vector<float> scales = router_weights(kTokens * G, rng);

        const auto dev = query_device(0);
        ArenaPlan plan;
        plan.add(static_cast<size_t>(packed13->shape.device_bytes()));
        plan.add(static_cast<size_t>(packed2->shape.device_bytes()));
        plan.add(static_cast<size_t>(kTokens * D) * 4);
        plan.add(static_cast<size_t>(kTokens * G) * 4);  // every token's ids
        plan.add(static_cast<size_t>(G) * 4);            // the shared ids buffer
        plan.add(static_cast<size_t>(kTokens * G) * 4);  // router weights
        plan.add(static_cast<size_t>(kTokens * G * 2 * I) * 4);
        plan.add(static_cast<size_t>(kTokens * D) * 4);
        // (Row blocks of both GEMVs: w2's D rows may outnumber w1|w3's 2 I.)
        const int64_t ws_blocks =
            G * std::max(packed13->shape.row_blocks(), packed2->shape.row_blocks());
        plan.add(GemvWorkspace::bytes(ws_blocks));
        plan.add(gemv_chain_workspace_bytes(G));
        auto arena = DeviceArena::create(plan.total());
        ASSERT_TRUE(arena);
        CudaStream stream = CudaStream::create();
        const GemvWeight w13 = upload_gemv_weight(*packed13, *arena);
        const GemvWeight w2 = upload_gemv_weight(*packed2, *arena);
        auto* d_x = arena->alloc_array<float>(static_cast<size_t>(kTokens * D));
        auto* d_ids_all = arena->alloc_array<int32_t>(ids.size());
        auto* d_ids = arena->alloc_array<int32_t>(static_cast<size_t>(G));
        auto* d_scales = arena->alloc_array<float>(scales.size());
        auto* d_h = arena->alloc_array<float>(static_cast<size_t>(kTokens * G * 2 * I));
        auto* d_y = arena->alloc_array<float>(static_cast<size_t>(kTokens * D));
        const GemvWorkspace ws =
            GemvWorkspace::create(*arena, ws_blocks, dev->sm_count, stream.get());
        auto* d_ready = arena->alloc_array<uint32_t>(gemv_chain_workspace_bytes(G) / 4);
        arena->freeze();
        DSV4_CHECK_CUDA(cudaMemcpy(d_x, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
        DSV4_CHECK_CUDA(cudaMemcpy(d_ids_all, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
        DSV4_CHECK_CUDA(
            cudaMemcpy(d_scales, scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
        DSV4_CHECK_CUDA(cudaMemset(d_h, 0, static_cast<size_t>(kTokens * G * 2 * I) * 4));
        DSV4_CHECK_CUDA(cudaMemset(d_y, 0, static_cast<size_t>(kTokens * D) * 4));
        DSV4_CHECK_CUDA(cudaMemset(d_ready, 0, gemv_chain_workspace_bytes(G)));

        GemvOptions opt;
        opt.expert_ids = d_ids;
        opt.pdl = true;
        opt.accumulate = true;
        GemvLaunchConfig cfg{dev->sm_count, 0, 0, cc.depth};
        if (cc.one_cta) cfg = {1, 1, 0, cc.depth};
        CudaGraph::begin_capture(stream.get());
        for (int t = 0; t < kTokens; ++t) {
            DSV4_CHECK_CUDA(cudaMemcpyAsync(d_ids, d_ids_all + t * G, G * 4,
                                            cudaMemcpyDeviceToDevice, stream.get()));
            float* h = d_h + t * G * 2 * I;
            GemvChainArgs c;
            c.link = GemvChainLink::kSwiglu;
            c.first =
                gemv_args(w13, TensorView(d_x + t * D, DType::kF32, {1, D}),
                          TensorView(h, DType::kF32, {G, 1, 2 * I}), static_cast<int>(G), ws, opt);
            GemvOptions opt2 = opt;
            opt2.sum_groups = true;
            opt2.group_scale = d_scales + t * G;
            // (x's view only sizes the arguments: the chain reads h's [gate | up] rows.)
            c.second = gemv_args(w2, TensorView(h, DType::kF32, {G, 1, I}),
                                 TensorView(d_y + t * D, DType::kF32, {1, D}), static_cast<int>(G),
                                 ws, opt2);
            c.second.ldx = 2 * I;
            c.second.x_group_stride = 2 * I;
            c.limit = cc.limit;
            c.ready = d_ready;
            ASSERT_TRUE(gemv_chain_supports(c));
            ASSERT_EQ(gemv_chain_counts(c), G);
            launch_gemv_chain(c, cfg, stream.get());
        }
        CudaGraph graph;
        ASSERT_EQ(CudaGraph::end_capture(stream.get(), &graph), cudaSuccess);
        graph.launch(stream.get());
        stream.synchronize();

        std::vector<float> h(static_cast<size_t>(kTokens * G * 2 * I));
        std::vector<float> y(static_cast<size_t>(kTokens * D));
        std::vector<uint32_t> ready(gemv_chain_workspace_bytes(G) / 4);
        DSV4_CHECK_CUDA(cudaMemcpy(h.data(), d_h, h.size() * 4, cudaMemcpyDeviceToHost));
        DSV4_CHECK_CUDA(cudaMemcpy(y.data(), d_y, y.size() * 4, cudaMemcpyDeviceToHost));
        DSV4_CHECK_CUDA(
            cudaMemcpy(ready.data(), d_ready, ready.size() * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < ready.size(); ++i) EXPECT_EQ(ready[i], 0u) << "count " << i;
        Case c13;  // tolerances: f32 input, accumulated into zeros
        c13.x_f32 = true;
        c13.accumulate = true;
        for (int t = 0; t < kTokens; ++t) {
            SCOPED_TRACE(testing::Message() << "token " << t);
            for (int g = 0; g < G; ++g) {
                const int e = ids[static_cast<size_t>(t * G + g)];
                for (int part = 0; part < 2; ++part) {
                    std::vector<double> ref(static_cast<size_t>(I)),
                        abs_sum(static_cast<size_t>(I));
                    test::reference_gemv(o13[static_cast<size_t>(e * 2 + part)].w, x.data() + t * D,
                                         1, ref.data(), abs_sum.data());
                    for (int64_t r = 0; r < I; ++r) {
                        const float v = h[static_cast<size_t>((t * G + g) * 2 * I + part * I + r)];
                        ASSERT_NEAR(v, ref[static_cast<size_t>(r)],
                                    tolerance(c13, abs_sum[static_cast<size_t>(r)],
                                              ref[static_cast<size_t>(r)]))
                            << "group " << g << " part " << part << " row " << r;
                    }
                }
            }
            std::vector<double> ref(static_cast<size_t>(D), 0.0),
                abs_sum(static_cast<size_t>(D), 0.0);
            for (int g = 0; g < G; ++g) {
                // The SwiGLU as cpu_ref::swiglu computes it, on the GPU's h.
                const float* hg = h.data() + (t * G + g) * 2 * I;
                std::vector<float> act(static_cast<size_t>(I));
                for (int64_t i = 0; i < I; ++i) {
                    float gt = hg[i], up = hg[I + i];
                    if (cc.limit > 0) {
                        gt = std::min(gt, cc.limit);
                        up = std::min(std::max(up, -cc.limit), cc.limit);
                    }
                    act[static_cast<size_t>(i)] = gt * (1.0f / (1.0f + std::exp(-gt))) * up;
                }
                std::vector<double> yg(static_cast<size_t>(D)), ag(static_cast<size_t>(D));
                test::reference_gemv(o2[static_cast<size_t>(ids[static_cast<size_t>(t * G + g)])].w,
                                     act.data(), 1, yg.data(), ag.data());
                const double sc = scales[static_cast<size_t>(t * G + g)];
                for (int64_t r = 0; r < D; ++r) {
                    ref[static_cast<size_t>(r)] += sc * yg[static_cast<size_t>(r)];
                    abs_sum[static_cast<size_t>(r)] += sc * ag[static_cast<size_t>(r)];
                }
            }
            for (int64_t r = 0; r < D; ++r) {
                ASSERT_NEAR(
                    y[static_cast<size_t>(t * D + r)], ref[static_cast<size_t>(r)],
                    tolerance(c13, abs_sum[static_cast<size_t>(r)], ref[static_cast<size_t>(r)]))
                    << "output " << r;
            }
        }
    }
}

TEST(GemvGpu, CapturedInAGraph) {
    DSV4_REQUIRE_GPU();
    std::mt19937 rng(6000);
    OwnedWeight o = test::random_weight(TestFormat::kNvfp4, 256, 1024, rng);
    const QuantWeight* parts[] = {&o.w};
    auto packed = gemv_repack(parts, 1, 1);
    ASSERT_TRUE(packed);
    const auto dev = query_device(0);
    ArenaPlan plan;
    plan.add(static_cast<size_t>(packed->shape.device_bytes()));
    plan.add(1024 * 2);
    plan.add(256 * 4 * 2);
    plan.add(GemvWorkspace::bytes(packed->shape.row_blocks()));
    auto arena = DeviceArena::create(plan.total());
    ASSERT_TRUE(arena);
    CudaStream stream = CudaStream::create();
    const GemvWeight w = upload_gemv_weight(*packed, *arena);
    auto* d_x = arena->alloc_array<uint16_t>(1024);
    auto* d_y1 = arena->alloc_array<float>(256);
    auto* d_y2 = arena->alloc_array<float>(256);
    const GemvWorkspace ws =
        GemvWorkspace::create(*arena, packed->shape.row_blocks(), dev->sm_count, stream.get());
    const std::vector<uint16_t> x = test::to_bf16(test::random_activations(1024, rng));
    DSV4_CHECK_CUDA(cudaMemcpy(d_x, x.data(), 2048, cudaMemcpyHostToDevice));
    GemvOptions opt;
    opt.pdl = true;
    opt.launch.min_tiles_per_warp = 1;
    gemv(w, TensorView(d_x, DType::kBF16, {1, 1024}), TensorView(d_y1, DType::kF32, {1, 256}), 1,
         ws, opt, stream.get());
    stream.synchronize();
    DSV4_CHECK_CUDA(cudaMemset(d_y2, 0xff, 1024));
    CudaGraph::begin_capture(stream.get());
    for (int i = 0; i < 3; ++i)
        gemv(w, TensorView(d_x, DType::kBF16, {1, 1024}), TensorView(d_y2, DType::kF32, {1, 256}),
             1, ws, opt, stream.get());
    CudaGraph graph;
    ASSERT_EQ(CudaGraph::end_capture(stream.get(), &graph), cudaSuccess);
    graph.launch(stream.get());
    graph.launch(stream.get());
    stream.synchronize();
    std::vector<float> y1(256), y2(256);
    DSV4_CHECK_CUDA(cudaMemcpy(y1.data(), d_y1, 1024, cudaMemcpyDeviceToHost));
    DSV4_CHECK_CUDA(cudaMemcpy(y2.data(), d_y2, 1024, cudaMemcpyDeviceToHost));
    // Split quads: the same sums up to the order of the FP32 adds, so both results are held to
    // the documented bound relative to A = sum |w x| (docs/numerics-cuda.md), not to |y|: a bound
    // relative to |y| fails on outputs that cancel to near zero when the arrival order changes.
    const std::vector<float> xf = test::from_bf16(x);
    std::vector<double> ref(256), abs_sum(256);
    test::reference_gemv(o.w, xf.data(), 1, ref.data(), abs_sum.data());
    for (int i = 0; i < 256; ++i) {
        EXPECT_NEAR(y1[i], ref[static_cast<size_t>(i)], 2e-5 * abs_sum[static_cast<size_t>(i)])
            << "output " << i;
        EXPECT_NEAR(y2[i], ref[static_cast<size_t>(i)], 2e-5 * abs_sum[static_cast<size_t>(i)])
            << "output " << i;
    }
}

}  // namespace
}  // namespace dsv4::cuda
