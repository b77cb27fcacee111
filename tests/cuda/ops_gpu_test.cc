// The CUDA backend's ops against the CPU reference (cpu_ref) on fresh random inputs: odd sizes,
// steps mixing decode rows and prefill chunks over several cache slots at scattered positions.
// Each test is independent (its own backend). Every comparison prints its worst error over its
// tolerance ("worst err/tol"); discrete outputs (top-k, routing, sampled ids, generator states)
// must match exactly. Tolerances and their reasons: docs/numerics-cuda.md ("Engine ops").
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/moe/moe.h"
#include "backend/cuda/kernels/moe/route.h"
#include "base/fp_codes.h"
#include "cuda_test_util.h"
#include "ops_gpu_util.h"

namespace dsv4 {
namespace {

using namespace ops_gpu_test;  // NOLINT(google-build-using-namespace): the shared helpers

TEST(CudaBackendGpu, MemoryAndCopies) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    const size_t before = be->memory_in_use();
    auto huge = be->try_alloc(be->memory_available() + (size_t{1} << 30));
    ASSERT_FALSE(huge.has_value());
    EXPECT_NE(huge.status().message().find("out of GPU memory"), std::string::npos)
        << huge.status().message();
    std::mt19937 rng(1);
    const auto h = randn(1001, rng);
    {
        Dev<float> a(*be, h), b(*be, h.size()), z(*be, 333);
        EXPECT_GE(be->memory_in_use(), before + 2 * 1001 * 4 + 333 * 4);
        EXPECT_EQ(z.get(), std::vector<float>(333, 0.0f));  // allocations start zeroed
        be->copy(b.p, a.p, h.size() * sizeof(float));
        EXPECT_EQ(b.get(), h);
        be->fill(b.p + 5, -2.5f, 17);
        auto got = b.get();
        for (int i = 0; i < 1001; ++i) EXPECT_EQ(got[i], i >= 5 && i < 22 ? -2.5f : h[i]) << i;
        be->scale(a.p, 0.75f, 1001);
        got = a.get();
        for (int i = 0; i < 1001; ++i) EXPECT_EQ(got[i], h[i] * 0.75f) << i;
    }
    EXPECT_EQ(be->memory_in_use(), before);
}

// A decode batch's pairs gathered by expert (the MoE's decode groups, MoeCompactArgs) against
// a host model: the experts ascending, each expert's pairs in pair order, up to m to a group,
// the groups counted, the later groups naming expert 0. Random selections with repeats, one
// expert for every pair, up to just under ops::moe_grouped_by_expert's threshold.
TEST(CudaOpsGpu, MoeCompactGroupsByExpert) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    cuda::CudaStream s = cuda::CudaStream::create();
    std::mt19937 rng(17);
    for (const auto& [P, E] : std::vector<std::pair<int, int>>{
             {1, 9}, {2, 9}, {7, 9}, {35, 9}, {48, 256}, {192, 256}, {1023, 256}, {3, 1}}) {
        for (int m : {1, 4}) {
            SCOPED_TRACE(std::to_string(P) + " pairs, " + std::to_string(E) + " experts, m " +
                         std::to_string(m));
            std::vector<int32_t> sel(static_cast<size_t>(P));
            std::uniform_int_distribution<int32_t> pick(0, E - 1);
            for (auto& e : sel) e = P == 35 ? 3 : pick(rng);  // (35: all one expert)
            Dev<int32_t> d_sel(*be, sel), d_ge(*be, sel.size()), d_row(*be, sel.size()),
                d_n(*be, 1);
            be->synchronize();
            cuda::launch_moe_compact_groups({d_sel.p, d_ge.p, d_row.p, d_n.p, P, E, m}, s.get());
            s.synchronize();
            ASSERT_EQ(cudaGetLastError(), cudaSuccess);
            // The host model: each expert's pairs in order, a group per m of them.
            std::vector<int32_t> want_ge(sel.size(), 0), want_row(sel.size());
            int32_t groups = 0;
            for (int e = 0; e < E; ++e) {
                int32_t slot = 0;
                for (int p = 0; p < P; ++p) {
                    if (sel[static_cast<size_t>(p)] != e) continue;
                    if (slot == 0) want_ge[static_cast<size_t>(groups++)] = e;
                    want_row[static_cast<size_t>(p)] = (groups - 1) * m + slot;
                    slot = (slot + 1) % m;
                }
            }
            EXPECT_EQ(d_n.get()[0], groups);
            EXPECT_EQ(d_ge.get(), want_ge);
            EXPECT_EQ(d_row.get(), want_row);
        }
    }
}

TEST(CudaOpsGpu, EmbedF32AndBf16) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(2);
    const int64_t V = 37, D = 67, T = 11;
    const int n = 3;
    const auto tf = randn(V * D, rng);
    std::vector<uint16_t> tb(V * D);
    for (size_t i = 0; i < tb.size(); ++i) tb[i] = f32_to_bf16(tf[i]);
    std::vector<int32_t> ids(T);
    for (auto& i : ids) i = static_cast<int32_t>(rng() % V);
    for (bool bf16 : {false, true}) {
        QuantWeight q;
        q.rows = V;
        q.cols = D;
        q.dtype = bf16 ? DType::kBF16 : DType::kF32;
        q.data = bf16 ? static_cast<const void*>(tb.data()) : tf.data();
        auto w = be->upload_weight(q, {ops::WeightRole::kEmbed});
        ASSERT_TRUE(w.has_value()) << w.status().message();
        Dev<int32_t> d_ids(*be, ids);
        Dev<float> out(*be, T * n * D);
        be->embed({d_ids.p, &*w, out.p, T, n});
        std::vector<float> ref(T * n * D);
        const ops::Weight rw = cpu_ref::wrap(q);
        cpu_ref::embed({ids.data(), &rw, ref.data(), T, n});
        EXPECT_EQ(out.get(), ref) << (bf16 ? "bf16" : "f32");
    }
}

TEST(CudaOpsGpu, RmsNorm) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(3);
    const int64_t rows = 13;
    // 515: the scalar kernel; multiples of 4: the 16-byte kernel (512 and V4's 4096 and 16384).
    for (int dim : {515, 512, 4096, 16384}) {
        const auto x = randn(rows * dim, rng, 3.0f), w = randn(dim, rng);
        for (bool weighted : {true, false}) {
            Dev<float> dx(*be, x), dw(*be, w);
            std::vector<float> ref(x.size());
            cpu_ref::rms_norm(
                {x.data(), weighted ? w.data() : nullptr, ref.data(), rows, dim, 1e-6f});
            be->rms_norm({dx.p, weighted ? dw.p : nullptr, dx.p, rows, dim, 1e-6f});  // in place
            // The factor at most one float ulp apart (its double sum in another order), plus the
            // two roundings after it: 4 ulps.
            expect_close(weighted ? "rms_norm weighted" : "rms_norm", dx.get(), ref, 5e-7, 1e-30);
        }
    }
}

// RMSNorm with the rope fused (RmsNormArgs::rope) against the CPU composition: the per-head q
// norm's shape (rows = tokens x heads, mixed positions) and the K=V norm's (one head, weighted);
// rope dims on a float4 boundary (the fused kernel) and not (512 - 62: the composition).
TEST(CudaOpsGpu, RmsNormWithRope) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(31);
    const std::vector<int64_t> pos = {0, 5, 127, 128, 4097, 65537, 999983};
    const int64_t T = static_cast<int64_t>(pos.size());
    Dev<int64_t> dpos(*be, pos);
    for (int rd : {64, 62})
        for (int heads : {1, 11}) {
            const int dim = 512;
            std::vector<float> inv(rd / 2);
            for (int i = 0; i < rd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rd);
            const auto x = randn(T * heads * dim, rng, 3.0f), w = randn(dim, rng);
            const float* wp = heads == 1 ? w.data() : nullptr;
            Dev<float> dx(*be, x), dw(*be, w), dinv(*be, inv);
            std::vector<float> ref(x.size());
            const ops::FusedRope host_rope{inv.data(), pos.data(), heads, rd, 1.25f},
                dev_rope{dinv.p, dpos.p, heads, rd, 1.25f};
            cpu_ref::rms_norm({x.data(), wp, ref.data(), T * heads, dim, 1e-6f, false, &host_rope});
            be->rms_norm(
                {dx.p, heads == 1 ? dw.p : nullptr, dx.p, T * heads, dim, 1e-6f, false, &dev_rope});
            // The norm's 4 ulps, then rope's few ulps of the pair's magnitude.
            const std::string what =
                "rms_norm + rope rd " + std::to_string(rd) + " heads " + std::to_string(heads);
            expect_close(what.c_str(), dx.get(), ref, 2e-6, 1e-6 * max_abs(ref));
        }
}

// Two norms in one call (RmsNormArgs::also: one launch when both take the vectorised kernel with
// the rope in it) against the CPU's two calls: the decode step's q norm (T x 64 heads,
// unweighted) with the K=V norm (T rows, weighted), mixed positions; rope dims on a float4
// boundary (one launch) and not (512 - 62: each norm on its own, rope after).
TEST(CudaOpsGpu, RmsNormPairInOneLaunch) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(37);
    const std::vector<int64_t> pos = {0, 5, 128, 4097, 999983};
    const int64_t T = static_cast<int64_t>(pos.size());
    const int dim = 512, heads = 64;
    Dev<int64_t> dpos(*be, pos);
    for (int rd : {64, 62}) {
        std::vector<float> inv(rd / 2);
        for (int i = 0; i < rd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rd);
        const auto q = randn(T * heads * dim, rng, 3.0f), kv = randn(T * dim, rng),
                   w = randn(dim, rng);
        Dev<float> dq(*be, q), dkv(*be, kv), dw(*be, w), dinv(*be, inv);
        const ops::FusedRope hq{inv.data(), pos.data(), heads, rd, 1.25f},
            hk{inv.data(), pos.data(), 1, rd, 1.25f}, gq{dinv.p, dpos.p, heads, rd, 1.25f},
            gk{dinv.p, dpos.p, 1, rd, 1.25f};
        std::vector<float> ref_q(q.size()), ref_kv(kv.size());
        cpu_ref::rms_norm({q.data(), nullptr, ref_q.data(), T * heads, dim, 1e-6f, false, &hq});
        cpu_ref::rms_norm({kv.data(), w.data(), ref_kv.data(), T, dim, 1e-6f, false, &hk});
        const ops::RmsNormArgs second{dkv.p, dw.p, dkv.p, T, dim, 1e-6f, false, &gk};
        be->rms_norm({dq.p, nullptr, dq.p, T * heads, dim, 1e-6f, false, &gq, &second});
        // As RmsNormWithRope: the norm's 4 ulps, then rope's few ulps of the pair's magnitude.
        const std::string what = "rms_norm pair rd " + std::to_string(rd);
        expect_close((what + " q").c_str(), dq.get(), ref_q, 2e-6, 1e-6 * max_abs(ref_q));
        expect_close((what + " kv").c_str(), dkv.get(), ref_kv, 2e-6, 1e-6 * max_abs(ref_kv));
    }
}

// A GEMV adding into an output cleared earlier in the step (LinearArgs::y_cleared), as the
// decode step's wq_b adds into the q that the x projections' launch cleared
// (LinearGroupArgs::clear): the plain linear's product.
TEST(CudaOpsGpu, LinearIntoClearedOutput) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(43);
    using cuda::test::TestFormat;
    const int64_t T = 3, K = 320, N = 192;
    const ops::WeightPlacement at{ops::WeightRole::kAttention, 0};
    std::vector<cuda::test::OwnedWeight> ow;
    std::vector<ops::Weight> dw;
    for (int64_t n : {N, int64_t{64}, int64_t{128}}) {  // the linear's, then the group's two
        ow.push_back(cuda::test::random_weight(TestFormat::kNvfp4, n, K, rng));
        auto w = be->upload_weight(ow.back().w, at);
        ASSERT_TRUE(w.has_value()) << w.status().message();
        dw.push_back(*w);
    }
    const ops::Weight* parts[] = {&dw[1], &dw[2]};
    auto packed = be->pack_rows(parts);
    ASSERT_TRUE(packed.has_value() && packed->valid());
    const auto x = randn(T * K, rng);
    Dev<float> dx(*be, x), y(*be, randn(T * N, rng));
    ops::Clear clears[ops::kMaxClears] = {{y.p, T * N}};
    run_linear_group(*be, *packed, {dw[1], dw[2]}, dx.p, T, &clears);
    ops::LinearArgs la{dx.p, &dw[0], y.p, T, N};
    la.y_cleared = true;
    be->linear(la);
    std::vector<float> ref(T * N);
    const ops::Weight rw = cpu_ref::wrap(ow[0].w);
    cpu_ref::linear({x.data(), &rw, ref.data(), T, N});
    expect_close("linear into a cleared y", y.get(), ref, 0.0, 2e-4 * max_abs(ref));
}

TEST(CudaOpsGpu, RopeForwardAndInverse) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(4);
    const int64_t rows = 9;
    const int heads = 3, hd = 70, rd = 24;
    std::vector<int64_t> pos = {0, 1, 7, 63, 64, 1000, 4097, 65537, 999983};
    std::vector<float> inv(rd / 2);
    for (int i = 0; i < rd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rd);
    for (bool inverse : {false, true}) {
        const auto x = randn(rows * heads * hd, rng);
        Dev<float> dx(*be, x), dinv(*be, inv);
        Dev<int64_t> dpos(*be, pos);
        std::vector<float> ref = x;
        cpu_ref::rope({ref.data(), inv.data(), pos.data(), rows, heads, hd, rd, inverse, 1.25f});
        be->rope({dx.p, dinv.p, dpos.p, rows, heads, hd, rd, inverse, 1.25f});
        // cos/sin may differ in the last float bit near a rounding boundary: the output by a
        // few ulps of the pair's magnitude.
        expect_close(inverse ? "rope inverse" : "rope", dx.get(), ref, 1e-6, 1e-6);
    }
}

TEST(CudaOpsGpu, SwigluGatherRows) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(5);
    const int64_t n = 1001;
    for (float limit : {0.0f, 7.0f}) {
        const auto g = randn(n, rng, 5.0f), u = randn(n, rng, 5.0f);
        Dev<float> dg(*be, g), du(*be, u);
        std::vector<float> ref(n);
        cpu_ref::swiglu({g.data(), u.data(), ref.data(), n, limit});
        be->swiglu({dg.p, du.p, dg.p, n, limit});  // out aliases gate
        // CUDA's expf is within 2 ulps (glibc's is correctly rounded): a few ulps of the output.
        expect_close(limit > 0 ? "swiglu limit 7" : "swiglu", dg.get(), ref, 1e-6, 1e-30);
    }
    const int64_t T = 23, R = 7;
    for (int64_t width : {129, 3001}) {  // 3001: rows in several chunks of the grid
        const auto src = randn(T * width, rng);
        std::vector<int32_t> idx = {22, 0, 5, 5, 17, 1, 22};
        Dev<float> dsrc(*be, src), ddst(*be, R * width);
        Dev<int32_t> didx(*be, idx);
        be->gather_rows({dsrc.p, didx.p, ddst.p, R, width});
        std::vector<float> ref(R * width);
        cpu_ref::gather_rows({src.data(), idx.data(), ref.data(), R, width});
        EXPECT_EQ(ddst.get(), ref);
    }
}

