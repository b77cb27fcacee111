// The bf16 reference mode's op flags on CUDA (round_bf16, RoundTrip::kBf16 and
// kHadamardBf16Fp4; docs/numerics-cuda.md) against cpu_ref: the round trips, the norms and rope,
// the mHC ops, the linears and the MoE. (Attention: bf16_attention_gpu_test.cc; the indexer and
// the compressors: bf16_indexer_compress_gpu_test.cc.)
//
// The bound (bf16_check): each output within one bf16 step of the CPU's (2^-7 of its magnitude,
// the widest bf16 spacing relative to the value) plus what the op's fp32 arithmetic allows
// before the rounding, and most outputs bit-identical: the roundings are the CPU's, at the same
// points, so a difference needs an fp32 value next to a bf16 rounding boundary that the CUDA
// arithmetic (another summation order, the GEMV's hi + lo products) puts on the other side.
#include <cstdlib>
#include <string>

#include "base/fp_codes.h"
#include "bf16_gpu_util.h"
#include "ops_gpu_util.h"

namespace dsv4 {
namespace {

using namespace ops_gpu_test;

TEST(CudaBf16Gpu, RoundTripKindsBitwise) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(5);
    struct Case {
        ops::RoundTrip kind;
        int width, dims, block;
    };
    for (const Case& c :
         {Case{ops::RoundTrip::kBf16, 515, 515, 1}, Case{ops::RoundTrip::kBf16, 512, 448, 64},
          Case{ops::RoundTrip::kHadamardBf16Fp4, 128, 128, 32},
          Case{ops::RoundTrip::kHadamardBf16Fp4, 64, 64, 32}}) {
        const int64_t rows = 9;
        auto x = randn(rows * c.width, rng, 2.0f);
        x[3] = 1.0f + 1.0f / 256;  // a bf16 tie: to even
        Dev<float> dx(*be, x);
        be->round_trip({dx.p, rows, c.width, c.dims, c.block, c.kind});
        cpu_ref::round_trip({x.data(), rows, c.width, c.dims, c.block, c.kind});
        const std::string what = "round trip kind " + std::to_string(static_cast<int>(c.kind)) +
                                 " width " + std::to_string(c.width);
        expect_close(what.c_str(), dx.get(), x, 0.0, 0.0);
    }
}

// The weighted norm with a fused rope (the K=V norm's shape), the per-head q norm (unweighted,
// every intermediate rounded) with its rope, and the two in one call (RmsNormArgs::also), at
// mixed positions; 515 wide (no rope) too. Inputs bf16 values, as the mode gives them.
TEST(CudaBf16Gpu, RmsNormAndRope) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(11);
    const std::vector<int64_t> pos = {0, 5, 127, 128, 4097, 65537};
    const int64_t T = static_cast<int64_t>(pos.size());
    Dev<int64_t> dpos(*be, pos);
    const int rd = 64, heads = 8;
    std::vector<float> inv(rd / 2);
    for (int i = 0; i < rd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rd);
    Dev<float> dinv(*be, inv);
    for (int dim : {512, 515}) {
        const bool roped = dim == 512;
        const auto q = bf16_values(randn(T * heads * dim, rng, 3.0f));
        const auto kv = bf16_values(randn(T * dim, rng, 3.0f));
        const auto w = bf16_values(randn(dim, rng));
        Dev<float> dq(*be, q), dkv(*be, kv), dw(*be, w);
        const ops::FusedRope hq{inv.data(), pos.data(), heads, rd, 1.25f},
            hk{inv.data(), pos.data(), 1, rd, 1.25f}, gq{dinv.p, dpos.p, heads, rd, 1.25f},
            gk{dinv.p, dpos.p, 1, rd, 1.25f};
        std::vector<float> rq(q.size()), rkv(kv.size());
        const ops::RmsNormArgs rk{kv.data(), w.data(), rkv.data(), T,
                                  dim,       1e-6f,    true,       roped ? &hk : nullptr};
        cpu_ref::rms_norm({q.data(), nullptr, rq.data(), T * heads, dim, 1e-6f, true,
                           roped ? &hq : nullptr, &rk});
        const ops::RmsNormArgs gkv{dkv.p, dw.p, dkv.p, T, dim, 1e-6f, true, roped ? &gk : nullptr};
        be->rms_norm(
            {dq.p, nullptr, dq.p, T * heads, dim, 1e-6f, true, roped ? &gq : nullptr, &gkv});
        const std::string d = " dim " + std::to_string(dim);
        bf16_check(("q norm (unweighted)" + d).c_str(), dq.get(), rq, 0.0, 0.99);
        bf16_check(("kv norm (weighted)" + d).c_str(), dkv.get(), rkv, 0.0, 0.99);
    }
    // rope alone (the indexer's queries in this mode), inverse too.
    for (bool inverse : {false, true}) {
        const int hd = 128;
        const auto x = bf16_values(randn(T * heads * hd, rng, 2.0f));
        Dev<float> dx(*be, x);
        std::vector<float> ref = x;
        cpu_ref::rope({ref.data(), inv.data(), pos.data(), T, heads, hd, rd, inverse, 1.25f, true});
        be->rope({dx.p, dinv.p, dpos.p, T, heads, hd, rd, inverse, 1.25f, true});
        bf16_check(inverse ? "rope inverse" : "rope", dx.get(), ref, 0.0, 0.99);
    }
}

