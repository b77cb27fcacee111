// The bf16 reference mode of sink attention (AttentionArgs::round_bf16; the CUDA kernel
// attention_bf16_sm90.cu) against cpu_ref (docs/numerics-cuda.md), on inputs as the model gives
// them in this mode: q and K=V bf16 values (the sink fp32), with and without the fused inverse
// output rope, with and without the ring write after it.
//
// The bound (bf16_check): |gpu - cpu| <= 2^-7 |cpu| + 2^-6 max|K=V| on every element, and at
// least 99.9% of the elements bit-identical (printed; softmax blocks of 63 keys instead of 64
// would leave ~97%). The kernel makes the CPU's scores bit for bit and does the CPU's fp32 and
// double operations in its order, so outputs differ only where its exp (double, rounded to float)
// and the CPU's float std::exp differ by an ulp next to a bf16 rounding boundary: a probability
// one bf16 step off (moves an output by at most 2^-8 of a value) or a sum one fp32 ulp off,
// either flipping an output's bf16 rounding by one step (at most 2^-7 of it); a rope pair whose
// input flipped moves by up to a step of each of its two inputs, which may be larger than the
// rotated output itself (the atol: outputs are convex combinations of the values, so a step of
// one is at most 2^-7 max|K=V|).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/fp_codes.h"
#include "bf16_gpu_util.h"
#include "formats/cache_row.h"
#include "ops_gpu_util.h"