TEST(CudaOpsGpu, HyperConnections) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(6);
    const int64_t T = 7;
    const int iters = 20;
    // n = 3, 4: Sinkhorn on one warp; n = 7: a 49-element matrix, more than one warp (the
    // shared-memory path). D = 133: the collapse through global memory; 256: in registers (n =
    // 4 with the stream count at compile time); 36: the mixing width in one split (each block
    // finishes its token without the arrival counter).
    for (int D : {133, 256, 36})
        for (int n : {3, 4, 7}) {
            const int mix = (2 + n) * n;
            const auto x = randn(T * n * D, rng), fn = randn(mix * n * D, rng, 0.05f),
                       base = randn(mix, rng), scale = randn(3, rng), f = randn(T * D, rng);
            Dev<float> dx(*be, x), dfn(*be, fn), dbase(*be, base), dscale(*be, scale), df(*be, f);
            Dev<float> y(*be, T * D), post(*be, T * n), comb(*be, T * n * n), out(*be, T * n * D),
                head(*be, T * D);
            std::vector<float> ry(T * D), rpost(T * n), rcomb(T * n * n), rout(T * n * D),
                rhead(T * D);
            be->hc_pre({dx.p, dfn.p, dbase.p, dscale.p, y.p, post.p, comb.p, T, n, D, iters, 1e-6f,
                        1e-6f});
            cpu_ref::hc_pre({x.data(), fn.data(), base.data(), scale.data(), ry.data(),
                             rpost.data(), rcomb.data(), T, n, D, iters, 1e-6f, 1e-6f});
            // expf within 2 ulps, compounded over 20 Sinkhorn iterations of values in [0, 1].
            expect_close("hc_pre comb", comb.get(), rcomb, 1e-5, 1e-6);
            expect_close("hc_pre post", post.get(), rpost, 1e-6, 1e-7);
            expect_close("hc_pre y", y.get(), ry, 1e-5, 1e-6 * max_abs(x));
            // The fused RMSNorm on a row that is not whole float4s (the kernel's global-memory
            // path).
            const auto nw = randn(D, rng);
            Dev<float> dnw(*be, nw), yn(*be, T * D);
            std::vector<float> ryn(T * D);
            be->hc_pre({dx.p, dfn.p, dbase.p, dscale.p, y.p, post.p, comb.p, T, n, D, iters, 1e-6f,
                        1e-6f, false, dnw.p, yn.p, 1e-6f});
            cpu_ref::hc_pre({x.data(), fn.data(), base.data(), scale.data(), ry.data(),
                             rpost.data(), rcomb.data(), T, n, D, iters, 1e-6f, 1e-6f, false,
                             nw.data(), ryn.data(), 1e-6f});
            expect_close("hc_pre y_norm", yn.get(), ryn, 2e-5, 2e-6 * max_abs(ryn));
            // hc_post on the reference's own post/comb: the same float operations in the same
            // order.
            Dev<float> dpost(*be, rpost), dcomb(*be, rcomb);
            be->hc_post({df.p, dx.p, dpost.p, dcomb.p, out.p, T, n, D});
            cpu_ref::hc_post(
                {f.data(), x.data(), rpost.data(), rcomb.data(), rout.data(), T, n, D});
            expect_close("hc_post", out.get(), rout, 0.0, 0.0);
            const auto hfn = randn(n * n * D, rng, 0.05f), hbase = randn(n, rng),
                       hscale = randn(1, rng);
            Dev<float> dhfn(*be, hfn), dhbase(*be, hbase), dhscale(*be, hscale);
            be->hc_head({dx.p, dhfn.p, dhbase.p, dhscale.p, head.p, T, n, D, 1e-6f, 1e-6f});
            cpu_ref::hc_head({x.data(), hfn.data(), hbase.data(), hscale.data(), rhead.data(), T, n,
                              D, 1e-6f, 1e-6f});
            expect_close("hc_head", head.get(), rhead, 1e-5, 1e-6 * max_abs(x));
        }
}

// V4's mHC shapes (n 4, D 4096 and 7168), against the reference: decode launches (1, 3 and 9
// tokens) by one cluster of blocks a token, and by the split kernel (cuda_set_hc_cluster off:
// one token ~64 splits); 33 tokens (more than a cluster launch takes) by the split kernel.
TEST(CudaOpsGpu, HyperConnectionsV4Shapes) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(26);
    // 4096: V4-Flash; 7168: V4-Pro (the collapsed row in 7 float4s a thread).
    for (const bool clusters : {true, false})
        for (const int D : {4096, 7168}) {
            cuda_set_hc_cluster(*be, clusters);
            const int n = 4, iters = 20, mix = (2 + n) * n;
            const auto fn = randn(mix * n * D, rng, 0.02f), base = randn(mix, rng),
                       scale = randn(3, rng), hfn = randn(n * n * D, rng, 0.02f),
                       hbase = randn(n, rng), hscale = randn(1, rng);
            Dev<float> dfn(*be, fn), dbase(*be, base), dscale(*be, scale), dhfn(*be, hfn),
                dhbase(*be, hbase), dhscale(*be, hscale);
            const auto nw = randn(D, rng);
            Dev<float> dnw(*be, nw);
            for (int64_t T : {1, 3, 9, 33}) {
                const auto x = randn(T * n * D, rng);
                const auto name = [&](const char* what) {
                    return std::string(what) + (clusters ? " (clusters)" : " (splits)") +
                           " D=" + std::to_string(D) + " T=" + std::to_string(T);
                };
                Dev<float> dx(*be, x), y(*be, T * D), post(*be, T * n), comb(*be, T * n * n),
                    head(*be, T * D), yn(*be, T * D);
                std::vector<float> ry(T * D), rpost(T * n), rcomb(T * n * n), rhead(T * D),
                    ryn(T * D);
                // With the fused RMSNorm (the model's call).
                be->hc_pre({dx.p, dfn.p, dbase.p, dscale.p, y.p, post.p, comb.p, T, n, D, iters,
                            1e-6f, 1e-6f, false, dnw.p, yn.p, 1e-6f});
                cpu_ref::hc_pre({x.data(), fn.data(), base.data(), scale.data(), ry.data(),
                                 rpost.data(), rcomb.data(), T, n, D, iters, 1e-6f, 1e-6f, false,
                                 nw.data(), ryn.data(), 1e-6f});
                expect_close(name("hc_pre V4 comb").c_str(), comb.get(), rcomb, 1e-5, 1e-6);
                expect_close(name("hc_pre V4 post").c_str(), post.get(), rpost, 1e-6, 1e-7);
                expect_close(name("hc_pre V4 y").c_str(), y.get(), ry, 1e-5, 1e-6 * max_abs(x));
                // y within its tolerance, then the norm's own few ulps.
                expect_close(name("hc_pre V4 y_norm").c_str(), yn.get(), ryn, 2e-5,
                             2e-6 * max_abs(ryn));
                // Again: whichever block of a token arrives last, the partials are summed in the
                // same order (and the arrival counters were left at zero), so the outputs repeat
                // bitwise.
                const auto y1 = y.get(), yn1 = yn.get(), comb1 = comb.get();
                be->hc_pre({dx.p, dfn.p, dbase.p, dscale.p, y.p, post.p, comb.p, T, n, D, iters,
                            1e-6f, 1e-6f, false, dnw.p, yn.p, 1e-6f});
                expect_close(name("hc_pre V4 y again").c_str(), y.get(), y1, 0.0, 0.0);
                expect_close(name("hc_pre V4 y_norm again").c_str(), yn.get(), yn1, 0.0, 0.0);
                expect_close(name("hc_pre V4 comb again").c_str(), comb.get(), comb1, 0.0, 0.0);
                be->hc_head({dx.p, dhfn.p, dhbase.p, dhscale.p, head.p, T, n, D, 1e-6f, 1e-6f});
                cpu_ref::hc_head({x.data(), hfn.data(), hbase.data(), hscale.data(), rhead.data(),
                                  T, n, D, 1e-6f, 1e-6f});
                expect_close(name("hc_head V4").c_str(), head.get(), rhead, 1e-5,
                             1e-6 * max_abs(x));
            }
        }
}

// hc_post fused in front of hc_pre (HcPreArgs::post_in), as the model calls it: the post and
// comb it reads are the buffers hc_pre then overwrites. Against the composition on the CPU: the
// new streams bitwise (hc_post's arithmetic), the rest within hc_pre's tolerances. Shapes: the
// run-time stream count (3, 7), the global-memory collapse (D 133), one split (D 36), and V4's
// n 4, D 4096 at 1 and 9 tokens (the compile-time path, many splits); n 4 at up to 32 tokens
// also by one cluster a token (D 4100: the last block of a cluster owns fewer columns), and by
// the split kernel (cuda_set_hc_cluster off).
TEST(CudaOpsGpu, HyperConnectionsWithFusedPost) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(27);
    struct Shape {
        int64_t T;
        int n, D;
    };
    for (const bool clusters : {true, false})
        for (const Shape& sh :
             {Shape{7, 3, 133}, Shape{7, 4, 256}, Shape{7, 7, 36}, Shape{1, 4, 4096},
              Shape{9, 4, 4096}, Shape{3, 4, 4100}, Shape{2, 4, 36}}) {
            cuda_set_hc_cluster(*be, clusters);
            const int64_t T = sh.T;
            const int n = sh.n, D = sh.D, iters = 20, mix = (2 + n) * n;
            const auto x = randn(T * n * D, rng), fn = randn(mix * n * D, rng, 0.02f),
                       base = randn(mix, rng), scale = randn(3, rng), f = randn(T * D, rng),
                       nw = randn(D, rng), post0 = randn(T * n, rng), comb0 = randn(T * n * n, rng);
            Dev<float> dx(*be, x), dfn(*be, fn), dbase(*be, base), dscale(*be, scale), df(*be, f),
                dnw(*be, nw), post(*be, post0), comb(*be, comb0), next(*be, T * n * D),
                y(*be, T * D), yn(*be, T * D);
            const ops::HcPostArgs dpin{df.p, dx.p, post.p, comb.p, next.p, T, n, D};
            be->hc_pre({next.p, dfn.p, dbase.p, dscale.p, y.p, post.p, comb.p, T, n, D, iters,
                        1e-6f, 1e-6f, false, dnw.p, yn.p, 1e-6f, &dpin});
            std::vector<float> rpost = post0, rcomb = comb0, rnext(T * n * D), ry(T * D),
                               ryn(T * D);
            const ops::HcPostArgs rpin{
                f.data(), x.data(), rpost.data(), rcomb.data(), rnext.data(), T, n, D};
            cpu_ref::hc_pre({rnext.data(), fn.data(), base.data(), scale.data(), ry.data(),
                             rpost.data(), rcomb.data(), T, n, D, iters, 1e-6f, 1e-6f, false,
                             nw.data(), ryn.data(), 1e-6f, &rpin});
            const std::string what = "fused post n=" + std::to_string(n) +
                                     " D=" + std::to_string(D) + " T=" + std::to_string(T) +
                                     (clusters ? " clusters" : " splits");
            expect_close((what + " streams").c_str(), next.get(), rnext, 0.0, 0.0);
            expect_close((what + " comb").c_str(), comb.get(), rcomb, 1e-5, 1e-6);
            expect_close((what + " post").c_str(), post.get(), rpost, 1e-6, 1e-7);
            expect_close((what + " y").c_str(), y.get(), ry, 1e-5, 1e-6 * max_abs(rnext));
            expect_close((what + " y_norm").c_str(), yn.get(), ryn, 2e-5, 2e-6 * max_abs(ryn));
        }
}

// Attention over a mixed step: sliding only, HCA (every valid entry) and CSA (top-k lists with
// -1 holes), with a small window so rows wrap the ring.
// Long key lists: decode rows far into their sequences and a prefill chunk, a 128-key window
// and hundreds of compressed entries (each block of the kernel's cluster then runs several key
// tiles). Decode steps (decode_pos: one row per position, each in its own slot): the small-step
// launch shapes (8-head groups, clusters of up to 16 key splits, empty splits).
struct AttentionShape {
    int W = 8, m = 4, K = 5;
    int64_t n_entries = 20;
    bool long_rows = false;
    std::vector<int64_t> decode_pos = {};
    CacheRowFormat kv_format = {};  // the ring's and the entries' rows
    int ring_rows = 0;              // R >= W (speculative drafts' extra rows); 0: W
};

void attention_case(const char* what, int H, int hd, bool with_entries, bool csa,
                    AttentionShape shape = {}) {
    auto be = make_gpu();
    std::mt19937 rng(7 + H + hd);
    ops::HostStep st = mixed_step();
    if (shape.long_rows) {
        st.clear();
        st.add_row(3, 700, 1);
        st.add_row(0, 655, 1);
        st.add_row(4, 301, 4);
        st.add_row(1, 999, 1);
    }
    if (!shape.decode_pos.empty()) {
        st.clear();
        for (size_t i = 0; i < shape.decode_pos.size(); ++i)
            st.add_row(static_cast<int32_t>(i), shape.decode_pos[i], 1);
    }
    const int S = std::max(5, st.B()), W = shape.W, m = shape.m, K = shape.K;
    const int R = shape.ring_rows > 0 ? shape.ring_rows : W;
    const int64_t n_entries = shape.n_entries;
    const int T = st.T();
    const auto q = randn(int64_t{T} * H * hd, rng), kv = randn(int64_t{T} * hd, rng),
               ring = randn(int64_t{S} * R * hd, rng), entries = randn(S * n_entries * hd, rng),
               sink = randn(H, rng);
    std::vector<int32_t> topk(int64_t{T} * K, -1);
    for (int t = 0; t < T; ++t) {
        const int64_t valid = (st.tok_pos[t] + 1) / m;
        for (int j = 0; j < K; ++j)
            if (valid > 0 && rng() % 4 != 0) topk[t * K + j] = static_cast<int32_t>(rng() % valid);
    }
    // The ring and the entries as the cache stores them (both sides decode the same bytes).
    const CacheRowFormat f = shape.kv_format;
    const std::vector<uint8_t> ring_s = stored_rows(f, hd, ring),
                               ent_s = stored_rows(f, hd, entries);
    DevStep ds(*be, st);
    Dev<float> dq(*be, q), dkv(*be, kv), dsink(*be, sink), out(*be, int64_t{T} * H * hd);
    Dev<uint8_t> dring(*be, ring_s), dent(*be, ent_s);
    Dev<int32_t> dtopk(*be, topk);
    ops::AttentionArgs a;
    a.H = H;
    a.hd = hd;
    a.W = W;
    a.K = K;
    a.compress_rate = m;
    a.n_entries = n_entries;
    a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.kv_format = f;
    a.ring_rows = shape.ring_rows;
    ops::AttentionArgs g = a, r = a;
    g.q = dq.p, g.kv = dkv.p, g.ring = reinterpret_cast<const float*>(dring.p), g.sink = dsink.p;
    g.out = out.p, g.step = ds.view();
    g.entries = with_entries ? reinterpret_cast<const float*>(dent.p) : nullptr;
    g.topk = csa ? dtopk.p : nullptr;
    std::vector<float> ref(int64_t{T} * H * hd);
    r.q = q.data(), r.kv = kv.data(), r.ring = reinterpret_cast<const float*>(ring_s.data());
    r.sink = sink.data(), r.out = ref.data();
    r.step = st.view();
    r.entries = with_entries ? reinterpret_cast<const float*>(ent_s.data()) : nullptr;
    r.topk = csa ? topk.data() : nullptr;
    cpu_ref::attention(r);
    // Outputs are convex combinations of keys: FP32 scores and sums against the reference's
    // double, bounded relative to the largest key value (typed rows: the decoded values, within
    // a few percent of these).
    const double tol = (2e-5 * max_abs(kv) + 2e-5 * max_abs(entries) + 2e-5 * max_abs(ring)) *
                       (f.type == CacheType::kF32 ? 1.0 : 1.1);
    // Both kernels on every case: the cluster kernel (the split one turned off), then the
    // split kernel, which takes steps of up to kAttnSplitMaxTokens tokens with float4 rows (the
    // test's arrays are 16-byte aligned); the others stay on the cluster kernel.
    const bool splits = T <= cuda::kAttnSplitMaxTokens && hd % 4 == 0;
    const int64_t runs0 = cuda_attention_split_runs(*be);
    cuda_set_attention_split(*be, false);
    be->attention(g);
    expect_close((std::string(what) + " (cluster kernel)").c_str(), out.get(), ref, 0.0, tol);
    EXPECT_EQ(cuda_attention_split_runs(*be), runs0);
    cuda_set_attention_split(*be, true);
    be->fill(out.p, std::nanf(""), out.n);
    be->attention(g);
    expect_close(
        (std::string(what) + (splits ? " (split kernel)" : " (cluster kernel again)")).c_str(),
        out.get(), ref, 0.0, tol);
    EXPECT_EQ(cuda_attention_split_runs(*be), runs0 + (splits ? 1 : 0));
    // The split kernel's blocks merged through global memory instead of a cluster's shared
    // memory (cuda_set_attention_merge_cluster off), twice: the arrival counters are left at
    // zero, so the second launch gives the same result.
    cuda_set_attention_merge_cluster(*be, false);
    for (const char* run : {" (merged through global memory)", " (again)"}) {
        be->fill(out.p, std::nanf(""), out.n);
        be->attention(g);
        expect_close((std::string(what) + run).c_str(), out.get(), ref, 0.0, tol);
    }
    cuda_set_attention_merge_cluster(*be, true);
    // Then writing the step's rows into the ring read (AttentionArgs::ring_out), by either
    // kernel: the same output, and the ring as ring_write leaves it. (The split kernel writes
    // it itself when every row is one token, the decode cases; else a ring_write launch.)
    std::vector<uint8_t> ring_ref = ring_s;
    cpu_ref::ring_write({kv.data(), reinterpret_cast<float*>(ring_ref.data()), st.view(), W, hd, f,
                         shape.ring_rows});
    for (const bool split : {false, true}) {
        Dev<uint8_t> dring_w(*be, ring_s);
        ops::AttentionArgs gw = g;
        gw.ring = gw.ring_out = reinterpret_cast<float*>(dring_w.p);
        cuda_set_attention_split(*be, split);
        be->fill(out.p, std::nanf(""), out.n);
        be->attention(gw);
        const std::string w = std::string(what) + (split ? " (split kernel" : " (cluster kernel") +
                              ", then the ring write)";
        expect_close(w.c_str(), out.get(), ref, 0.0, tol);
        EXPECT_EQ(dring_w.get(), ring_ref) << w;
    }
    cuda_set_attention_split(*be, true);
    // The queries normed per head first (AttentionArgs::q_norm, with a rope on the trailing
    // dims): the CPU norms them in place, then attends; the split kernel norms them as it
    // stages them (float4 rows, the rope's dims starting on a float4: hd 129 does not), the
    // cluster kernel after a norm launch.
    const int rd = hd >= 128 ? 64 : hd / 4 * 2;
    std::vector<float> inv_freq(rd / 2);
    for (int i = 0; i < rd / 2; ++i)
        inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / rd));
    std::vector<float> qn = q, ref_n(ref.size());
    const ops::FusedRope hrope{inv_freq.data(), st.tok_pos.data(), H, rd, 1.1f};
    const ops::RmsNormArgs hnorm{qn.data(), nullptr, qn.data(), int64_t{T} * H,
                                 hd,        1e-6f,   false,     &hrope};
    ops::AttentionArgs rn = r;
    rn.q = qn.data(), rn.q_norm = &hnorm, rn.out = ref_n.data();
    cpu_ref::attention(rn);
    Dev<float> dinv(*be, inv_freq);
    const ops::FusedRope drope{dinv.p, ds.view().tok_pos, H, rd, 1.1f};
    const ops::RmsNormArgs dnorm{dq.p, nullptr, dq.p, int64_t{T} * H, hd, 1e-6f, false, &drope};
    const bool fused = splits && (hd - rd) % 4 == 0;
    for (const bool split : {false, true}) {
        ops::AttentionArgs gn = g;
        gn.q_norm = &dnorm;
        dq.set(q);
        cuda_set_attention_split(*be, split);
        be->fill(out.p, std::nanf(""), out.n);
        be->attention(gn);
        const std::string w = std::string(what) + ", queries normed" +
                              (split && fused ? " by the split kernel" : " by a launch first");
        expect_close(w.c_str(), out.get(), ref_n, 0.0, tol);
        // (q itself: still raw where the kernel normed it as staged, normed in place otherwise.)
        if (split && fused) {
            EXPECT_EQ(dq.get(), q) << w;
        }
    }
    cuda_set_attention_split(*be, true);
}