// hc_pre with the previous sub-block's hc_post and the next norm fused (the decode layer's
// shape), and hc_head: streams, y, y_norm and the head's output rounded to bf16.
TEST(CudaBf16Gpu, HyperConnections) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(29);
    for (int64_t T : {int64_t{1}, int64_t{5}}) {
        const int n = 4, D = 256, iters = 20, mix = (2 + n) * n;
        const auto x = bf16_values(randn(T * n * D, rng)), fn = randn(mix * n * D, rng, 0.02f),
                   base = randn(mix, rng), scale = randn(3, rng),
                   f = bf16_values(randn(T * D, rng)), nw = randn(D, rng),
                   post0 = randn(T * n, rng), comb0 = randn(T * n * n, rng);
        Dev<float> dx(*be, x), dfn(*be, fn), dbase(*be, base), dscale(*be, scale), df(*be, f),
            dnw(*be, nw), post(*be, post0), comb(*be, comb0), next(*be, T * n * D), y(*be, T * D),
            yn(*be, T * D), head(*be, T * D);
        const ops::HcPostArgs dpin{df.p, dx.p, post.p, comb.p, next.p, T, n, D, true};
        be->hc_pre({next.p, dfn.p, dbase.p, dscale.p, y.p, post.p, comb.p, T, n, D, iters, 1e-6f,
                    1e-6f, true, dnw.p, yn.p, 1e-6f, &dpin});
        be->hc_head({next.p, dfn.p, dbase.p, dscale.p, head.p, T, n, D, 1e-6f, 1e-6f, true});
        std::vector<float> rpost = post0, rcomb = comb0, rnext(T * n * D), ry(T * D), ryn(T * D),
                           rhead(T * D);
        const ops::HcPostArgs rpin{f.data(), x.data(), rpost.data(), rcomb.data(), rnext.data(), T,
                                   n,        D,        true};
        cpu_ref::hc_pre({rnext.data(), fn.data(), base.data(), scale.data(), ry.data(),
                         rpost.data(), rcomb.data(), T, n, D, iters, 1e-6f, 1e-6f, true, nw.data(),
                         ryn.data(), 1e-6f, &rpin});
        cpu_ref::hc_head({rnext.data(), fn.data(), base.data(), scale.data(), rhead.data(), T, n, D,
                          1e-6f, 1e-6f, true});
        const std::string t = " T=" + std::to_string(T);
        // The streams: hc_post's arithmetic is the CPU's (bit for bit in float mode).
        bf16_check(("hc streams" + t).c_str(), next.get(), rnext, 0.0, 1.0);
        // y and the head: the gates carry the mixing dot's ~1e-6 relative difference.
        bf16_check(("hc y" + t).c_str(), y.get(), ry, 1e-5 * max_abs(rnext), 0.95);
        bf16_check(("hc y_norm" + t).c_str(), yn.get(), ryn, 2e-5 * max_abs(ryn), 0.95);
        bf16_check(("hc head" + t).c_str(), head.get(), rhead, 1e-5 * max_abs(rnext), 0.95);
    }
}