namespace dsv4 {
namespace {

using namespace ops_gpu_test;  // NOLINT(google-build-using-namespace): the shared helpers

// Decode rows far into their sequences and a prefill chunk (hundreds of keys a query with a
// 128-key window: several softmax blocks of 64).
ops::HostStep long_step() {
    ops::HostStep s;
    s.add_row(3, 700, 1);
    s.add_row(0, 655, 1);
    s.add_row(4, 301, 4);
    s.add_row(1, 999, 1);
    return s;
}

// One decode token a row, row i in slot i.
ops::HostStep decode_step(const std::vector<int64_t>& pos) {
    ops::HostStep s;
    for (size_t i = 0; i < pos.size(); ++i) s.add_row(static_cast<int32_t>(i), pos[i], 1);
    return s;
}

struct Case {
    int H = 3, hd = 72;
    bool with_entries = false, csa = false;  // HCA: entries without top-k lists
    int W = 8, m = 4, K = 5;
    int64_t n_entries = 20;
    ops::HostStep step = mixed_step();
    CacheRowFormat kv_format = {};  // the ring's and the entries' rows
    int ring_rows = 0;              // R >= W; 0: W
    int rope_dim = 0;               // the fused inverse output rope's dims; 0: none
};

void bf16_attention_case(const char* what, const Case& c) {
    auto be = make_gpu();
    std::mt19937 rng(11 + c.H + c.hd);
    const ops::HostStep& st = c.step;
    const int S = std::max(5, st.B()), T = st.T(), H = c.H, hd = c.hd, W = c.W, K = c.K;
    const int R = c.ring_rows > 0 ? c.ring_rows : W;
    const auto q = bf16_values(randn(int64_t{T} * H * hd, rng)),
               kv = bf16_values(randn(int64_t{T} * hd, rng)),
               ring = bf16_values(randn(int64_t{S} * R * hd, rng)),
               entries = bf16_values(randn(S * c.n_entries * hd, rng));
    const auto sink = randn(H, rng);
    // CSA lists: valid entries in random order, a quarter of them -1 (left out of the keys,
    // so the softmax blocks of 64 are counted over the present ones).
    std::vector<int32_t> topk(int64_t{T} * K, -1);
    for (int t = 0; t < T; ++t) {
        const int64_t valid = (st.tok_pos[t] + 1) / c.m;
        for (int j = 0; j < K; ++j)
            if (valid > 0 && rng() % 4 != 0) topk[t * K + j] = static_cast<int32_t>(rng() % valid);
    }
    const int rd = c.rope_dim;
    std::vector<float> inv(std::max(rd / 2, 1));
    for (int i = 0; i < rd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rd);
    // The ring and the entries as the cache stores them (both sides decode the same bytes).
    const CacheRowFormat f = c.kv_format;
    const std::vector<uint8_t> ring_s = stored_rows(f, hd, ring),
                               ent_s = stored_rows(f, hd, entries);
    DevStep ds(*be, st);
    Dev<float> dq(*be, q), dkv(*be, kv), dsink(*be, sink), dinv(*be, inv);
    Dev<float> out(*be, int64_t{T} * H * hd);
    Dev<uint8_t> dring(*be, ring_s), dent(*be, ent_s);
    Dev<int32_t> dtopk(*be, topk);
    const ops::FusedRope rope_g{dinv.p, ds.tok_pos.p, H, rd, 1.0f, /*inverse=*/true};
    const ops::FusedRope rope_r{inv.data(), st.tok_pos.data(), H, rd, 1.0f, /*inverse=*/true};
    ops::AttentionArgs a;
    a.H = H;
    a.hd = hd;
    a.W = W;
    a.K = K;
    a.compress_rate = c.m;
    a.n_entries = c.n_entries;
    a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.kv_format = f;
    a.ring_rows = c.ring_rows;
    a.round_bf16 = true;
    ops::AttentionArgs g = a, r = a;
    g.q = dq.p, g.kv = dkv.p, g.ring = reinterpret_cast<const float*>(dring.p), g.sink = dsink.p;
    g.out = out.p, g.step = ds.view();
    g.entries = c.with_entries ? reinterpret_cast<const float*>(dent.p) : nullptr;
    g.topk = c.csa ? dtopk.p : nullptr;
    g.out_rope = rd > 0 ? &rope_g : nullptr;
    std::vector<float> ref(int64_t{T} * H * hd);
    r.q = q.data(), r.kv = kv.data(), r.ring = reinterpret_cast<const float*>(ring_s.data());
    r.sink = sink.data(), r.out = ref.data(), r.step = st.view();
    r.entries = c.with_entries ? reinterpret_cast<const float*>(ent_s.data()) : nullptr;
    r.topk = c.csa ? topk.data() : nullptr;
    r.out_rope = rd > 0 ? &rope_r : nullptr;
    cpu_ref::attention(r);
    // max|K=V| (typed rows: the decoded values, within a few percent of these).
    const double vmax = std::max({max_abs(kv), max_abs(ring), max_abs(entries)}) *
                        (f.type == CacheType::kF32 ? 1.0 : 1.1);
    const double atol = vmax / 64;
    const int64_t split_runs = cuda_attention_split_runs(*be);
    be->fill(out.p, std::nanf(""), out.n);
    be->attention(g);
    const std::vector<float> got = out.get();
    bf16_check(what, got, ref, atol, 0.999);
    // The mode never takes the split kernel (its own kernel for every step).
    EXPECT_EQ(cuda_attention_split_runs(*be), split_runs) << what;
    // Then with the step's rows written into the ring read (AttentionArgs::ring_out): the same
    // output bit for bit, and the ring as ring_write leaves it.
    std::vector<uint8_t> ring_ref = ring_s;
    cpu_ref::ring_write(
        {kv.data(), reinterpret_cast<float*>(ring_ref.data()), st.view(), W, hd, f, c.ring_rows});
    Dev<uint8_t> dring_w(*be, ring_s);
    ops::AttentionArgs gw = g;
    gw.ring = gw.ring_out = reinterpret_cast<float*>(dring_w.p);
    be->fill(out.p, std::nanf(""), out.n);
    be->attention(gw);
    const std::string w = std::string(what) + " (then the ring write)";
    expect_close(w.c_str(), out.get(), got, 0.0, 0.0);
    EXPECT_EQ(dring_w.get(), ring_ref) << w;
}

// A mixed step (decode rows and prefill chunks in 5 slots) with an 8-key window that wraps the
// ring: sliding only, with the output rope; a ring of R = W + 3 rows.
TEST(CudaBf16Gpu, AttentionSlidingOnly) {
    DSV4_REQUIRE_GPU();
    Case c;
    c.rope_dim = 16;
    bf16_attention_case("bf16 attention sliding H=3 hd=72 rope 16", c);
    c.ring_rows = 11;
    bf16_attention_case("bf16 attention sliding H=3 hd=72 rope 16, R=11", c);
}

// HCA (every valid entry) on the mixed step, with and without the output rope.
TEST(CudaBf16Gpu, AttentionHca) {
    DSV4_REQUIRE_GPU();
    Case c;
    c.H = 5;
    c.hd = 40;
    c.with_entries = true;
    bf16_attention_case("bf16 attention HCA H=5 hd=40", c);
    c.rope_dim = 8;
    bf16_attention_case("bf16 attention HCA H=5 hd=40 rope 8", c);
}

// CSA (top-k lists with -1 holes) on the mixed step; hd 129: a dot with a tail past the last 4.
TEST(CudaBf16Gpu, AttentionCsa) {
    DSV4_REQUIRE_GPU();
    Case c;
    c.H = 7;
    c.hd = 129;
    c.with_entries = true;
    c.csa = true;
    bf16_attention_case("bf16 attention CSA H=7 hd=129", c);
}

// Hundreds of keys a query (up to 378): several softmax blocks of 64, CSA's holes falling
// inside and across them.
TEST(CudaBf16Gpu, AttentionManyKeyBlocks) {
    DSV4_REQUIRE_GPU();
    Case c;
    c.H = 6;
    c.hd = 100;
    c.with_entries = true;
    c.W = 128;
    c.K = 200;
    c.n_entries = 260;
    c.step = long_step();
    c.rope_dim = 36;
    bf16_attention_case("bf16 attention HCA long H=6 hd=100 rope 36", c);
    c.csa = true;
    bf16_attention_case("bf16 attention CSA long H=6 hd=100 rope 36", c);
}

// V4-Flash's decode shapes (64 heads of 512, window 128, rope 64; HCA every 128th position, CSA
// top 512 of every 4th): batch 1 at 8K context, and a batch of 8 at mixed positions (the first
// token of a sequence, a partly filled window, the window's wrap-around, far into the context).
TEST(CudaBf16Gpu, AttentionV4Decode) {
    DSV4_REQUIRE_GPU();
    Case c;
    c.H = 64;
    c.hd = 512;
    c.with_entries = true;
    c.csa = true;
    c.W = 128;
    c.K = 512;
    c.n_entries = 2048;
    c.rope_dim = 64;
    c.step = decode_step({8191});
    bf16_attention_case("bf16 attention V4 decode B=1 CSA", c);
    c.step = decode_step({8191, 0, 3, 127, 128, 1000, 4099, 200});
    bf16_attention_case("bf16 attention V4 decode B=8 CSA", c);
    c.csa = false;
    c.m = 128;
    c.n_entries = 80;
    bf16_attention_case("bf16 attention V4 decode B=8 HCA", c);
    c.with_entries = false;
    bf16_attention_case("bf16 attention V4 decode B=8 sliding", c);
}

// Typed K=V rows (fp8: E4M3 NoPE dims with a scale per 64, bf16 RoPE dims; bf16): the ring and
// the entries stored by the host's encoder, the step's own rows encoded by the device, the ring
// written after the attention equal byte for byte to the CPU's.
TEST(CudaBf16Gpu, AttentionTypedRows) {
    DSV4_REQUIRE_GPU();
    for (const CacheType type : {CacheType::kFp8, CacheType::kBf16}) {
        const std::string name(cache_type_name(type));
        Case c;
        c.H = 7;
        c.hd = 129;
        c.with_entries = true;
        c.csa = true;
        c.kv_format = kv_row_format(type, 17);
        bf16_attention_case(("bf16 attention CSA H=7 hd=129 " + name).c_str(), c);
        c.H = 6;
        c.hd = 100;
        c.W = 128;
        c.K = 200;
        c.n_entries = 260;
        c.step = long_step();
        c.kv_format = kv_row_format(type, 36);
        c.rope_dim = 36;
        bf16_attention_case(("bf16 attention CSA long H=6 hd=100 rope 36 " + name).c_str(), c);
        c.H = 64;
        c.hd = 512;
        c.K = 512;
        c.n_entries = 2048;
        c.step = decode_step({8191, 0, 3, 127, 128, 1000, 4099, 200});
        c.kv_format = kv_row_format(type, 64);
        c.rope_dim = 64;
        bf16_attention_case(("bf16 attention V4 decode B=8 CSA " + name).c_str(), c);
    }
}

}  // namespace
}  // namespace dsv4