TEST(CudaOpsGpu, AttentionSlidingOnly) {
    DSV4_REQUIRE_GPU();
    attention_case("attention sliding H=3 hd=72", 3, 72, false, false);
}
TEST(CudaOpsGpu, AttentionHca) {
    DSV4_REQUIRE_GPU();
    attention_case("attention HCA H=5 hd=40", 5, 40, true, false);
}
TEST(CudaOpsGpu, AttentionCsa) {
    DSV4_REQUIRE_GPU();
    attention_case("attention CSA H=7 hd=129", 7, 129, true, true);
}
TEST(CudaOpsGpu, AttentionV4HeadDimManyHeads) {
    DSV4_REQUIRE_GPU();
    attention_case("attention CSA H=70 hd=512", 70, 512, true, true);
}

TEST(CudaOpsGpu, AttentionLongKeyListsHca) {
    DSV4_REQUIRE_GPU();
    attention_case("attention HCA long H=64 hd=512", 64, 512, true, false, {128, 4, 5, 260, true});
}
TEST(CudaOpsGpu, AttentionLongKeyListsCsa) {
    DSV4_REQUIRE_GPU();
    attention_case("attention CSA long H=64 hd=512", 64, 512, true, true, {128, 4, 200, 260, true});
}

// V4-Flash's decode shapes at 8K context (64 heads of 512, window 128; HCA every 128th position,
// CSA top 512 of every 4th), batch 1: 8 head groups x 16 key splits; HCA's 192 keys leave the
// last splits empty.
TEST(CudaOpsGpu, AttentionV4DecodeBatch1Sliding) {
    DSV4_REQUIRE_GPU();
    attention_case("attention V4 decode B=1 sliding", 64, 512, false, false,
                   {128, 4, 5, 20, false, {8191}});
}
TEST(CudaOpsGpu, AttentionV4DecodeBatch1Hca) {
    DSV4_REQUIRE_GPU();
    attention_case("attention V4 decode B=1 HCA", 64, 512, true, false,
                   {128, 128, 5, 80, false, {8191}});
}
TEST(CudaOpsGpu, AttentionV4DecodeBatch1Csa) {
    DSV4_REQUIRE_GPU();
    attention_case("attention V4 decode B=1 CSA", 64, 512, true, true,
                   {128, 4, 512, 2048, false, {8191}});
}
// Fewer keys than key splits: a token at position 3 (4 keys: 15 of 16 splits empty); CSA at
// position 5 (one valid entry, picked or -1).
TEST(CudaOpsGpu, AttentionDecodeFewerKeysThanSplits) {
    DSV4_REQUIRE_GPU();
    attention_case("attention decode p=3 sliding", 64, 512, false, false,
                   {128, 4, 5, 20, false, {3}});
    attention_case("attention decode p=5 CSA", 64, 512, true, true, {128, 4, 512, 20, false, {5}});
}
// Head counts off the 8-head group: 22 heads (the last group 6: a partial quad and an idle
// one) with a head_dim off the float4 path, and 8 heads (one group).
TEST(CudaOpsGpu, AttentionDecodeHeadGroups) {
    DSV4_REQUIRE_GPU();
    attention_case("attention decode CSA H=22 hd=129", 22, 129, true, true,
                   {16, 4, 24, 64, false, {200}});
    attention_case("attention decode HCA H=8 hd=512", 8, 512, true, false,
                   {128, 4, 5, 300, false, {1000}});
}
// A batch of 8 decode tokens at mixed positions (the first token of a sequence, a partly filled
// window, the window's wrap-around, far into the context), V4's head_dim and heads.
TEST(CudaOpsGpu, AttentionV4DecodeBatch8MixedPositions) {
    DSV4_REQUIRE_GPU();
    const std::vector<int64_t> pos = {8191, 0, 3, 127, 128, 1000, 4099, 200};
    attention_case("attention V4 decode B=8 HCA", 64, 512, true, false,
                   {128, 128, 5, 80, false, pos});
    attention_case("attention V4 decode B=8 CSA", 64, 512, true, true,
                   {128, 4, 512, 2048, false, pos});
}

// Typed K=V rows (bf16; fp8: E4M3 NoPE dims with a scale per 64, bf16 RoPE dims): the ring and
// the entries stored by the host's encoder, the step's own rows encoded by the device (a key
// reads the same from the step as from the ring). Both kernels, odd head dims (the scalar
// decode), V4's decode shapes (the four-value decode), a NoPE part off the 64-value blocks; the
// ring written after the attention equal byte for byte to the CPU's.
TEST(CudaOpsGpu, AttentionTypedRows) {
    DSV4_REQUIRE_GPU();
    const std::vector<int64_t> pos = {8191, 0, 3, 127, 128, 1000, 4099, 200};
    for (const CacheType type : {CacheType::kBf16, CacheType::kFp8}) {
        const std::string name(cache_type_name(type));
        auto shape = [&](AttentionShape s, int rope_dim) {
            s.kv_format = kv_row_format(type, rope_dim);
            return s;
        };
        attention_case(("attention CSA H=7 hd=129 " + name).c_str(), 7, 129, true, true,
                       shape({}, 17));
        attention_case(("attention HCA H=5 hd=40 " + name).c_str(), 5, 40, true, false,
                       shape({}, 8));
        attention_case(("attention V4 decode B=1 CSA " + name).c_str(), 64, 512, true, true,
                       shape({128, 4, 512, 2048, false, {8191}}, 64));
        attention_case(("attention V4 decode B=8 HCA " + name).c_str(), 64, 512, true, false,
                       shape({128, 128, 5, 80, false, pos}, 64));
        attention_case(("attention CSA long H=64 hd=512 " + name).c_str(), 64, 512, true, true,
                       shape({128, 4, 200, 260, true}, 64));
    }
}

// Rings of R = W + 3 rows (a step feeding four speculative drafts a row: AttentionArgs::
// ring_rows): the keys of the window read from rows pos % R, the ring write into them; decode
// steps at mixed positions (wrapping the ring at R, not W) through both kernels, a mixed
// prefill step, and typed rows.
TEST(CudaOpsGpu, AttentionRingsOfMoreThanWRows) {
    DSV4_REQUIRE_GPU();
    const std::vector<int64_t> pos = {8191, 0, 3, 127, 128, 130, 131, 4099};
    AttentionShape dec{128, 4, 512, 2048, false, pos};
    dec.ring_rows = 131;
    attention_case("attention V4 decode B=8 CSA, R=131", 64, 512, true, true, dec);
    AttentionShape mixed{};
    mixed.ring_rows = 11;
    attention_case("attention sliding H=3 hd=72, R=11", 3, 72, false, false, mixed);
    dec.kv_format = kv_row_format(CacheType::kFp8, 64);
    attention_case("attention V4 decode B=8 CSA fp8, R=131", 64, 512, true, true, dec);
}

TEST(CudaOpsGpu, RingWrite) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(8);
    const ops::HostStep st = mixed_step();
    const int S = 5, W = 8, hd = 33;
    const auto kv = randn(int64_t{st.T()} * hd, rng), ring = randn(S * W * hd, rng);
    DevStep ds(*be, st);
    Dev<float> dkv(*be, kv), dring(*be, ring);
    be->ring_write({dkv.p, dring.p, ds.view(), W, hd});
    std::vector<float> ref = ring;
    cpu_ref::ring_write({kv.data(), ref.data(), st.view(), W, hd});
    EXPECT_EQ(dring.get(), ref);
    // Typed rows (hd 33: an odd row; fp8 with 9 RoPE dims: a NoPE part of 24 in one partial
    // block), equal byte for byte to the CPU encoder's.
    for (const CacheRowFormat f :
         {kv_row_format(CacheType::kBf16, 0), kv_row_format(CacheType::kFp8, 9)}) {
        const std::vector<uint8_t> stored = stored_rows(f, hd, ring);
        Dev<uint8_t> dstored(*be, stored);
        be->ring_write({dkv.p, reinterpret_cast<float*>(dstored.p), ds.view(), W, hd, f});
        std::vector<uint8_t> want = stored;
        cpu_ref::ring_write(
            {kv.data(), reinterpret_cast<float*>(want.data()), st.view(), W, hd, f});
        EXPECT_EQ(dstored.get(), want) << cache_type_name(f.type);
    }
    // Rings of R = W + 3 rows (speculative drafts): a row's tokens into rows pos % R.
    const int R = W + 3;
    const auto ring_r = randn(S * R * hd, rng);
    Dev<float> dring_r(*be, ring_r);
    be->ring_write({dkv.p, dring_r.p, ds.view(), W, hd, {}, R});
    std::vector<float> ref_r = ring_r;
    cpu_ref::ring_write({kv.data(), ref_r.data(), st.view(), W, hd, {}, R});
    EXPECT_EQ(dring_r.get(), ref_r);
}

// Two consecutive steps through the compressor (the state carries over), CSA (coff 2, m 4) and
// HCA (coff 1, m 7), with and without the entry norm + rope.
void compress_case(const char* what, int coff, int m, bool with_norm) {
    auto be = make_gpu();
    const CompressRun run =
        run_compress(*be, {coff, m, 36, 12, with_norm, ops::RoundTrip::kNone}, 9 + coff * 10 + m);
    EXPECT_EQ(run.gpu_kv, run.ref_kv) << what;
    EXPECT_EQ(run.gpu_gate, run.ref_gate) << what;
    // Pooling in double (exp within 1 double ulp) is float-exact but for rounding-boundary
    // cases; norm + rope add the rms_norm and rope tolerances.
    expect_close(what, run.gpu_entries, run.ref_entries, 1e-6, 1e-6 * max_abs(run.ref_entries));
}

TEST(CudaOpsGpu, CompressCsaWithNormRope) {
    DSV4_REQUIRE_GPU();
    compress_case("compress CSA m=4 norm+rope", 2, 4, true);
}
TEST(CudaOpsGpu, CompressHcaPooledOnly) {
    DSV4_REQUIRE_GPU();
    compress_case("compress HCA m=7 pooled", 1, 7, false);
}
TEST(CudaOpsGpu, CompressHcaWithNormRope) {
    DSV4_REQUIRE_GPU();
    compress_case("compress HCA m=7 norm+rope", 1, 7, true);
}

// Typed entries: the device encodes its pooled, normed and roped entries in the cache format;
// on these draws the pooled floats equal the CPU's (the f32 cases: 0 differences), so the stored
// bytes must equal the CPU compressor's. K=V rows (bf16; fp8 with the RoPE dims in bf16, at a
// NoPE part of one partial block and at V4's 448 + 64, HCA-like and CSA's) and indexer keys (fp8
// per 128; fp4 after the Hadamard rotation, at 64 and V4's 128). The steps' one-token rows that
// complete a block (run_compress) take the kernel's decode fast path.
TEST(CudaOpsGpu, CompressTypedEntries) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    struct Case {
        int coff, m, hd, rd;
        CacheRowFormat f;
    };
    const Case cases[] = {
        {2, 4, 36, 12, kv_row_format(CacheType::kBf16, 12)},
        {2, 4, 36, 12, kv_row_format(CacheType::kFp8, 12)},
        {1, 7, 512, 64, kv_row_format(CacheType::kFp8, 64)},
        {2, 4, 512, 64, kv_row_format(CacheType::kFp8, 64)},
        {2, 4, 36, 12, index_key_format(CacheType::kFp8)},
        {2, 4, 64, 16, index_key_format(CacheType::kFp4)},
        {2, 4, 128, 64, index_key_format(CacheType::kFp4)},
    };
    for (const Case& c : cases) {
        const CompressRun run = run_compress(
            *be, {c.coff, c.m, c.hd, c.rd, true, ops::RoundTrip::kNone, c.f}, 41 + c.hd + c.coff);
        const std::string what = "compress " + std::to_string(c.hd) + " " +
                                 std::string(cache_type_name(c.f.type)) + " rope " +
                                 std::to_string(c.f.rope_dim);
        EXPECT_EQ(run.gpu_kv, run.ref_kv) << what;
        EXPECT_EQ(run.gpu_gate, run.ref_gate) << what;
        ASSERT_EQ(run.gpu_entries.size(), run.ref_entries.size());
        const auto* g = reinterpret_cast<const uint8_t*>(run.gpu_entries.data());
        const auto* r = reinterpret_cast<const uint8_t*>(run.ref_entries.data());
        int64_t diff = 0;
        for (size_t i = 0; i < run.ref_entries.size() * sizeof(float); ++i) diff += g[i] != r[i];
        std::printf("[ops] %-40s %lld bytes differ\n", what.c_str(), static_cast<long long>(diff));
        EXPECT_EQ(diff, 0) << what;
    }
}