// A linear with its output rounded (LinearArgs::round_bf16): a dense f32 weight (exact products
// on both sides) and NVFP4 (the GEMV's hi + lo products, ~2^-16 of sum |w x|), with FP8
// activations too (act_fp8, the release format's linears); 1, 5 and 70 rows (the last on the
// tensor-core path), and a grouped linear (wo_a's shape) whose rows are ldy apart.
TEST(CudaBf16Gpu, Linear) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(41);
    using cuda::test::TestFormat;
    const int64_t N = 192, K = 256;
    const auto dv = randn(N * K, rng, 0.05f);
    QuantWeight dq;
    dq.rows = N;
    dq.cols = K;
    dq.data = dv.data();
    const auto nv = cuda::test::random_weight(TestFormat::kNvfp4, N, K, rng);
    for (int wi = 0; wi < 2; ++wi) {
        const QuantWeight& q = wi == 0 ? dq : nv.w;
        auto dw = be->upload_weight(q, {ops::WeightRole::kAttention, 0});
        ASSERT_TRUE(dw.has_value()) << dw.status().message();
        // (The FP8 activation copies' buffer: rows x the widest weight uploaded.)
        ASSERT_TRUE(be->prepare_steps(256).is_ok());
        const ops::Weight rw = cpu_ref::wrap(q);
        for (int64_t M : {1, 5, 70})
            for (bool act_fp8 : {false, true}) {
                const auto x = bf16_values(randn(M * K, rng));
                Dev<float> dx(*be, x), dy(*be, M * N);
                const ops::ActType f32 = ops::ActType::kF32;
                be->linear({dx.p, &*dw, dy.p, M, N, 0, 0, 0, f32, f32, act_fp8, true});
                std::vector<float> ref(M * N);
                cpu_ref::linear(
                    {x.data(), &rw, ref.data(), M, N, 0, 0, 0, f32, f32, act_fp8, true});
                const std::string what = std::string(wi == 0 ? "linear f32" : "linear nvfp4") +
                                         " M=" + std::to_string(M) + (act_fp8 ? " fp8 act" : "");
                // NVFP4: the GEMV's error (relative 2^-16 of sum |w x| <= ~2^-10 max |y| here)
                // may cross a rounding boundary.
                bf16_check(what.c_str(), dy.get(), ref, wi == 0 ? 0.0 : 1e-3 * max_abs(ref),
                           wi == 0 ? 0.99 : 0.9);
            }
    }
    // Grouped (wo_a's shape): 2 groups of 128 rows (the GEMV's row blocks are 64), each reading
    // its own 128 columns of x (the weight's K), rounded as one [M, 256] output.
    const int64_t M = 3, g = 2, n = 128, k = K / g, Ng = g * n;
    const auto x = bf16_values(randn(M * K, rng));
    Dev<float> dx(*be, x), dy(*be, M * Ng);
    const ops::ActType f32 = ops::ActType::kF32;
    const auto gq = cuda::test::random_weight(TestFormat::kNvfp4, Ng, k, rng);
    auto gw = be->upload_weight(gq.w, {ops::WeightRole::kAttention, 0});
    ASSERT_TRUE(gw.has_value()) << gw.status().message();
    const ops::Weight grw = cpu_ref::wrap(gq.w);
    be->linear({dx.p, &*gw, dy.p, M, n, 0, 0, 0, f32, f32, false, true, static_cast<int>(g)});
    std::vector<float> ref(M * Ng);
    cpu_ref::linear(
        {x.data(), &grw, ref.data(), M, n, 0, 0, 0, f32, f32, false, true, static_cast<int>(g)});
    bf16_check("linear grouped nvfp4", dy.get(), ref, 1e-3 * max_abs(ref), 0.9);
}

// The routed experts and the shared expert with every rounding of the mode (MoeArgs::round_bf16,
// with and without FP8 activations): dense f32 experts (exact products: the CPU's values except
// where a double sum's order moves a value across a boundary) and NVFP4 experts (the GEMV's
// error), at 21 tokens (grouped by expert on the GEMV path), 2 and 1. Each token's slots are in
// random expert order, so a sum in slot order instead of expert-id order shows in the f32 case.
TEST(CudaBf16Gpu, Moe) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(23);
    using cuda::test::TestFormat;
    const int E = 9, I = 64, D = 256, k = 3;
    const int64_t T = 21;
    const auto x = bf16_values(randn(T * D, rng));
    std::vector<int32_t> sel(T * k);
    std::vector<float> wt(T * k);
    for (int64_t t = 0; t < T; ++t) {
        std::vector<int32_t> order = {0, 1, 2, 3, 4, 5, 6, 7};
        std::shuffle(order.begin(), order.end(), rng);
        for (int j = 0; j < k; ++j) {
            sel[t * k + j] = order[j];
            wt[t * k + j] = 0.2f + 0.3f * static_cast<float>(rng() % 100) / 100.0f;
        }
    }
    Dev<float> dx(*be, x), dwt(*be, wt), shared(*be, T * (2 * I + D)),
        routed(*be, ops::moe_routed_scratch_floats(T, k, E, D, I)), out(*be, T * D);
    Dev<int32_t> dsel(*be, sel);
    for (int fi = 0; fi < 2; ++fi) {
        std::vector<std::vector<float>> dv;
        std::vector<cuda::test::OwnedWeight> ow;
        cpu_ref::CpuExperts ce;
        auto make = [&](int64_t rows, int64_t cols) {
            QuantWeight q;
            if (fi == 0) {
                dv.push_back(randn(rows * cols, rng, 0.05f));
                q.rows = rows;
                q.cols = cols;
                q.data = dv.back().data();
            } else {
                ow.push_back(cuda::test::random_weight(TestFormat::kNvfp4, rows, cols, rng));
                q = ow.back().w;
            }
            return q;
        };
        dv.reserve(3 * E + 3);
        ow.reserve(3 * E + 3);
        for (int e = 0; e < E; ++e) {
            ce.w1.push_back(make(I, D));
            ce.w3.push_back(make(I, D));
            ce.w2.push_back(make(D, I));
        }
        const QuantWeight s1 = make(I, D), s3 = make(I, D), s2 = make(D, I);
        auto h1 = be->upload_weight(s1, {ops::WeightRole::kSharedExpert, 0});
        auto h3 = be->upload_weight(s3, {ops::WeightRole::kSharedExpert, 0});
        auto h2 = be->upload_weight(s2, {ops::WeightRole::kSharedExpert, 0});
        ASSERT_TRUE(h1 && h3 && h2);
        const ops::Weight r1 = cpu_ref::wrap(s1), r3 = cpu_ref::wrap(s3), r2 = cpu_ref::wrap(s2);
        auto ex = be->upload_experts(ce.w1.data(), ce.w3.data(), ce.w2.data(), E,
                                     {ops::WeightRole::kExperts, 0}, {&*h1, &*h3, &*h2});
        ASSERT_TRUE(ex.has_value()) << ex.status().message();
        ASSERT_TRUE(be->prepare_steps(256).is_ok());
        const ops::ExpertWeights rex = cpu_ref::wrap(ce, I, D);
        for (int64_t Tc : {T, int64_t{2}, int64_t{1}})
            for (bool act_fp8 : {false, true}) {
                ops::MoeArgs g{dx.p,  dsel.p, dwt.p, &*ex, &*h1, &*h3, &*h2, shared.p, routed.p,
                               out.p, Tc,     D,     I,    E,    k,    7.0f, act_fp8,  true};
                be->moe(g);
                std::vector<float> ref(Tc * D), scratch(Tc * (2 * I + D));
                cpu_ref::moe({x.data(), sel.data(), wt.data(), &rex, &r1, &r3, &r2, scratch.data(),
                              nullptr, ref.data(), Tc, D, I, E, k, 7.0f, act_fp8, true});
                auto got = out.get();
                got.resize(Tc * D);
                const std::string what = std::string(fi == 0 ? "moe f32" : "moe nvfp4") +
                                         " T=" + std::to_string(Tc) + (act_fp8 ? " fp8 act" : "");
                // A flipped bf16 of h or of one expert's output moves the sum by about one bf16
                // step of that term: 2^-7 of the largest output bounds it here.
                bf16_check(what.c_str(), got, ref, (fi == 0 ? 2e-3 : 8e-3) * max_abs(ref),
                           fi == 0 ? 0.97 : 0.8);
            }
    }
}

}  // namespace
}  // namespace dsv4