// Exact match, including exact ties: some keys are repeated rows (equal scores) and some are
// -q-like so every head's dot is negative (score 0 after the ReLU).
// The indexer's top-k on the GPU (*got) and on the CPU reference (*ref).
// rope_dim > 0: q's rope and w's scale fused in (IndexerTopkArgs::q_rope, w_scale; the CPU op's
// fused form is checked against the composition in ops_indexer_test).
void indexer_both(Backend& be, const ops::HostStep& st, const std::vector<float>& q,
                  const std::vector<float>& w, const std::vector<float>& keys, int64_t n_entries,
                  int Hi, int hi, int K, int m, std::vector<int32_t>* got,
                  std::vector<int32_t>* ref, int rope_dim = 0, float w_scale = 1.0f,
                  CacheRowFormat key_format = {}) {
    DevStep ds(be, st);
    // The keys as the cache stores them in key_format (both sides decode the same bytes).
    const std::vector<uint8_t> stored = stored_rows(key_format, hi, keys);
    const auto* kp = reinterpret_cast<const float*>(stored.data());
    Dev<float> dq(be, q), dw(be, w);
    Dev<uint8_t> dk(be, stored);
    Dev<int32_t> dt(be, int64_t{st.T()} * K);
    std::vector<float> inv_freq(std::max(1, rope_dim / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i)
        inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / std::max(1, rope_dim)));
    Dev<float> dinv(be, inv_freq);
    ops::IndexerTopkArgs g{dq.p, dw.p,      reinterpret_cast<const float*>(dk.p),
                           dt.p, ds.view(), n_entries,
                           Hi,   hi,        K,
                           m,    key_format};
    ref->assign(int64_t{st.T()} * K, 0);
    ops::IndexerTopkArgs c{q.data(), w.data(), kp, ref->data(), st.view(), n_entries,
                           Hi,       hi,       K,  m,           key_format};
    if (rope_dim > 0) {
        g.q_rope = {dinv.p, ds.view().tok_pos, Hi, rope_dim, 0.93f};
        c.q_rope = {inv_freq.data(), st.view().tok_pos, Hi, rope_dim, 0.93f};
        g.w_scale = c.w_scale = w_scale;
    }
    be.indexer_topk(g);
    cpu_ref::indexer_topk(c);
    *got = dt.get();
}

void indexer_generic_case(int hi, CacheRowFormat key_format, const char* what) {
    auto be = make_gpu();
    std::mt19937 rng(10);
    ops::HostStep st;
    st.add_row(0, 1199, 1);  // 300 valid entries: several key tiles per block of the cluster
    st.add_row(3, 3, 6);
    st.add_row(1, 150, 33);
    st.add_row(2, 511, 1);
    st.add_row(4, 80, 9);
    const int S = 5, Hi = 5, K = 37, m = 4;
    const int64_t n_entries = 300;
    const int T = st.T();
    const auto q = randn(int64_t{T} * Hi * hi, rng), w = randn(int64_t{T} * Hi, rng);
    auto keys = randn(S * n_entries * hi, rng);
    for (int64_t e = 0; e < S * n_entries; e += 7)  // exact duplicates of another entry
        std::copy_n(keys.begin() + ((e * 13) % (S * n_entries)) * hi, hi, keys.begin() + e * hi);
    for (int64_t e = 3; e < S * n_entries; e += 11)
        std::fill_n(keys.begin() + e * hi, hi, 0.0f);  // all dots 0: score exactly 0
    std::vector<int32_t> got, ref;
    indexer_both(*be, st, q, w, keys, n_entries, Hi, hi, K, m, &got, &ref, 0, 1.0f, key_format);
    int64_t diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) diff += got[i] != ref[i];
    std::printf("[ops] %s T=%d K=%d: %lld of %zu indices differ\n", what, T, K,
                static_cast<long long>(diff), ref.size());
    EXPECT_EQ(got, ref) << what;
    // With q's rope (10 dims) and w's scale fused in.
    indexer_both(*be, st, q, w, keys, n_entries, Hi, hi, K, m, &got, &ref, 10, 0.37f, key_format);
    EXPECT_EQ(got, ref) << what << ", fused rope and scale";
}

TEST(CudaOpsGpu, IndexerTopkMatchesExactly) {
    DSV4_REQUIRE_GPU();
    indexer_generic_case(67, {}, "indexer_topk hi=67");
}

// Prints how many of the indices differ and expects none to.
void expect_same_topk(const std::vector<int32_t>& got, const std::vector<int32_t>& ref,
                      const char* what) {
    int64_t diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) diff += got[i] != ref[i];
    std::printf("[ops] %s: %lld of %zu indices differ\n", what, static_cast<long long>(diff),
                ref.size());
    EXPECT_EQ(got, ref) << what;
}

// V4-Flash's indexer shapes (64 heads x 128: the V4 kernel), top 512, on 6 slots of 2049
// entries: exact ties (repeated keys; zero keys score exactly 0), the cut inside a run of tied
// zeros (slot 3: one entry in 5 nonzero, its tokens' weights positive), for the tokens of `st`.
void indexer_v4_case(const ops::HostStep& st, uint32_t seed, const char* what,
                     CacheRowFormat key_format = {}) {
    auto be = make_gpu();
    std::mt19937 rng(seed);
    const int S = 6, Hi = 64, hi = 128, K = 512, m = 4;
    const int64_t n_entries = 2049;
    const int T = st.T();
    const auto q = randn(int64_t{T} * Hi * hi, rng);
    auto w = randn(int64_t{T} * Hi, rng), keys = randn(S * n_entries * hi, rng);
    for (int64_t e = 0; e < 3 * n_entries; e += 7)  // exact duplicates of another entry
        std::copy_n(keys.begin() + ((e * 13) % (3 * n_entries)) * hi, hi, keys.begin() + e * hi);
    for (int64_t e = 5; e < 3 * n_entries; e += 11)
        std::fill_n(keys.begin() + e * hi, hi, 0.0f);  // every dot 0: score exactly 0
    // Slot 3: one entry in 5 nonzero, the tokens' weights positive: every nonzero entry is
    // taken, then the lowest-index zeros.
    for (int64_t e = 0; e < n_entries; ++e)
        if (e % 5 != 0) std::fill_n(keys.begin() + (3 * n_entries + e) * hi, hi, 0.0f);
    for (int t = 0; t < T; ++t)
        if (st.tok_row[t] == 3)
            for (int h = 0; h < Hi; ++h) w[t * Hi + h] = std::fabs(w[t * Hi + h]);
    std::vector<int32_t> got, ref;
    indexer_both(*be, st, q, w, keys, n_entries, Hi, hi, K, m, &got, &ref, 0, 1.0f, key_format);
    expect_same_topk(got, ref, what);
    // With q's rope (V4's 64 dims) and w's scale (V4's 1 / sqrt(Hi hi)) fused in.
    std::vector<int32_t> got_f, ref_f;
    indexer_both(*be, st, q, w, keys, n_entries, Hi, hi, K, m, &got_f, &ref_f, 64,
                 static_cast<float>(1.0 / std::sqrt(8192.0)), key_format);
    expect_same_topk(got_f, ref_f, "  fused rope and scale");
    // The cut in the sparse slot falls among the zeros (the test's premise): some are taken.
    for (int t = 0; t < T; ++t) {
        if (st.tok_row[t] != 3) continue;
        int zeros = 0;
        for (int j = 0; j < K; ++j) zeros += ref[t * K + j] % 5 != 0;
        EXPECT_GT(zeros, 0);
        EXPECT_LT(zeros, K);
    }
}

TEST(CudaOpsGpu, IndexerTopkV4ShapesMatchExactly) {
    DSV4_REQUIRE_GPU();
    indexer_v4_case(indexer_cluster_step(), 11,
                    "indexer_topk V4 shapes K=512, 11 tokens (cluster)");
}

TEST(CudaOpsGpu, IndexerTopkV4ShapesDecodeRows) {
    DSV4_REQUIRE_GPU();
    indexer_v4_case(indexer_decode_step(), 13,
                    "indexer_topk V4 shapes K=512, 6 decode rows (split)");
}

// The longest slot the CUDA indexer holds at V4 shapes (its shared-memory limit), top 1024
// (V4-Pro's K): one token of random keys (with repeats), one of mostly zero keys (the cut among
// ~28K tied zeros, spread over many rounds of the index-order scan). Two tokens: the split
// kernel (~440 entries a block).
TEST(CudaOpsGpu, IndexerTopkV4ShapesLongestSlot) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(12);
    const int Hi = 64, hi = 128, K = 1024, m = 4;
    const int64_t n_entries = be->max_indexer_entries(Hi, hi);
    ASSERT_GE(n_entries, 24 * 1024);
    ops::HostStep st;
    st.add_row(0, m * n_entries - 1, 1);    // every entry valid
    st.add_row(1, m * n_entries - 150, 1);  // n_entries - 38
    const int T = st.T();
    const auto q = randn(int64_t{T} * Hi * hi, rng), w = randn(int64_t{T} * Hi, rng);
    auto keys = randn(2 * n_entries * hi, rng);
    for (int64_t e = 0; e < n_entries; e += 7)
        std::copy_n(keys.begin() + ((e * 13) % n_entries) * hi, hi, keys.begin() + e * hi);
    for (int64_t e = 0; e < n_entries; ++e)
        if (e % 37 != 0) std::fill_n(keys.begin() + (n_entries + e) * hi, hi, 0.0f);
    std::vector<int32_t> got, ref;
    indexer_both(*be, st, q, w, keys, n_entries, Hi, hi, K, m, &got, &ref);
    expect_same_topk(got, ref, "indexer_topk V4 shapes, longest slot, K=1024");
}

// Typed indexer keys (formats/cache_row.h: bf16, fp8 with a scale per 128, fp4 after a Hadamard
// rotation, q then rotated the same way inside the kernel): the keys stored by the host's
// encoder, both sides decoding the same bytes; the V4 kernel through its split (6 decode rows)
// and cluster (11 tokens) launches, the generic kernel at hi 64 (fp4 needs a power of two) and
// 67. Every index equal to the CPU op's.
TEST(CudaOpsGpu, IndexerTopkTypedKeys) {
    DSV4_REQUIRE_GPU();
    const ops::HostStep decode = indexer_decode_step(), cluster = indexer_cluster_step();
    for (const CacheType type : {CacheType::kBf16, CacheType::kFp8, CacheType::kFp4}) {
        const CacheRowFormat f = index_key_format(type);
        const std::string name(cache_type_name(type));
        indexer_v4_case(decode, 13, ("indexer_topk V4 " + name + " keys, 6 decode rows").c_str(),
                        f);
        indexer_v4_case(cluster, 11, ("indexer_topk V4 " + name + " keys, 11 tokens").c_str(), f);
        indexer_generic_case(64, f, ("indexer_topk hi=64 " + name + " keys").c_str());
        if (type != CacheType::kFp4)
            indexer_generic_case(67, f, ("indexer_topk hi=67 " + name + " keys").c_str());
    }
}

TEST(CudaOpsGpu, SampleMatchesExactly) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(11);
    const int64_t V = 1537, R = 9;
    const int S = 11;
    auto logits = randn(R * V, rng, 3.0f);
    // Row 0: the maximum repeated at a later id (greedy takes the lower). Row 1: NaN; row 2:
    // +inf (both -1). Row 3: top_k 1. Rows 4..8: temperature / top-k / top-p draws.
    logits[0 * V + 100] = 50.0f;
    logits[0 * V + 900] = 50.0f;
    logits[1 * V + 7] = std::numeric_limits<float>::quiet_NaN();
    logits[2 * V + 1536] = std::numeric_limits<float>::infinity();
    std::vector<SamplingParams> params(R);
    params[3] = {0.8f, 1, 1.0f, 0};
    params[4] = {1.0f, 40, 1.0f, 0};
    params[5] = {0.7f, 1024, 0.9f, 0};
    params[6] = {1.3f, 17, 0.5f, 0};
    params[7] = {0.5f, 1000, 1.0f, 0};
    params[8] = {2.0f, 3, 0.99f, 0};
    std::vector<int32_t> slot = {4, 0, 9, 1, 2, 3, 5, 10, 7};
    std::vector<uint64_t> state(S * 4);
    for (int s = 0; s < S; ++s) ops::seed_rng(1234 + s, state.data() + 4 * s);
    Dev<float> dl(*be, logits);
    Dev<SamplingParams> dp(*be, params);
    Dev<int32_t> dslot(*be, slot), dout(*be, R);
    Dev<uint64_t> drng(*be, state);
    std::vector<int32_t> ref(R);
    int64_t mismatches = 0;
    for (int round = 0; round < 20; ++round) {  // the generators advance
        be->sample({dl.p, dp.p, dslot.p, drng.p, dout.p, R, V});
        cpu_ref::sample(
            {logits.data(), params.data(), slot.data(), state.data(), ref.data(), R, V});
        const auto got = dout.get();
        for (int r = 0; r < R; ++r) mismatches += got[r] != ref[r];
        EXPECT_EQ(got, ref) << "round " << round;
    }
    EXPECT_EQ(drng.get(), state);
    std::printf("[ops] sample R=%lld V=%lld x 20 rounds: %lld ids differ\n",
                static_cast<long long>(R), static_cast<long long>(V),
                static_cast<long long>(mismatches));
}

// The log-probabilities op against the CPU's: the top ids exactly (ties to the lower id: row 0
// repeats its maximum, row 2 is uniform), the log-probabilities within 2e-6 relative (the sum of
// exponentials is added in another order; docs/numerics-cuda.md, "logprobs"); a row sampled -1
// gets NaN and ids -1. The full V4 vocabulary, an odd one, and one smaller than n.
TEST(CudaOpsGpu, LogprobsMatchReference) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(31);
    // Each shape twice: one block a row, then (with the step scratch) the split launch; V 2,100
    // leaves its last slices short of n logits, and empty.
    for (const bool split : {false, true})
        for (const auto& [V, R, n] : {std::tuple<int64_t, int64_t, int>{129280, 5, kMaxTopLogprobs},
                                      {1537, 9, 7},
                                      {2100, 3, kMaxTopLogprobs},
                                      {5, 3, kMaxTopLogprobs}}) {
            if (split) {
                ASSERT_TRUE(be->prepare_steps(64).is_ok());
            }
            auto logits = randn(R * V, rng, 4.0f);
            logits[0 * V + 1] = 40.0f;
            logits[0 * V + V - 1] = 40.0f;
            std::fill(logits.begin() + 2 * V, logits.begin() + 3 * V, 0.5f);
            std::vector<int32_t> sampled(R);
            for (int64_t r = 0; r < R; ++r) sampled[r] = static_cast<int32_t>((r * 7919) % V);
            sampled[1] = -1;
            Dev<float> dl(*be, logits);
            Dev<int32_t> ds(*be, sampled), did(*be, R * n);
            Dev<float> dlp(*be, R), dtop(*be, R * n);
            be->logprobs({dl.p, ds.p, dlp.p, did.p, dtop.p, R, V, n});
            std::vector<float> lp(R), top(R * n);
            std::vector<int32_t> id(R * n);
            cpu_ref::logprobs(
                {logits.data(), sampled.data(), lp.data(), id.data(), top.data(), R, V, n});
            const std::string what = "logprobs V=" + std::to_string(V) + " n=" + std::to_string(n) +
                                     (split ? " split" : "");
            EXPECT_EQ(did.get(), id) << what;
            auto close = [&](const std::vector<float>& got, const std::vector<float>& ref) {
                double worst = 0;
                for (size_t i = 0; i < ref.size(); ++i) {
                    if (std::isnan(ref[i])) {
                        EXPECT_TRUE(std::isnan(got[i])) << what << " at " << i;
                        continue;
                    }
                    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]) /
                                       std::max(1.0, std::fabs(static_cast<double>(ref[i])));
                    worst = std::max(worst, err);
                    EXPECT_LE(err, 2e-6)
                        << what << " at " << i << ": " << got[i] << " vs " << ref[i];
                }
                return worst;
            };
            const double w = std::max(close(dlp.get(), lp), close(dtop.get(), top));
            std::printf("[ops] %s R=%lld: worst relative difference %.3g\n", what.c_str(),
                        static_cast<long long>(R), w);
        }
}

// The request logits rules against the CPU's, bit for bit (every step a rounded float operation
// on both; docs/numerics-cuda.md, "logits rules"): a step of four rows at mixed positions, one
// a prompt chunk with repeated ids (the marking's atomics), one not sampled (marks only); slots
// with penalties and entries, entries only (min_tokens reached by one row, not by another), rules
// off, and a token table already holding earlier counts; entries on the 4096-token slices'
// edges. The token tables must match too.
TEST(CudaOpsGpu, LogitsRulesMatchReference) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(47);
    for (const int64_t V : {int64_t{129280}, int64_t{1537}}) {
        const int S = 6, E = 9;
        // Step rows: slot, first position, length; tokens drawn from a few ids so they repeat.
        const std::vector<std::tuple<int, int64_t, int>> rows = {
            {4, 40, 1}, {1, 0, 37}, {0, 17, 1}, {5, 2, 6}};
        std::vector<int32_t> ids, tok_row, row_slot;
        std::vector<int64_t> tok_pos;
        for (size_t b = 0; b < rows.size(); ++b) {
            const auto& [slot, pos0, len] = rows[b];
            row_slot.push_back(slot);
            for (int i = 0; i < len; ++i) {
                ids.push_back(static_cast<int32_t>(rng() % 11 == 0 ? V - 1 : rng() % 23));
                tok_row.push_back(static_cast<int32_t>(b));
                tok_pos.push_back(pos0 + i);
            }
        }
        const int64_t T = static_cast<int64_t>(ids.size());
        // Sampled rows: the last tokens of rows 0, 1 and 2 (row 3 is a prompt chunk that does
        // not end its prompt).
        const std::vector<int32_t> slot = {4, 1, 0};
        const std::vector<int32_t> logit_idx = {0, 37, 38};
        const int64_t R = static_cast<int64_t>(slot.size());
        std::vector<ops::SlotRules> rules(S);
        rules[4] = {1, 1, 30, 0, 0, 1.7f, 0.6f, 0.9f};   // penalties, outputs from 30
        rules[1] = {1, 0, 38, 3, 0, 1.0f, 0.0f, 0.0f};   // entries, min_tokens 3 not reached
        rules[0] = {1, 1, 10, 4, 0, 0.8f, -0.4f, 2.0f};  // both, min_tokens 4 reached
        rules[5] = {1, 1, 0, 0, 0, 1.3f, 0.5f, 0.0f};    // marks only (not sampled)
        std::vector<ops::LogitsRuleEntry> entries(S * E);
        auto put = [&](int s, std::vector<ops::LogitsRuleEntry> e) {
            rules[s].n_entries = static_cast<int32_t>(e.size());
            std::copy(e.begin(), e.end(), entries.begin() + s * E);
        };
        const int32_t edge = V > 4096 ? 4095 : 100, next = edge + 1,
                      last = static_cast<int32_t>(V - 1);
        put(4,
            {{0, 2.5f, 0}, {3, -1.25f, 0}, {edge, 7.0f, 0}, {next, -100.0f, 0}, {last, 0.5f, 0}});
        put(1, {{2, 100.0f, 1}, {5, 0.0f, 1}, {edge, 3.0f, 0}});
        put(0, {{1, 1.0f, 1}, {7, 2.0f, 0}, {next, 4.0f, 1}, {last, -3.0f, 0}});
        std::vector<uint32_t> counts(S * V, 0);
        for (int64_t v = 0; v < 40; ++v)  // slot 0's earlier tokens
            counts[0 * V + v] = (v % 3 == 0 ? ops::kTokenSeen : 0u) + static_cast<uint32_t>(v % 4);
        auto logits = randn(R * V, rng, 4.0f);
        for (int64_t i = 0; i < R * V; i += 97) logits[i] = -logits[i];  // (both signs either way)
        Dev<int32_t> dids(*be, ids), drow(*be, tok_row), drs(*be, row_slot), dslot(*be, slot),
            didx(*be, logit_idx);
        Dev<int64_t> dpos(*be, tok_pos);
        Dev<float> dl(*be, logits);
        Dev<ops::SlotRules> drules(*be, rules);
        Dev<ops::LogitsRuleEntry> dent(*be, entries);
        Dev<uint32_t> dcounts(*be, counts);
        be->logits_rules({dids.p, dpos.p, drow.p, drs.p, dl.p, dslot.p, didx.p, drules.p, dent.p,
                          dcounts.p, T, R, V, E});
        cpu_ref::logits_rules({ids.data(), tok_pos.data(), tok_row.data(), row_slot.data(),
                               logits.data(), slot.data(), logit_idx.data(), rules.data(),
                               entries.data(), counts.data(), T, R, V, E});
        const auto got = dl.get();
        int64_t differ = 0;
        for (int64_t i = 0; i < R * V; ++i)
            differ += std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(logits[i]);
        EXPECT_EQ(differ, 0) << "V=" << V;
        EXPECT_EQ(dcounts.get(), counts) << "V=" << V;
        // The reference changed what it should: a ban, a bias, a penalty.
        EXPECT_EQ(logits[1 * V + 2], std::numeric_limits<float>::lowest());
        std::printf("[ops] logits rules V=%lld T=%lld R=%lld: %lld logits differ\n",
                    static_cast<long long>(V), static_cast<long long>(T), static_cast<long long>(R),
                    static_cast<long long>(differ));
    }
}

// Dense linear: f32 and bf16 weights, f32 and bf16 activations and outputs, a row range, strides.
TEST(CudaOpsGpu, DenseLinear) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(12);
    const int64_t N_total = 45, K = 301, M = 19, row0 = 6, N = 31, ldx = 310, ldy = 40;
    const auto wf = randn(N_total * K, rng);
    std::vector<uint16_t> wb(wf.size());
    for (size_t i = 0; i < wb.size(); ++i) wb[i] = f32_to_bf16(wf[i]);
    const auto xf = randn(M * ldx, rng);
    std::vector<uint16_t> xb(xf.size());
    for (size_t i = 0; i < xb.size(); ++i) xb[i] = f32_to_bf16(xf[i]);
    for (int wbf : {0, 1})
        for (int xbf : {0, 1})
            for (int ybf : {0, 1}) {
                QuantWeight q;
                q.rows = N_total;
                q.cols = K;
                q.dtype = wbf ? DType::kBF16 : DType::kF32;
                q.data = wbf ? static_cast<const void*>(wb.data()) : wf.data();
                // The embedding's placement keeps a bf16 weight dense (elsewhere bf16 goes to
                // the GEMV: QuantizedLinear), so this exercises the dense kernel either way.
                auto w = be->upload_weight(q, {ops::WeightRole::kEmbed, -1});
                ASSERT_TRUE(w.has_value()) << w.status().message();
                const ops::Weight rw = cpu_ref::wrap(q);
                Dev<float> dxf(*be, xf);
                Dev<uint16_t> dxb(*be, xb);
                Dev<float> dy(*be, M * ldy);
                const auto xt = xbf ? ops::ActType::kBF16 : ops::ActType::kF32;
                const auto yt = ybf ? ops::ActType::kBF16 : ops::ActType::kF32;
                be->linear({xbf ? static_cast<const void*>(dxb.p) : dxf.p, &*w, dy.p, M, N, row0,
                            ldx, ldy, xt, yt});
                std::vector<float> yref(M * ldy, 0.0f);
                cpu_ref::linear({xbf ? static_cast<const void*>(xb.data()) : xf.data(), &rw,
                                 yref.data(), M, N, row0, ldx, ldy, xt, yt});
                std::vector<float> got(M * N), ref(M * N);
                auto yg = dy.get();
                for (int64_t mm = 0; mm < M; ++mm)
                    for (int64_t n = 0; n < N; ++n) {
                        float gv = yg[mm * ldy + n], rv = yref[mm * ldy + n];
                        if (ybf) {  // bf16 outputs sit in the low half of the float's storage
                            uint16_t gb, rb;
                            std::memcpy(&gb,
                                        reinterpret_cast<const uint16_t*>(yg.data()) + mm * ldy + n,
                                        2);
                            std::memcpy(
                                &rb, reinterpret_cast<const uint16_t*>(yref.data()) + mm * ldy + n,
                                2);
                            gv = bf16_to_f32(gb);
                            rv = bf16_to_f32(rb);
                        }
                        got[mm * N + n] = gv;
                        ref[mm * N + n] = rv;
                    }
                // FP32 sums of K products against double: K * 2^-24 of sum|w x| (sum|w x| <
                // 4 * sqrt(K) * K^0.5 here); a bf16 output adds one bf16 ulp (2^-7 relative).
                const std::string what = std::string("linear w=") + (wbf ? "bf16" : "f32") +
                                         " x=" + (xbf ? "bf16" : "f32") +
                                         " y=" + (ybf ? "bf16" : "f32");
                expect_close(what.c_str(), got, ref, ybf ? 0x1p-7 : 0.0, 2e-4);
            }
}

// Score routing (gate f32, bf16 and NVFP4) and hash routing. Inputs are redrawn until the k-th
// and (k+1)-th biased scores of every token are at least 1e-3 apart on the CPU, so the FP32
// gate sums cannot reorder them: the selections must match exactly.
// An f32 gate takes the fused path (the gate product inside the routing kernel); a bf16 or NVFP4
// gate the two-kernel path (the GEMV, then the routing kernel).
enum class GateType { kF32, kBf16, kNvfp4 };

// The router's score of a gate output, as cpu_ref::route computes it: sqrt(softplus(l)).
float sqrt_softplus(float l) {
    return std::sqrt(l > 20 ? l : std::log1p(std::exp(l)));
}

void router_case(int D, GateType type, int64_t T, int E = 67) {
    auto be = make_gpu();
    std::mt19937 rng(13 + T);
    const int k = 6;
    const bool bf16_gate = type == GateType::kBf16;
    auto wf = randn(int64_t{E} * D, rng, 0.1f);
    const auto bias = randn(E, rng, 0.1f);
    std::vector<uint16_t> wb(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) {
        wb[i] = f32_to_bf16(wf[i]);
        if (bf16_gate) wf[i] = bf16_to_f32(wb[i]);
    }
    QuantWeight q;
    q.rows = E;
    q.cols = D;
    q.dtype = bf16_gate ? DType::kBF16 : DType::kF32;
    q.data = bf16_gate ? static_cast<const void*>(wb.data()) : wf.data();
    cuda::test::OwnedWeight ow;
    if (type == GateType::kNvfp4) {
        ow = cuda::test::random_weight(cuda::test::TestFormat::kNvfp4, E, D, rng);
        q = ow.w;
    }
    const ops::Weight rw = cpu_ref::wrap(q);
    auto w = be->upload_weight(q, {ops::WeightRole::kRouter});
    ASSERT_TRUE(w.has_value());
    std::vector<float> x(T * D);
    for (int64_t t = 0; t < T; ++t) {
        for (int attempt = 0;; ++attempt) {
            ASSERT_LT(attempt, 1000);
            const auto row = randn(D, rng);
            std::vector<float> l(E), s(E);
            cpu_ref::linear({row.data(), &rw, l.data(), 1, E});
            for (int e = 0; e < E; ++e) s[e] = sqrt_softplus(l[e]) + bias[e];
            std::sort(s.begin(), s.end(), std::greater<float>());
            if (s[k - 1] - s[k] >= 1e-3f) {
                std::copy(row.begin(), row.end(), x.begin() + t * D);
                break;
            }
        }
    }
    std::vector<int32_t> ids(T), tid2eid(50 * k);
    for (auto& i : ids) i = static_cast<int32_t>(rng() % 50);
    for (auto& e : tid2eid) e = static_cast<int32_t>(rng() % E);
    Dev<float> dx(*be, x), dbias(*be, bias), dlog(*be, T * E), dwt(*be, T * k);
    Dev<int32_t> dids(*be, ids), dtab(*be, tid2eid), dsel(*be, T * k);
    for (const bool hash : {false, true})
        for (const bool cleared : {false, true}) {
            std::vector<float> rlog(T * E), rwt(T * k);
            std::vector<int32_t> rsel(T * k);
            // Logits cleared earlier in the step (RouterArgs::logits_cleared), else garbage there.
            be->fill(dlog.p, cleared ? 0.0f : 7.0f, dlog.n);
            be->router({dx.p, &*w, hash ? nullptr : dbias.p, hash ? dtab.p : nullptr, dids.p,
                        dlog.p, dsel.p, dwt.p, T, E, k, 2.5f, cleared});
            cpu_ref::router({x.data(), &rw, hash ? nullptr : bias.data(),
                             hash ? tid2eid.data() : nullptr, ids.data(), rlog.data(), rsel.data(),
                             rwt.data(), T, E, k, 2.5f});
            const char* gate = type == GateType::kF32    ? "f32"
                               : type == GateType::kBf16 ? "bf16"
                                                         : "nvfp4";
            const std::string what = std::string("router ") + gate +
                                     " gate, T=" + std::to_string(T) + ", " +
                                     (hash ? "hash weights" : "score weights") +
                                     (cleared ? ", logits cleared before" : "");
            EXPECT_EQ(dsel.get(), rsel) << what;
            // The logits (the op writes its scratch): FP32 sums of D products, against the
            // reference's; ~1e-6 relative of sum |w x| (docs/numerics-cuda.md, router).
            expect_close((what + ", logits").c_str(), dlog.get(), rlog, 1e-4, 5e-4);
            // The weights inherit the gate's FP32 error through sqrt-softplus: relative 1e-5,
            // 4e-5 at 4096 columns (session 42 measured 1.3e-5 on a hash-routed bf16 case: the
            // sums' rounding grows with D, and a hash-routed weight is a logit's own share).
            expect_close(what.c_str(), dwt.get(), rwt, D > 1024 ? 4e-5 : 1e-5, 1e-7);
        }
}

TEST(CudaOpsGpu, RouterMatchesSelections) {
    DSV4_REQUIRE_GPU();
    router_case(129, GateType::kF32, 19);
    router_case(132, GateType::kBf16, 19);
    router_case(192, GateType::kNvfp4, 19);
}
// Decode steps (1, 3 and 8 tokens), every gate type, rows on and off 16 bytes, and a gate of
// 4096 columns.
TEST(CudaOpsGpu, RouterDecodeSteps) {
    DSV4_REQUIRE_GPU();
    for (const int64_t T : {1, 3, 8}) {
        router_case(128, GateType::kF32, T);
        router_case(136, GateType::kBf16, T);
        router_case(192, GateType::kNvfp4, T);
        router_case(129, GateType::kF32, T);
        router_case(132, GateType::kBf16, T);
    }
    router_case(4096, GateType::kF32, 1);
    // V4-Flash's gate (256 experts, D 4096): NVFP4 and bf16 on the GEMV, f32 in the one-block
    // kernel.
    router_case(4096, GateType::kNvfp4, 1, 256);
    router_case(4096, GateType::kBf16, 1, 256);
    router_case(4096, GateType::kF32, 1, 256);
}

// The routing kernel's selection alone (logits given), against cpu_ref::route: logits and bias
// drawn from a few values, so that many biased scores tie exactly (the lower expert first) and
// the k-th often sits inside a tie; 1..32 experts chosen out of 1..3000 (several experts a
// thread, warps without k candidates), 1 and 5 tokens. Equal biased scores on the CPU come only
// from equal (logit, bias) pairs (checked), which the GPU maps to equal scores too, so the
// selections must match exactly; the weights carry expf / log1pf's few ulps (relative 1e-6).
TEST(CudaOpsGpu, RouteSelectsTiesAndManyExperts) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    cuda::CudaStream s = cuda::CudaStream::create();
    std::mt19937 rng(29);
    const float levels[] = {-1.5f, -0.25f, 0.0f, 0.5f, 1.0f, 2.25f};
    const float biases[] = {0.0f, 0.0f, 0.125f, -0.375f};
    // Equal biased scores only from equal (logit, bias) pairs.
    for (const float la : levels)
        for (const float ba : biases)
            for (const float lb : levels)
                for (const float bb : biases)
                    if (sqrt_softplus(la) + ba == sqrt_softplus(lb) + bb) {
                        ASSERT_TRUE(la == lb && ba == bb);
                    }
    // skew: the experts of the kernel's warp 0 (e % 256 < 32) draw only the top two levels and
    // the others the lower four, so that (k <= 8) hundreds of keys pass the threshold of the
    // warps' best keys: 3000 experts, more than the kernel holds (it falls back to its rounds of
    // warp arg-maxes, as for k > 8); 1500, ~200 candidates ranked.
    struct Case {
        int E, k;
        bool skew;
    };
    for (const auto& [E, k, skew] : std::vector<Case>{{1, 1, false},
                                                      {8, 8, false},
                                                      {67, 6, false},
                                                      {256, 6, false},
                                                      {256, 32, false},
                                                      {300, 7, false},
                                                      {1500, 16, false},
                                                      {40, 32, false},
                                                      {1500, 6, false},
                                                      {3000, 6, true},
                                                      {1500, 8, true}}) {
        for (const int64_t T : {1, 5}) {
            SCOPED_TRACE(std::to_string(E) + " experts, k " + std::to_string(k) + ", " +
                         std::to_string(T) + " tokens" + (skew ? ", skewed" : ""));
            std::vector<float> logits(static_cast<size_t>(T * E)), bias(static_cast<size_t>(E));
            for (size_t i = 0; i < logits.size(); ++i)
                logits[i] = !skew                                   ? levels[rng() % 6]
                            : i % static_cast<size_t>(E) % 256 < 32 ? levels[4 + rng() % 2]
                                                                    : levels[rng() % 4];
            for (auto& v : bias) v = biases[rng() % 4];
            Dev<float> d_log(*be, logits), d_bias(*be, bias), d_w(*be, T * k);
            Dev<int32_t> d_sel(*be, T * k);
            be->synchronize();
            ops::RouteArgs a{d_log.p, d_bias.p, nullptr, nullptr, d_sel.p, d_w.p, T, E, k, 1.5f};
            cuda::launch_route(a, s.get());
            s.synchronize();
            ASSERT_EQ(cudaGetLastError(), cudaSuccess);
            std::vector<int32_t> want_sel(static_cast<size_t>(T * k));
            std::vector<float> want_w(static_cast<size_t>(T * k));
            cpu_ref::route({logits.data(), bias.data(), nullptr, nullptr, want_sel.data(),
                            want_w.data(), T, E, k, 1.5f});
            EXPECT_EQ(d_sel.get(), want_sel);
            expect_close("route weights", d_w.get(), want_w, 1e-6, 1e-7);
        }
    }
}

// Every checkpoint format through the weight GEMV: whole weights and row ranges on 64-row
// blocks, 1..37 tokens (past the GEMV's 16 a launch), strided x and y; and 256..300 tokens on the
// tensor-core path. Oracle: the products of
// the dequantized weights in double; bound (docs/numerics-cuda.md): (2e-5 + 2^-16) of the sum
// of |products| (f32 activations split into bf16 hi + lo).
TEST(CudaOpsGpu, QuantizedLinear) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(16);
    using cuda::test::TestFormat;
    const int64_t N_total = 200, K = 352;
    for (TestFormat f : {TestFormat::kNvfp4, TestFormat::kMxfp4, TestFormat::kFp8E8m0,
                         TestFormat::kFp8F32, TestFormat::kBf16}) {
        const auto ow = cuda::test::random_weight(f, N_total, K, rng);
        auto w = be->upload_weight(ow.w, {ops::WeightRole::kAttention, 0});
        ASSERT_TRUE(w.has_value()) << w.status().message();
        struct Case {
            int64_t M, row0, N, ldx, ldy;
        };
        // 256 rows and more: the tensor-core path (gemm_op.h), except for FP8 with f32 block
        // scales, which it cannot reproduce exactly (the GEMV then).
        for (const Case& c :
             {Case{1, 0, 200, K, 200}, Case{5, 64, 136, K + 4, 150}, Case{16, 128, 64, K, 64},
              Case{37, 0, 200, K + 8, 203}, Case{256, 0, 200, K, 200},
              Case{277, 64, 136, K + 4, 150}, Case{300, 128, 72, K + 8, 75}}) {
            const auto x = randn(c.M * c.ldx, rng);
            Dev<float> dx(*be, x), dy(*be, c.M * c.ldy);
            const int64_t runs = cuda_gemm_runs(*be);
            be->linear({dx.p, &*w, dy.p, c.M, c.N, c.row0, c.ldx, c.ldy});
            EXPECT_EQ(cuda_gemm_runs(*be) - runs, c.M >= 256 && f != TestFormat::kFp8F32 ? 1 : 0)
                << "the tensor-core path from 256 rows";
            int64_t bad = 0;
            const double worst =
                worst_over_bound(ow.w, x, c.M, K, c.ldx, dy.get(), c.ldy, c.row0, c.N, &bad);
            std::printf("[ops] linear %-8s M=%-3lld rows [%lld, %lld) worst err/tol = %.3g\n",
                        cuda::test::test_format_name(f), static_cast<long long>(c.M),
                        static_cast<long long>(c.row0), static_cast<long long>(c.row0 + c.N),
                        worst);
            EXPECT_EQ(bad, 0) << cuda::test::test_format_name(f) << " M=" << c.M;
        }
    }
}

// wo_a of a small model: row ranges of 32 rows (off the GEMV's 64-row blocks) are served from
// an f32 copy, dequantized exactly at load; the products are f32 like the reference's.
TEST(CudaOpsGpu, LinearRowRangesOffTheGemvBlocks) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(17);
    const int64_t Ro = 32, g = 3, K = 128, M = 19;
    const auto ow = cuda::test::random_weight(cuda::test::TestFormat::kFp8E8m0, g * Ro, K, rng);
    ops::WeightPlacement at{ops::WeightRole::kAttention, 0};
    at.row_block = Ro;
    auto w = be->upload_weight(ow.w, at);
    ASSERT_TRUE(w.has_value()) << w.status().message();
    const ops::Weight rw = cpu_ref::wrap(ow.w);
    const auto x = randn(M * g * K, rng);
    Dev<float> dx(*be, x), dy(*be, M * g * Ro);
    std::vector<float> ref(M * g * Ro);
    for (int64_t j = 0; j < g; ++j) {
        be->linear({dx.p + j * K, &*w, dy.p + j * Ro, M, Ro, j * Ro, g * K, g * Ro});
        cpu_ref::linear({x.data() + j * K, &rw, ref.data() + j * Ro, M, Ro, j * Ro, g * K, g * Ro});
    }
    expect_close("linear wo_a row ranges", dy.get(), ref, 1e-5, 1e-5 * max_abs(ref));
}

// Grouped products in one op (wo_a): group j reads x columns [j*K, (j+1)*K) and weight rows
// [row0 + j*N, ...), writes y columns [j*N, ...). On the GEMV's 64-row blocks one launch; off
// them (N = 32) the per-group fallback. Against cpu_ref::linear with the same groups.
TEST(CudaOpsGpu, GroupedLinear) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(19);
    using cuda::test::TestFormat;
    const int64_t K = 352;
    for (TestFormat f :
         {TestFormat::kNvfp4, TestFormat::kMxfp4, TestFormat::kFp8E8m0, TestFormat::kBf16}) {
        struct Case {
            int64_t g, N, M;
        };
        for (const Case& c : {Case{4, 128, 1}, Case{8, 64, 5}, Case{3, 192, 19}, Case{3, 32, 2}}) {
            const auto ow = cuda::test::random_weight(f, c.g * c.N, K, rng);
            ops::WeightPlacement at{ops::WeightRole::kAttention, 0};
            if (c.N % 64 != 0) at.row_block = c.N;
            auto w = be->upload_weight(ow.w, at);
            ASSERT_TRUE(w.has_value()) << w.status().message();
            const ops::Weight rw = cpu_ref::wrap(ow.w);
            const int64_t ldx = c.g * K + 8, ldy = c.g * c.N + 3;
            const auto x = randn(c.M * ldx, rng);
            Dev<float> dx(*be, x), dy(*be, c.M * ldy);
            std::vector<float> ref(c.M * ldy, 0.0f);
            const ops::ActType f32 = ops::ActType::kF32;
            be->linear({dx.p, &*w, dy.p, c.M, c.N, 0, ldx, ldy, f32, f32, false, false,
                        static_cast<int>(c.g)});
            cpu_ref::linear({x.data(), &rw, ref.data(), c.M, c.N, 0, ldx, ldy, f32, f32, false,
                             false, static_cast<int>(c.g)});
            auto y = dy.get();
            for (int64_t m = 0; m < c.M; ++m)  // the padding columns are not written
                for (int64_t n = c.g * c.N; n < ldy; ++n) y[m * ldy + n] = 0.0f;
            // The GEMV's f32 products are good to ~2^-16 of sum |w x| (docs/numerics-cuda.md).
            expect_close("grouped linear", y, ref, 0.0, 2e-4 * max_abs(ref));
        }
    }
}

// A linear pair (LinearArgs::then: wo_a's groups, then wo_b reading their output) in every
// GEMV format, with the GEMV chain off (two launches) and on (one launch, gemv_chain.h: up to 4
// tokens), against cpu_ref::linear of the pair; outputs cleared earlier (y_cleared), as the
// step's q-lora norm clears them; one pair with wo_a's output rows padded. 5 tokens run as two
// launches even with the chain on.
TEST(CudaOpsGpu, LinearPairAsOneLaunch) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(23);
    using cuda::test::TestFormat;
    const int64_t K = 352, D = 200;
    const ops::ActType f32 = ops::ActType::kF32;
    for (TestFormat f : {TestFormat::kNvfp4, TestFormat::kMxfp4, TestFormat::kFp8E8m0,
                         TestFormat::kFp8F32, TestFormat::kBf16}) {
        struct Case {
            int64_t g, N, M;
            bool strided;  // wo_a's output rows padded
        };
        for (const Case& c : {Case{4, 128, 1, false}, Case{8, 64, 3, false}, Case{1, 256, 4, false},
                              Case{3, 192, 5, false}, Case{2, 64, 2, true}}) {
            const auto oa = cuda::test::random_weight(f, c.g * c.N, K, rng);
            const auto ob = cuda::test::random_weight(f, D, c.g * c.N, rng);
            auto wa = be->upload_weight(oa.w, {ops::WeightRole::kAttention, 0});
            auto wb = be->upload_weight(ob.w, {ops::WeightRole::kAttention, 0});
            ASSERT_TRUE(wa.has_value() && wb.has_value());
            const ops::Weight ra = cpu_ref::wrap(oa.w), rb = cpu_ref::wrap(ob.w);
            const int64_t ldx = c.g * K, ldu = c.g * c.N + (c.strided ? 4 : 0);
            const auto x = randn(c.M * ldx, rng);
            std::vector<float> ref_u(c.M * ldu, 0.0f), ref(c.M * D);
            const ops::LinearArgs rb_args{ref_u.data(), &rb, ref.data(), c.M, D,     0,
                                          ldu,          0,   f32,        f32, false, false};
            ops::LinearArgs ra_args{
                x.data(), &ra,   ref_u.data(),         c.M, c.N, 0, ldx, ldu, f32, f32,
                false,    false, static_cast<int>(c.g)};
            ra_args.then = &rb_args;
            cpu_ref::linear(ra_args);
            for (bool chain : {false, true}) {
                cuda_set_linear_chain(*be, chain);
                Dev<float> dx(*be, x), du(*be, c.M * ldu), dy(*be, c.M * D);  // (zeroed)
                ops::LinearArgs b_args{du.p, &*wb, dy.p, c.M, D, 0, ldu, 0, f32, f32, false, false};
                b_args.y_cleared = true;
                ops::LinearArgs a_args{dx.p,
                                       &*wa,
                                       du.p,
                                       c.M,
                                       c.N,
                                       0,
                                       ldx,
                                       ldu,
                                       f32,
                                       f32,
                                       false,
                                       false,
                                       static_cast<int>(c.g),
                                       true};
                a_args.then = &b_args;
                const int64_t runs = cuda_linear_chain_runs(*be);
                be->linear(a_args);
                const bool one_launch = chain && c.M <= 4;
                const std::string what =
                    std::string("linear pair ") + cuda::test::test_format_name(f) +
                    " g=" + std::to_string(c.g) + " M=" + std::to_string(c.M) +
                    (c.strided ? " strided" : "") + (chain ? " (chain on)" : "");
                EXPECT_EQ(cuda_linear_chain_runs(*be) - runs, one_launch ? 1 : 0) << what;
                // The GEMV's f32 products are good to ~2^-16 of sum |w x| (docs/numerics-cuda.md),
                // twice here (wo_b reads the GPU's wo_a output).
                expect_close(what.c_str(), dy.get(), ref, 0.0, 2e-4 * max_abs(ref));
            }
            cuda_set_linear_chain(*be, false);
        }
    }
}

// Projections of one x packed at load (Backend::pack_rows) and run as one linear group: every
// output against cpu_ref::linear of its own weight, with 1, 5 and 19 rows (two 16-row launches);
// the parts still work as weights of their own afterwards; nothing is packed when no two
// neighbours share a format and whole 64-row blocks; mixed formats pack in runs.
TEST(CudaOpsGpu, PackedLinearGroup) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(33);
    using cuda::test::TestFormat;
    const int64_t K = 320;
    const int64_t rows[] = {128, 64, 192};
    const ops::WeightPlacement at{ops::WeightRole::kAttention, 0};
    for (TestFormat f :
         {TestFormat::kNvfp4, TestFormat::kMxfp4, TestFormat::kFp8E8m0, TestFormat::kBf16}) {
        std::vector<cuda::test::OwnedWeight> ow;
        std::vector<ops::Weight> dw, rw;
        for (int64_t n : rows) {
            ow.push_back(cuda::test::random_weight(f, n, K, rng));
            auto w = be->upload_weight(ow.back().w, at);
            ASSERT_TRUE(w.has_value()) << w.status().message();
            dw.push_back(*w);
        }
        for (const auto& o : ow) rw.push_back(cpu_ref::wrap(o.w));
        const ops::Weight* parts[] = {&dw[0], &dw[1], &dw[2]};
        auto packed = be->pack_rows(parts);
        ASSERT_TRUE(packed.has_value()) << packed.status().message();
        ASSERT_TRUE(packed->valid()) << cuda::test::test_format_name(f);
        ASSERT_EQ(packed->rows, 384);
        for (int64_t M : {1, 5, 19}) {
            const auto x = randn(M * K, rng);
            Dev<float> dx(*be, x);
            const auto y = run_linear_group(*be, *packed, dw, dx.p, M);
            for (int i = 0; i < 3; ++i) {
                std::vector<float> ref(M * rows[i]);
                cpu_ref::linear({x.data(), &rw[i], ref.data(), M, rows[i]});
                const std::string what = std::string("packed ") + cuda::test::test_format_name(f) +
                                         " M=" + std::to_string(M) + " part " + std::to_string(i);
                expect_close(what.c_str(), y[i], ref, 0.0, 2e-4 * max_abs(ref));
                // The part alone, now reading its range of the packed weight.
                Dev<float> y1(*be, M * rows[i]);
                be->linear({dx.p, &dw[i], y1.p, M, rows[i]});
                expect_close((what + " alone").c_str(), y1.get(), ref, 0.0, 2e-4 * max_abs(ref));
            }
        }
    }
    // Refused: a part of 80 rows (off the 64-row blocks), and parts in two formats.
    auto a = cuda::test::random_weight(TestFormat::kNvfp4, 64, K, rng),
         b = cuda::test::random_weight(TestFormat::kNvfp4, 80, K, rng),
         c = cuda::test::random_weight(TestFormat::kMxfp4, 64, K, rng);
    auto wa = be->upload_weight(a.w, at), wb = be->upload_weight(b.w, at),
         wc = be->upload_weight(c.w, at);
    ASSERT_TRUE(wa && wb && wc);
    const ops::Weight* off[] = {&*wa, &*wb};
    const ops::Weight* mixed[] = {&*wa, &*wc};
    auto p1 = be->pack_rows(off), p2 = be->pack_rows(mixed);
    ASSERT_TRUE(p1.has_value() && p2.has_value());
    EXPECT_FALSE(p1->valid());
    EXPECT_FALSE(p2->valid());
    // Runs of one format packed apart (the release format's FP8 attention projections, then its
    // BF16 compressor and indexer ones): NVFP4 x 2, MXFP4 x 2, BF16 alone; 1, 19 and 260 rows
    // (the last on the tensor-core path).
    const TestFormat fs[] = {TestFormat::kNvfp4, TestFormat::kNvfp4, TestFormat::kMxfp4,
                             TestFormat::kMxfp4, TestFormat::kBf16};
    const int64_t rs[] = {128, 64, 64, 192, 64};
    std::vector<cuda::test::OwnedWeight> ow;
    std::vector<ops::Weight> dw, rw;
    for (int i = 0; i < 5; ++i) {
        ow.push_back(cuda::test::random_weight(fs[i], rs[i], K, rng));
        auto w = be->upload_weight(ow.back().w, at);
        ASSERT_TRUE(w.has_value()) << w.status().message();
        dw.push_back(*w);
    }
    for (const auto& o : ow) rw.push_back(cpu_ref::wrap(o.w));
    const ops::Weight* mixed_runs[] = {&dw[0], &dw[1], &dw[2], &dw[3], &dw[4]};
    auto packed = be->pack_rows(mixed_runs);
    ASSERT_TRUE(packed.has_value() && packed->valid());
    for (int64_t M : {1, 19, 260}) {
        const auto x = randn(M * K, rng);
        Dev<float> dx(*be, x);
        // With the group's clears (LinearGroupArgs::clear): ranges of a buffer of ones at odd
        // offsets, one longer than the GEMV grid has threads, one of a single float; a gap in
        // the list. The launch that takes them (M 1 and 19: the first GEMV; 260: memsets after
        // the tensor-core products) leaves every other float as it was.
        std::vector<float> ones(60000, 1.0f), want = ones;
        Dev<float> buf(*be, ones);
        const std::pair<int64_t, int64_t> ranges[] = {
            {1, 40001}, {40003, 5}, {0, 0}, {40010, 8191}, {48202, 1}};
        ops::Clear clears[ops::kMaxClears];
        for (int i = 0; i < ops::kMaxClears; ++i) {
            const auto [first, n] = ranges[i];
            if (n == 0) continue;
            clears[i] = {buf.p + first, n};
            std::fill(want.begin() + first, want.begin() + first + n, 0.0f);
        }
        const auto y = run_linear_group(*be, *packed, dw, dx.p, M, &clears);
        EXPECT_EQ(buf.get(), want) << "packed runs M=" << M << ": the clears";
        for (int i = 0; i < 5; ++i) {
            std::vector<float> ref(M * rs[i]);
            cpu_ref::linear({x.data(), &rw[i], ref.data(), M, rs[i]});
            const std::string what =
                "packed runs M=" + std::to_string(M) + " part " + std::to_string(i);
            expect_close(what.c_str(), y[i], ref, 0.0, 2e-4 * max_abs(ref));
        }
    }
}

// The magnitude an MoE output's error scales with: the GEMV's products are good to ~2^-16 of
// sum |w x| (docs/numerics-cuda.md), so w1/w3's errors reach h = silu(g) u as
// |silu'(g)| |u| sum|w1 x| + |silu(g)| sum|w3 x| (|silu'| < 1.1), and w2 carries them with h's own
// rounding: A[t, o] = sum over the token's experts (and the shared one, weight 1) of
// weight * sum_i |w2[o, i]| (|h_i| + 1.1 |u_i| sum|w1_i x| + |silu(g_i)| sum|w3_i x|), in double.
// Relative to max |ref| instead, outputs whose terms cancel hard (FP8 weights with E8M0 scales
// spread over many binades) fail a bound the arithmetic keeps.
std::vector<double> moe_magnitude(const std::vector<float>& x, const int32_t* sel, const float* wt,
                                  const cpu_ref::CpuExperts& ex, const QuantWeight* s1,
                                  const QuantWeight* s3, const QuantWeight* s2, int64_t T, int D,
                                  int I, int k, float limit) {
    std::vector<double> A(static_cast<size_t>(T) * D, 0.0);
    std::vector<float> row(std::max(D, I));
    auto expert = [&](const QuantWeight& w1, const QuantWeight& w3, const QuantWeight& w2,
                      int64_t t, double weight) {
        const float* xt = x.data() + t * D;
        std::vector<double> H(I);
        for (int i = 0; i < I; ++i) {
            double g = 0, u = 0, a1 = 0, a3 = 0;
            dequant_row(w1, i, row.data());
            for (int d = 0; d < D; ++d) {
                g += double{row[d]} * xt[d];
                a1 += std::fabs(double{row[d]} * xt[d]);
            }
            dequant_row(w3, i, row.data());
            for (int d = 0; d < D; ++d) {
                u += double{row[d]} * xt[d];
                a3 += std::fabs(double{row[d]} * xt[d]);
            }
            g = std::min(g, double{limit});
            u = std::clamp(u, -double{limit}, double{limit});
            const double silu = g / (1.0 + std::exp(-g));
            H[i] = std::fabs(silu * u) + 1.1 * std::fabs(u) * a1 + std::fabs(silu) * a3;
        }
        for (int o = 0; o < D; ++o) {
            dequant_row(w2, o, row.data());
            double s = 0;
            for (int i = 0; i < I; ++i) s += std::fabs(row[i]) * H[i];
            A[t * D + o] += weight * s;
        }
    };
    for (int64_t t = 0; t < T; ++t) {
        for (int j = 0; j < k; ++j) {
            const int e = sel[t * k + j];
            expert(ex.w1[e], ex.w3[e], ex.w2[e], t, wt[t * k + j]);
        }
        if (s1 != nullptr) expert(*s1, *s3, *s2, t, 1.0);
    }
    return A;
}

// A dense f32 weight over v (which must outlive it).
QuantWeight dense(const std::vector<float>& v, int64_t rows, int64_t cols) {
    QuantWeight q;
    q.rows = rows;
    q.cols = cols;
    q.data = v.data();
    return q;
}

// The routed experts (+ the shared expert) in every format against cpu_ref::moe: 21 tokens, 3 of
// 9 experts each, one expert chosen by most tokens and one by none (grouped by expert), and the
// first 2 tokens (one row per pair). The bound is 2e-4 of moe_magnitude per output (~13x the
// GEMV's 2^-16, for the roundings of h and the sums after it).
TEST(CudaOpsGpu, MoeEveryFormat) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(18);
    using cuda::test::TestFormat;
    const int E = 9, I = 64, D = 256, k = 3;
    const int64_t T = 21;
    const auto x = randn(T * D, rng);
    std::vector<int32_t> sel(T * k);
    std::vector<float> wt(T * k);
    for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> order = {0, 1, 2, 3, 4, 5, 6, 7};  // expert 8 is never chosen
        std::shuffle(order.begin() + 1, order.end(), rng);
        if (t % 4 == 3) std::swap(order[0], order[3]);  // expert 0 by most tokens, not all
        for (int j = 0; j < k; ++j) {
            sel[t * k + j] = order[j];
            wt[t * k + j] = 0.2f + 0.3f * static_cast<float>(rng() % 100) / 100.0f;
        }
    }
    // The shared expert: dense f32.
    const auto s1v = randn(int64_t{I} * D, rng, 0.05f), s3v = randn(int64_t{I} * D, rng, 0.05f),
               s2v = randn(int64_t{D} * I, rng, 0.05f);
    const QuantWeight s1 = dense(s1v, I, D), s3 = dense(s3v, I, D), s2 = dense(s2v, D, I);
    auto h1 = be->upload_weight(s1, {ops::WeightRole::kSharedExpert, 0});
    auto h3 = be->upload_weight(s3, {ops::WeightRole::kSharedExpert, 0});
    auto h2 = be->upload_weight(s2, {ops::WeightRole::kSharedExpert, 0});
    ASSERT_TRUE(h1 && h3 && h2);
    const ops::Weight r1 = cpu_ref::wrap(s1), r3 = cpu_ref::wrap(s3), r2 = cpu_ref::wrap(s2);
    Dev<float> dx(*be, x), dwt(*be, wt), shared(*be, T * (2 * I + D)),
        routed(*be, ops::moe_routed_scratch_floats(T, k, E, D, I)), out(*be, T * D);
    Dev<int32_t> dsel(*be, sel);
    for (int fi = -1; fi < 5; ++fi) {
        // -1: dense f32 experts (transformers-saved checkpoints).
        std::vector<cuda::test::OwnedWeight> ow;
        std::vector<std::vector<float>> dv;
        cpu_ref::CpuExperts ce;
        for (int e = 0; e < E; ++e)
            for (int p = 0; p < 3; ++p) {
                const int64_t rows = p == 2 ? D : I, cols = p == 2 ? I : D;
                if (fi < 0) {
                    dv.push_back(randn(rows * cols, rng, 0.05f));
                } else {
                    ow.push_back(
                        cuda::test::random_weight(static_cast<TestFormat>(fi), rows, cols, rng));
                }
            }
        for (int e = 0; e < E; ++e)
            for (int p = 0; p < 3; ++p) {
                const int64_t rows = p == 2 ? D : I, cols = p == 2 ? I : D;
                const QuantWeight q = fi < 0 ? dense(dv[e * 3 + p], rows, cols) : ow[e * 3 + p].w;
                (p == 0 ? ce.w1 : p == 1 ? ce.w3 : ce.w2).push_back(q);
            }
        const char* name =
            fi < 0 ? "f32" : cuda::test::test_format_name(static_cast<TestFormat>(fi));
        const ops::ExpertWeights rex = cpu_ref::wrap(ce, I, D);
        // The shared expert dense f32 (kept apart), or in the experts' format (then stacked as
        // expert E of the GEMV stacks, run in the routed launches at one token).
        for (bool same_format : {false, true}) {
            if (same_format && fi < 0) continue;
            // (A generator of their own: the routed draws do not depend on whether the shared
            // expert is stacked.)
            std::mt19937 rng_shared(100 + fi);
            std::vector<cuda::test::OwnedWeight> os;
            if (same_format)
                for (int p = 0; p < 3; ++p)
                    os.push_back(cuda::test::random_weight(
                        static_cast<TestFormat>(fi), p == 2 ? D : I, p == 2 ? I : D, rng_shared));
            std::vector<ops::Weight> hs;
            for (const auto& o : os) {
                auto h = be->upload_weight(o.w, {ops::WeightRole::kSharedExpert, 0});
                ASSERT_TRUE(h.has_value()) << h.status().message();
                hs.push_back(*h);
            }
            const ops::Weight *g1 = same_format ? &hs[0] : &*h1, *g3 = same_format ? &hs[1] : &*h3,
                              *g2 = same_format ? &hs[2] : &*h2;
            std::vector<ops::Weight> rs;
            for (const auto& o : os) rs.push_back(cpu_ref::wrap(o.w));
            const ops::Weight *q1 = same_format ? &rs[0] : &r1, *q3 = same_format ? &rs[1] : &r3,
                              *q2 = same_format ? &rs[2] : &r2;
            auto ex = be->upload_experts(ce.w1.data(), ce.w3.data(), ce.w2.data(), E,
                                         {ops::WeightRole::kExperts, 0}, {g1, g3, g2});
            ASSERT_TRUE(ex.has_value()) << name << ": " << ex.status().message();
            // 21 tokens: the pairs grouped by expert (prefill); 11, 5 and 2 tokens: one
            // expert's pairs in groups of up to 4 (decode batches of at least E / 3 pairs; the
            // busiest expert's 11 pairs in three), and again one row a pair
            // (cuda_set_moe_compact off: the smaller batches' path); 1 token: the groups read x
            // itself and w2 adds into the output (no combine), and again as the SwiGLU chain
            // (cuda_set_moe_chain: w1|w3, the SwiGLU and w2 in one launch; FP4 experts).
            for (int64_t Tc : {T, int64_t{11}, int64_t{5}, int64_t{2}, int64_t{1}})
                for (int variant = 0; variant < 6; ++variant) {
                    const bool with_shared = (variant & 1) != 0, chain = variant >= 4;
                    const bool compact = variant < 2 || chain;
                    if (!compact && (Tc == T || Tc == 1)) continue;  // (no choice there)
                    if (chain && Tc != 1) continue;
                    cuda_set_moe_compact(*be, compact);
                    cuda_set_moe_chain(*be, chain);
                    const int64_t chain_runs = cuda_moe_chain_runs(*be);
                    ASSERT_EQ(ops::moe_grouped_by_expert(Tc, k, E), Tc == T);
                    be->moe({dx.p, dsel.p, dwt.p, &*ex, with_shared ? g1 : nullptr,
                             with_shared ? g3 : nullptr, with_shared ? g2 : nullptr, shared.p,
                             routed.p, out.p, Tc, D, I, E, k, 7.0f});
                    std::vector<float> ref(Tc * D), scratch(Tc * (2 * I + D));
                    cpu_ref::moe({x.data(), sel.data(), wt.data(), &rex, with_shared ? q1 : nullptr,
                                  with_shared ? q3 : nullptr, with_shared ? q2 : nullptr,
                                  scratch.data(), nullptr, ref.data(), Tc, D, I, E, k, 7.0f});
                    const std::string what =
                        std::string("moe ") + name + " T=" + std::to_string(Tc) +
                        (with_shared ? (same_format ? " + stacked shared" : " + shared") : "") +
                        (compact ? "" : " (a row a pair)") + (chain ? " (SwiGLU chain)" : "");
                    if (chain) {
                        const bool fp4 = fi == static_cast<int>(TestFormat::kNvfp4) ||
                                         fi == static_cast<int>(TestFormat::kMxfp4);
                        EXPECT_EQ(cuda_moe_chain_runs(*be) - chain_runs, fp4 ? 1 : 0) << what;
                    }
                    auto got = out.get();
                    got.resize(Tc * D);
                    const QuantWeight* sq[3] = {nullptr, nullptr, nullptr};
                    if (with_shared)
                        for (int p = 0; p < 3; ++p)
                            sq[p] = same_format ? &os[p].w : p == 0 ? &s1 : p == 1 ? &s3 : &s2;
                    auto tol = moe_magnitude(x, sel.data(), wt.data(), ce, sq[0], sq[1], sq[2], Tc,
                                             D, I, k, 7.0f);
                    for (auto& v : tol) v *= 2e-4;
                    expect_within(what.c_str(), got, ref, tol);
                }
            cuda_set_moe_chain(*be, false);
        }
    }
}

// Expert parallelism on one GPU (docs/parallel.md): the routed experts split over 2 and 3
// ranks, each rank's share uploaded alone (ExpertWeights::first), rank 0 also holding the shared
// expert (stacked in the experts' format), each share's MoE run with the global selections
// (the pairs of other ranks' experts add nothing), and the shares' outputs summed on the host
// (what the NCCL sum does across GPUs): the unsplit CPU MoE within MoeEveryFormat's bound, at
// 21 tokens (grouped by expert), 2 and 1 (the direct path; rank 0's stacked shared expert).
TEST(CudaOpsGpu, MoeRankShares) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(57);
    using cuda::test::TestFormat;
    const int E = 9, I = 64, D = 256, k = 3;
    const int64_t T = 21;
    const auto x = randn(T * D, rng);
    std::vector<int32_t> sel(T * k);
    std::vector<float> wt(T * k);
    for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> order = {0, 1, 2, 3, 4, 5, 6, 7, 8};
        std::shuffle(order.begin(), order.end(), rng);
        for (int j = 0; j < k; ++j) {
            sel[t * k + j] = order[j];
            wt[t * k + j] = 0.2f + 0.3f * static_cast<float>(rng() % 100) / 100.0f;
        }
    }
    std::vector<cuda::test::OwnedWeight> ow;
    cpu_ref::CpuExperts ce;
    for (int e = 0; e < E; ++e)
        for (int p = 0; p < 3; ++p)
            ow.push_back(
                cuda::test::random_weight(TestFormat::kNvfp4, p == 2 ? D : I, p == 2 ? I : D, rng));
    for (int e = 0; e < E; ++e) {
        ce.w1.push_back(ow[e * 3].w);
        ce.w3.push_back(ow[e * 3 + 1].w);
        ce.w2.push_back(ow[e * 3 + 2].w);
    }
    std::vector<cuda::test::OwnedWeight> os;
    for (int p = 0; p < 3; ++p)
        os.push_back(
            cuda::test::random_weight(TestFormat::kNvfp4, p == 2 ? D : I, p == 2 ? I : D, rng));
    std::vector<ops::Weight> hs, rs;
    for (const auto& o : os) {
        auto h = be->upload_weight(o.w, {ops::WeightRole::kSharedExpert, 0});
        ASSERT_TRUE(h.has_value()) << h.status().message();
        hs.push_back(*h);
        rs.push_back(cpu_ref::wrap(o.w));
    }
    const ops::ExpertWeights rex = cpu_ref::wrap(ce, I, D);
    Dev<float> dx(*be, x), dwt(*be, wt), shared(*be, T * (2 * I + D)),
        routed(*be, ops::moe_routed_scratch_floats(T, k, E, D, I)), out(*be, T * D);
    Dev<int32_t> dsel(*be, sel);
    for (int ranks : {2, 3}) {
        std::vector<ops::ExpertWeights> shares;
        for (int r = 0; r < ranks; ++r) {
            const ops::ExpertShard sh = ops::expert_shard(E, r, ranks);
            Backend::SharedExpert se;
            if (r == 0) se = {&hs[0], &hs[1], &hs[2]};
            auto ex = be->upload_experts(ce.w1.data() + sh.first, ce.w3.data() + sh.first,
                                         ce.w2.data() + sh.first, sh.count,
                                         {ops::WeightRole::kExperts, 0}, se);
            ASSERT_TRUE(ex.has_value()) << ex.status().message();
            ex->first = sh.first;
            shares.push_back(*ex);
        }
        ASSERT_TRUE(be->prepare_steps(T).is_ok());
        for (int64_t Tc : {T, int64_t{2}, int64_t{1}}) {
            std::vector<float> sum(Tc * D, 0.0f);
            for (int r = 0; r < ranks; ++r) {
                const bool with_shared = r == 0;
                be->moe({dx.p, dsel.p, dwt.p, &shares[r], with_shared ? &hs[0] : nullptr,
                         with_shared ? &hs[1] : nullptr, with_shared ? &hs[2] : nullptr, shared.p,
                         routed.p, out.p, Tc, D, I, E, k, 7.0f});
                const auto got = out.get();
                for (int64_t i = 0; i < Tc * D; ++i) sum[i] += got[i];
            }
            std::vector<float> ref(Tc * D), scratch(Tc * (2 * I + D));
            cpu_ref::moe({x.data(), sel.data(), wt.data(), &rex, &rs[0], &rs[1], &rs[2],
                          scratch.data(), nullptr, ref.data(), Tc, D, I, E, k, 7.0f});
            const QuantWeight* sq[3] = {&os[0].w, &os[1].w, &os[2].w};
            auto tol =
                moe_magnitude(x, sel.data(), wt.data(), ce, sq[0], sq[1], sq[2], Tc, D, I, k, 7.0f);
            for (auto& v : tol) v *= 2e-4;
            const std::string what =
                "moe " + std::to_string(ranks) + " rank shares T=" + std::to_string(Tc);
            expect_within(what.c_str(), sum, ref, tol);
        }
    }
}

// The MoE with its routing inside (MoeArgs::route: exactly router, then moe): NVFP4 experts
// with the shared expert stacked (one token: the routing kernel also writes the groups' ids and
// scales and clears h and out, cuda::MoePrep) or dense f32 (not stacked: the router runs
// first), at 1, 2 and 21 tokens. Hash routing with a bf16 gate: the selections are the table's
// (exact), the weights carry the gate's FP32 error (relative 1e-5, as RouterMatchesSelections),
// the outputs the bound of MoeEveryFormat. The outputs and h hold garbage before each call.
TEST(CudaOpsGpu, MoeRoutesFirst) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(31);
    using cuda::test::TestFormat;
    const int E = 9, I = 64, D = 256, k = 3, V = 40;
    const int64_t T = 21;
    const auto x = randn(T * D, rng);
    std::vector<int32_t> ids(T), tid2eid(int64_t{V} * k);
    for (auto& i : ids) i = static_cast<int32_t>(rng() % V);
    for (int v = 0; v < V; ++v) {  // k distinct experts a token id
        std::vector<int32_t> order = {0, 1, 2, 3, 4, 5, 6, 7, 8};
        std::shuffle(order.begin(), order.end(), rng);
        std::copy(order.begin(), order.begin() + k, tid2eid.begin() + int64_t{v} * k);
    }
    const auto gf = randn(int64_t{E} * D, rng, 0.1f);
    std::vector<uint16_t> gb(gf.size());
    std::vector<float> gq(gf.size());
    for (size_t i = 0; i < gf.size(); ++i) {
        gb[i] = f32_to_bf16(gf[i]);
        gq[i] = bf16_to_f32(gb[i]);
    }
    QuantWeight gate;
    gate.rows = E;
    gate.cols = D;
    gate.dtype = DType::kBF16;
    gate.data = gb.data();
    auto dgate = be->upload_weight(gate, {ops::WeightRole::kRouter});
    ASSERT_TRUE(dgate.has_value());
    const ops::Weight rgate = cpu_ref::wrap(gate);
    std::vector<cuda::test::OwnedWeight> ow;
    cpu_ref::CpuExperts ce;
    for (int e = 0; e < E; ++e)
        for (int p = 0; p < 3; ++p) {
            ow.push_back(
                cuda::test::random_weight(TestFormat::kNvfp4, p == 2 ? D : I, p == 2 ? I : D, rng));
            (p == 0 ? ce.w1 : p == 1 ? ce.w3 : ce.w2).push_back(ow.back().w);
        }
    const ops::ExpertWeights rex = cpu_ref::wrap(ce, I, D);
    const auto s1v = randn(int64_t{I} * D, rng, 0.05f), s3v = randn(int64_t{I} * D, rng, 0.05f),
               s2v = randn(int64_t{D} * I, rng, 0.05f);
    Dev<float> dx(*be, x), dlog(*be, T * E), dwt(*be, T * k), shared(*be, T * (2 * I + D)),
        routed(*be, ops::moe_routed_scratch_floats(T, k, E, D, I)), out(*be, T * D);
    Dev<int32_t> dids(*be, ids), dtab(*be, tid2eid), dsel(*be, T * k);
    for (const bool stacked : {true, false}) {
        std::vector<cuda::test::OwnedWeight> os;
        std::vector<QuantWeight> sq;
        if (stacked) {
            for (int p = 0; p < 3; ++p)
                os.push_back(cuda::test::random_weight(TestFormat::kNvfp4, p == 2 ? D : I,
                                                       p == 2 ? I : D, rng));
            for (const auto& o : os) sq.push_back(o.w);
        } else {
            sq = {dense(s1v, I, D), dense(s3v, I, D), dense(s2v, D, I)};
        }
        std::vector<ops::Weight> hs, rs;
        for (const QuantWeight& q : sq) {
            auto h = be->upload_weight(q, {ops::WeightRole::kSharedExpert, 0});
            ASSERT_TRUE(h.has_value()) << h.status().message();
            hs.push_back(*h);
            rs.push_back(cpu_ref::wrap(q));
        }
        auto ex = be->upload_experts(ce.w1.data(), ce.w3.data(), ce.w2.data(), E,
                                     {ops::WeightRole::kExperts, 0}, {&hs[0], &hs[1], &hs[2]});
        ASSERT_TRUE(ex.has_value()) << ex.status().message();
        for (const int64_t Tc : {int64_t{1}, int64_t{2}, T}) {
            be->fill(out.p, std::nanf(""), out.n);
            be->fill(routed.p, std::nanf(""), routed.n);
            be->fill(dlog.p, 0.0f, dlog.n);  // cleared earlier in the step
            const ops::RouterArgs route{dx.p,  &*dgate, nullptr, dtab.p, dids.p, dlog.p, dsel.p,
                                        dwt.p, Tc,      E,       k,      2.5f,   true};
            ops::MoeArgs m{dx.p,     dsel.p, dwt.p, &*ex, &hs[0], &hs[1], &hs[2], shared.p,
                           routed.p, out.p,  Tc,    D,    I,      E,      k,      7.0f};
            m.route = &route;
            be->moe(m);
            std::vector<float> rlog(Tc * E), rwt(Tc * k), ref(Tc * D), scratch(Tc * (2 * I + D));
            std::vector<int32_t> rsel(Tc * k);
            const ops::RouterArgs rroute{x.data(),   &rgate,      nullptr,     tid2eid.data(),
                                         ids.data(), rlog.data(), rsel.data(), rwt.data(),
                                         Tc,         E,           k,           2.5f};
            ops::MoeArgs rm{
                x.data(), rsel.data(), rwt.data(), &rex, &rs[0], &rs[1], &rs[2], scratch.data(),
                nullptr,  ref.data(),  Tc,         D,    I,      E,      k,      7.0f};
            rm.route = &rroute;
            cpu_ref::moe(rm);
            const std::string what = std::string("moe routed first, T=") + std::to_string(Tc) +
                                     (stacked ? ", stacked shared" : ", dense shared");
            auto sel = dsel.get();
            sel.resize(Tc * k);
            EXPECT_EQ(sel, rsel) << what;
            auto wt = dwt.get();
            wt.resize(Tc * k);
            expect_close((what + " weights").c_str(), wt, rwt, 1e-5, 1e-7);
            auto got = out.get();
            got.resize(Tc * D);
            auto tol = moe_magnitude(x, rsel.data(), rwt.data(), ce, &sq[0], &sq[1], &sq[2], Tc, D,
                                     I, k, 7.0f);
            for (auto& v : tol) v *= 2e-4;
            expect_within(what.c_str(), got, ref, tol);
        }
    }
}

TEST(CudaBackendGpu, QuantizedEmbeddingIsRefused) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(14);
    auto w = cuda::test::random_weight(cuda::test::TestFormat::kFp8E8m0, 128, 256, rng);
    auto r = be->upload_weight(w.w, {ops::WeightRole::kEmbed, -1});
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("embedding table is not supported"), std::string::npos);
}

// A decode-like sequence (norm, rope, attention, ring write, indexer, sample) captured into a
// CUDA graph under global capture mode (any host synchronisation would break the capture) and
// replayed twice from the same starting state: bitwise the direct run's results.
TEST(CudaBackendGpu, StepSequenceReplaysInAGraph) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(15);
    const ops::HostStep st = mixed_step();
    const int T = st.T(), S = 5, W = 8, H = 6, hd = 64, rd = 16, m = 4, K = 4, V = 301;
    const int64_t n_entries = 20;
    const auto x0 = randn(int64_t{T} * H * hd, rng), kv = randn(int64_t{T} * hd, rng),
               ring0 = randn(S * W * hd, rng), entries = randn(S * n_entries * hd, rng),
               sink = randn(H, rng), logits = randn(int64_t{T} * V, rng), iw = randn(T, rng);
    std::vector<float> inv(rd / 2);
    for (int i = 0; i < rd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rd);
    std::vector<SamplingParams> params(T, SamplingParams{0.9f, 20, 0.95f, 0});
    std::vector<int32_t> slots(T);
    for (int t = 0; t < T; ++t) slots[t] = t;  // distinct generators
    std::vector<uint64_t> rng0(T * 4);
    for (int t = 0; t < T; ++t) ops::seed_rng(77 + t, rng0.data() + 4 * t);
    DevStep ds(*be, st);
    Dev<float> x(*be, x0.size()), dkv(*be, kv), ring(*be, ring0.size()), dent(*be, entries),
        dsink(*be, sink), dinv(*be, inv), out(*be, x0.size()), dlog(*be, logits), diw(*be, iw);
    Dev<SamplingParams> dp(*be, params);
    Dev<int32_t> dslots(*be, slots), topk(*be, int64_t{T} * K), ids(*be, T);
    Dev<uint64_t> gen(*be, rng0.size());
    auto reset = [&] {
        x.set(x0);
        ring.set(ring0);
        gen.set(rng0);
        be->synchronize();
    };
    auto run = [&] {
        be->rms_norm({x.p, nullptr, x.p, int64_t{T} * H, hd, 1e-6f});
        be->rope({x.p, dinv.p, ds.tok_pos.p, T, H, hd, rd, false, 1.0f});
        // The indexer on one head of the roped queries (q rows hd apart, Hi = 1).
        be->indexer_topk({x.p, diw.p, dent.p, topk.p, ds.view(), n_entries, 1, hd, K, m});
        ops::AttentionArgs a;
        a.q = x.p, a.kv = dkv.p, a.ring = ring.p, a.entries = dent.p, a.topk = topk.p;
        a.sink = dsink.p, a.out = out.p, a.step = ds.view();
        a.H = H, a.hd = hd, a.W = W, a.K = K, a.compress_rate = m, a.n_entries = n_entries;
        a.softmax_scale = 0.125f;
        be->attention(a);
        be->ring_write({dkv.p, ring.p, ds.view(), W, hd});
        be->sample({dlog.p, dp.p, dslots.p, gen.p, ids.p, T, V});
    };
    reset();
    run();
    const auto want_out = out.get(), want_ring = ring.get();
    const auto want_ids = ids.get();
    const auto want_gen = gen.get();
    const auto want_topk = topk.get();
    const cudaStream_t s = cuda_backend_stream(*be);
    cuda::CudaGraph graph;
    reset();
    ASSERT_TRUE(capture_graph(s, run, &graph));
    for (int replay = 0; replay < 2; ++replay) {
        reset();
        be->fill(out.p, 0.0f, static_cast<int64_t>(out.n));
        graph.launch(s);
        EXPECT_EQ(out.get(), want_out) << replay;
        EXPECT_EQ(ring.get(), want_ring) << replay;
        EXPECT_EQ(ids.get(), want_ids) << replay;
        EXPECT_EQ(gen.get(), want_gen) << replay;
        EXPECT_EQ(topk.get(), want_topk) << replay;
    }
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {
using namespace ops_gpu_test;

// Synthetic routed experts drawn in device memory (benchmarks' --synthetic): the tiles the
// kernel reads decode (by the host model of the kernel) to weights of the intended magnitude,
// and the MoE over them matches the CPU reference on those decoded weights.
TEST(CudaOpsGpu, SyntheticExpertsAreWeightsTheKernelReads) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(23);
    const int E = 5, I = 128, D = 256, k = 2;
    const int64_t T = 3;
    const auto x = randn(T * D, rng);
    const std::vector<int32_t> sel = {0, 4, 2, 3, 1, 0};
    const std::vector<float> wt = {0.6f, 0.4f, 0.7f, 0.3f, 0.5f, 0.5f};
    Dev<float> dx(*be, x), dwt(*be, wt), shared(*be, T * (2 * I + D)),
        routed(*be, ops::moe_routed_scratch_floats(T, k, E, D, I)), out(*be, T * D);
    Dev<int32_t> dsel(*be, sel);
    for (WeightFormat f : {WeightFormat::kNvfp4, WeightFormat::kMxfp4}) {
        const char* name = weight_format_name(f);
        auto ex = be->synth_experts(E, I, D, f, 77, {ops::WeightRole::kExperts, 0}, {});
        ASSERT_TRUE(ex.has_value()) << ex.status().message();
        ASSERT_TRUE(ex->valid()) << name << ": the CUDA backend draws FP4 experts itself";
        auto packed = cuda_download_experts(*be, *ex);
        ASSERT_TRUE(packed.has_value()) << packed.status().message();
        // Decoded weights, dense: w1 = rows [0, I) of w1|w3, w3 = rows [I, 2I), w2.
        std::vector<std::vector<float>> dense(3 * E);
        cpu_ref::CpuExperts ce;
        double sq[2] = {0, 0};
        for (int e = 0; e < E; ++e)
            for (int p = 0; p < 3; ++p) {
                const int64_t rows = p == 2 ? D : I, cols = p == 2 ? I : D;
                std::vector<float>& v = dense[e * 3 + p];
                v.resize(rows * cols);
                for (int64_t r = 0; r < rows; ++r)
                    cuda::gemv_unpack_row(p == 2 ? packed->second : packed->first, e,
                                          p == 1 ? I + r : r, v.data() + r * cols);
                for (float w : v) {
                    ASSERT_TRUE(std::isfinite(w)) << name;
                    sq[p == 2] += static_cast<double>(w) * w;
                }
            }
        for (int e = 0; e < E; ++e)
            for (int p = 0; p < 3; ++p) {
                QuantWeight q;
                q.rows = p == 2 ? D : I;
                q.cols = p == 2 ? I : D;
                q.data = dense[e * 3 + p].data();
                (p == 0 ? ce.w1 : p == 1 ? ce.w3 : ce.w2).push_back(q);
            }
        // rms about 1/sqrt(K) (synth_weight.h), within a factor of 2.
        const double rms13 = std::sqrt(sq[0] / (2.0 * E * I * D)) * std::sqrt(double{D});
        const double rms2 = std::sqrt(sq[1] / (1.0 * E * I * D)) * std::sqrt(double{I});
        EXPECT_GT(rms13, 0.5) << name;
        EXPECT_LT(rms13, 2.0) << name;
        EXPECT_GT(rms2, 0.5) << name;
        EXPECT_LT(rms2, 2.0) << name;
        const ops::ExpertWeights rex = cpu_ref::wrap(ce, I, D);
        be->moe({dx.p, dsel.p, dwt.p, &*ex, nullptr, nullptr, nullptr, shared.p, routed.p, out.p, T,
                 D, I, E, k, 7.0f});
        std::vector<float> ref(T * D), scratch(T * (2 * I + D));
        cpu_ref::moe({x.data(), sel.data(), wt.data(), &rex, nullptr, nullptr, nullptr,
                      scratch.data(), nullptr, ref.data(), T, D, I, E, k, 7.0f});
        expect_close((std::string("synthetic moe ") + name).c_str(), out.get(), ref, 1e-4,
                     1e-4 * max_abs(ref));
    }
}

}  // namespace
}  // namespace dsv4
