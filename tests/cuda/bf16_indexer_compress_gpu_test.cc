// The bf16 reference mode of the lightning indexer (IndexerTopkArgs::round_bf16) and of the
// compressors (CompressArgs::round_bf16) on CUDA against cpu_ref (docs/numerics-cuda.md), on
// inputs as the model gives them in this mode.
//
// Indexer: q and the keys are FP4-grid values (the Hadamard + FP4 round trip, kHadamardBf16Fp4,
// applied on the host; fp4 cache rows are on that grid once decoded) and the weights bf16
// values. A product of two such values has a few significant bits, so every q . k is exact in any
// summation order, and the kernel's bf16 steps are the CPU's in its order: the top-k indices must
// equal the CPU's exactly, ties included (the op outputs no scores).
//
// Compressor: inputs bf16 values. The bound (bf16_check): |gpu - cpu| <= 2^-7 |cpu| + 2^-6 max|cpu|
// on the entries before the round trip, and at least 99% of them bit-identical (printed). The
// roundings are the CPU's at the same points, but the pooling's exp (double, within an ulp of the
// CPU's), the norm's reduction order (a block reduction vs the CPU's sequential double sum) and
// the rope's sin and cos can leave an fp32 value next to a bf16 rounding boundary on the other
// side: one bf16 step, at most 2^-7 of the value; a rope pair whose input flipped moves by up to
// a step of its inputs, which may be larger than the output (the atol). The entry round trip and
// the typed cache rows are then checked bitwise against the CPU's round trip and encoder applied
// to the device's own entries of the same steps without them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/fp_codes.h"
#include "bf16_gpu_util.h"
#include "formats/cache_row.h"
#include "ops_gpu_util.h"

namespace dsv4 {
namespace {

using namespace ops_gpu_test;  // NOLINT(google-build-using-namespace): the shared helpers

// Rows of `width` floats through the bf16 mode's Hadamard + FP4 round trip (the indexer's q and
// keys in this mode).
std::vector<float> fp4_grid(std::vector<float> v, int width) {
    cpu_ref::round_trip({v.data(), static_cast<int64_t>(v.size()) / width, width, width, 32,
                         ops::RoundTrip::kHadamardBf16Fp4});
    return v;
}

// ---- Indexer --------------------------------------------------------------------------------

// The bf16 mode's top-k of the tokens of `st` on the GPU and the CPU (6 slots of 2049 entries,
// m = 4), as the model calls it in this mode: q already rotated and rounded (q_rotated), no fused
// rope or scale. Exact ties: repeated keys, zero keys (score exactly 0), and slot 3 with one entry
// in 5 nonzero and its tokens' weights positive (the cut among tied zeros). Keys stored in
// key_format: fp4 rows are rotated and rounded by the encoder itself (the model's indexer
// compressor then has no round trip), the others are given on the FP4 grid.
void indexer_bf16_case(const ops::HostStep& st, int Hi, int hi, int K, uint32_t seed,
                       const char* what, CacheRowFormat key_format = {}) {
    auto be = make_gpu();
    std::mt19937 rng(seed);
    const int S = 6, m = 4, T = st.T();
    const int64_t n_entries = 2049;
    const auto q = fp4_grid(randn(int64_t{T} * Hi * hi, rng), hi);
    auto w = bf16_values(randn(int64_t{T} * Hi, rng, 0.05f));
    auto keys = bf16_values(randn(S * n_entries * hi, rng));
    for (int64_t e = 0; e < 3 * n_entries; e += 7)  // exact duplicates of another entry
        std::copy_n(keys.begin() + ((e * 13) % (3 * n_entries)) * hi, hi, keys.begin() + e * hi);
    for (int64_t e = 5; e < 3 * n_entries; e += 11)
        std::fill_n(keys.begin() + e * hi, hi, 0.0f);  // every dot 0: score exactly 0
    for (int64_t e = 0; e < n_entries; ++e)
        if (e % 5 != 0) std::fill_n(keys.begin() + (3 * n_entries + e) * hi, hi, 0.0f);
    for (int t = 0; t < T; ++t)
        if (st.tok_row[t] == 3)
            for (int h = 0; h < Hi; ++h) w[t * Hi + h] = std::fabs(w[t * Hi + h]);
    if (key_format.type != CacheType::kFp4) keys = fp4_grid(std::move(keys), hi);
    // The keys as the cache stores them (both sides decode the same bytes).
    const std::vector<uint8_t> stored = stored_rows(key_format, hi, keys);
    DevStep ds(*be, st);
    Dev<float> dq(*be, q), dw(*be, w);
    Dev<uint8_t> dk(*be, stored);
    Dev<int32_t> dt(*be, int64_t{T} * K);
    ops::IndexerTopkArgs g;
    g.q = dq.p, g.w = dw.p, g.keys = reinterpret_cast<const float*>(dk.p), g.topk = dt.p;
    g.step = ds.view();
    g.n_entries = n_entries, g.Hi = Hi, g.hi = hi, g.K = K, g.m = m;
    g.key_format = key_format;
    g.q_rotated = true;
    g.round_bf16 = true;
    std::vector<int32_t> ref(int64_t{T} * K), ref_f32(int64_t{T} * K);
    ops::IndexerTopkArgs c = g;
    c.q = q.data(), c.w = w.data(), c.keys = reinterpret_cast<const float*>(stored.data());
    c.topk = ref.data(), c.step = st.view();
    be->indexer_topk(g);
    cpu_ref::indexer_topk(c);
    const std::vector<int32_t> got = dt.get();
    // (The float mode's choice on the CPU, to show what the flag changes: printed only.)
    c.round_bf16 = false;
    c.topk = ref_f32.data();
    cpu_ref::indexer_topk(c);
    int64_t diff = 0, moved = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        diff += got[i] != ref[i];
        moved += ref_f32[i] != ref[i];
    }
    std::printf("[bf16] %s: %lld of %zu indices differ (the float mode's: %lld)\n", what,
                static_cast<long long>(diff), ref.size(), static_cast<long long>(moved));
    EXPECT_EQ(got, ref) << what;
}

// V4's indexer shapes (64 heads x 128 dims), top 512.
TEST(CudaBf16Gpu, IndexerV4ShapesExact) {
    DSV4_REQUIRE_GPU();
    indexer_bf16_case(indexer_cluster_step(), 64, 128, 512, 31,
                      "indexer bf16 V4 shapes K=512, 11 tokens");
}

// mixed_step(): decode rows and prefill chunks in 5 slots at small positions (at most 16 valid
// entries), at V4 shapes and at 5 heads of 64.
TEST(CudaBf16Gpu, IndexerMixedStepExact) {
    DSV4_REQUIRE_GPU();
    indexer_bf16_case(mixed_step(), 64, 128, 7, 37, "indexer bf16 V4 shapes K=7, mixed_step");
    indexer_bf16_case(mixed_step(), 5, 64, 5, 41, "indexer bf16 5x64 K=5, mixed_step");
}

// Decode steps: 6 rows, and one row at 2048 entries.
TEST(CudaBf16Gpu, IndexerDecodeRowsExact) {
    DSV4_REQUIRE_GPU();
    indexer_bf16_case(indexer_decode_step(), 64, 128, 512, 43,
                      "indexer bf16 V4 shapes K=512, 6 decode rows");
    ops::HostStep one;
    one.add_row(1, 8191, 1);
    indexer_bf16_case(one, 64, 128, 512, 47, "indexer bf16 V4 shapes K=512, 1 decode row");
}

// Typed keys (bf16, fp8 per 128, fp4: DeepSeek's own storage in this mode, --indexer-cache fp4),
// both sides decoding the same bytes.
TEST(CudaBf16Gpu, IndexerTypedKeysExact) {
    DSV4_REQUIRE_GPU();
    for (const CacheType type : {CacheType::kFp4, CacheType::kFp8, CacheType::kBf16}) {
        const CacheRowFormat f = index_key_format(type);
        const std::string name(cache_type_name(type));
        indexer_bf16_case(indexer_cluster_step(), 64, 128, 512, 53,
                          ("indexer bf16 V4 " + name + " keys, 11 tokens").c_str(), f);
        indexer_bf16_case(indexer_decode_step(), 64, 128, 512, 59,
                          ("indexer bf16 V4 " + name + " keys, 6 decode rows").c_str(), f);
    }
}

// ---- Compressor -----------------------------------------------------------------------------

struct Bf16CompressCase {
    int coff = 2, m = 4, hd = 128, rope_dim = 64;
    bool with_norm = true;
    ops::RoundTrip entry_round_trip = ops::RoundTrip::kNone;
    CacheRowFormat entry_format{};
};

// Two consecutive steps from empty states (as run_compress): mixed_step(), then rows continuing
// slots 0, 2 and 4. CSA (m = 4) and HCA at m = 7 complete entries in both.
std::vector<ops::HostStep> two_steps() {
    std::vector<ops::HostStep> steps(2);
    steps[0] = mixed_step();
    steps[1].add_row(0, 9, 1);
    steps[1].add_row(2, 39, 17);
    steps[1].add_row(4, 23, 1);
    return steps;
}

// HCA at V4's m = 128: a prefill chunk across a block end, a row starting inside its block (the
// rows before it empty), a lone completing token; then the first chunk's row continued to the
// next block end and two more lone tokens.
std::vector<ops::HostStep> hca128_steps() {
    std::vector<ops::HostStep> steps(2);
    steps[0].add_row(0, 0, 130);
    steps[0].add_row(1, 100, 40);
    steps[0].add_row(2, 255, 1);
    steps[1].add_row(0, 130, 126);
    steps[1].add_row(3, 383, 1);
    steps[1].add_row(1, 140, 1);
    return steps;
}

// The (slot, entry) pairs the steps complete, in order.
std::vector<std::pair<int, int64_t>> completed(const std::vector<ops::HostStep>& steps, int m) {
    std::vector<std::pair<int, int64_t>> out;
    for (const ops::HostStep& st : steps)
        for (int b = 0; b < st.B(); ++b)
            for (int i = 0; i < st.row_len[b]; ++i) {
                const int64_t p = st.row_pos0[b] + i;
                if (p % m == m - 1) out.emplace_back(st.row_slot[b], p / m);
            }
    return out;
}

// The steps through the compressor with round_bf16 on the GPU and the CPU, as configured and
// plain (no entry round trip, f32 entries). Checks: the states bitwise; the plain entries within
// the bf16 bound; the configured entries bitwise the CPU's round trip and encoder applied to the
// device's plain entries; prints how many of them equal the CPU compressor's.
void compress_bf16_case(const char* what, const Bf16CompressCase& c,
                        const std::vector<ops::HostStep>& steps, uint32_t seed) {
    auto be = make_gpu();
    std::mt19937 rng(seed);
    const int coff = c.coff, m = c.m, hd = c.hd, rd = c.rope_dim, width = coff * hd;
    int S = 0;
    for (const ops::HostStep& st : steps)
        for (int32_t s : st.row_slot) S = std::max(S, s + 1);
    const int64_t n_entries = 30, state = int64_t{coff} * m * width;
    const auto ape = bf16_values(randn(m * width, rng)), norm = bf16_values(randn(hd, rng));
    std::vector<float> inv(std::max(1, rd / 2));
    for (int i = 0; i < rd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rd);
    const std::vector<float> kv0(S * state, 0.0f),
        gate0(S * state, -std::numeric_limits<float>::infinity()), ent0(S * n_entries * hd, 0.0f);
    std::vector<float> ref_kv = kv0, ref_gate = gate0, ref_ent = ent0;
    std::vector<float> refp_kv = kv0, refp_gate = gate0, refp_ent = ent0;
    Dev<float> dape(*be, ape), dnorm(*be, norm), dinv(*be, inv);
    Dev<float> dskv(*be, kv0), dsgate(*be, gate0), dent(*be, ent0);
    Dev<float> pskv(*be, kv0), psgate(*be, gate0), pent(*be, ent0);
    for (const ops::HostStep& st : steps) {
        const auto kv = bf16_values(randn(int64_t{st.T()} * width, rng));
        const auto gate = bf16_values(randn(int64_t{st.T()} * width, rng));
        DevStep ds(*be, st);
        Dev<float> dkv(*be, kv), dgate(*be, gate);
        ops::CompressArgs a;
        a.n_entries = n_entries;
        a.m = m;
        a.hd = hd;
        a.coff = coff;
        a.rope_dim = rd;
        a.rope_scale = 1.0f;
        a.entry_round_trip = c.entry_round_trip;
        a.entry_format = c.entry_format;
        a.round_bf16 = true;
        ops::CompressArgs g = a, r = a;
        g.kv = dkv.p, g.gate = dgate.p, g.ape = dape.p, g.norm = c.with_norm ? dnorm.p : nullptr;
        g.inv_freq = dinv.p, g.state_kv = dskv.p, g.state_gate = dsgate.p, g.entries = dent.p;
        g.step = ds.view();
        r.kv = kv.data(), r.gate = gate.data(), r.ape = ape.data();
        r.norm = c.with_norm ? norm.data() : nullptr;
        r.inv_freq = inv.data(), r.state_kv = ref_kv.data(), r.state_gate = ref_gate.data();
        r.entries = ref_ent.data(), r.step = st.view();
        ops::CompressArgs gp = g, rp = r;  // plain: no round trip, f32 entries
        gp.entry_round_trip = rp.entry_round_trip = ops::RoundTrip::kNone;
        gp.entry_format = rp.entry_format = CacheRowFormat{};
        gp.state_kv = pskv.p, gp.state_gate = psgate.p, gp.entries = pent.p;
        rp.state_kv = refp_kv.data(), rp.state_gate = refp_gate.data(),
        rp.entries = refp_ent.data();
        be->compress(g);
        be->compress(gp);
        cpu_ref::compress(r);
        cpu_ref::compress(rp);
    }
    const std::vector<float> gpu_ent = dent.get(), gpu_plain = pent.get();
    EXPECT_EQ(dskv.get(), ref_kv) << what;
    EXPECT_EQ(dsgate.get(), ref_gate) << what;
    // The completed entries' rows, plain.
    const auto done = completed(steps, m);
    ASSERT_FALSE(done.empty()) << what;
    const int64_t rows = static_cast<int64_t>(done.size());
    std::vector<float> gp(rows * hd), cp(rows * hd);
    for (int64_t i = 0; i < rows; ++i) {
        const int64_t at = (done[i].first * n_entries + done[i].second) * hd;
        std::copy_n(gpu_plain.begin() + at, hd, gp.begin() + i * hd);
        std::copy_n(refp_ent.begin() + at, hd, cp.begin() + i * hd);
    }
    bf16_check((std::string(what) + ", entries").c_str(), gp, cp, 0x1p-6 * max_abs(cp), 0.99);
    if (c.entry_round_trip == ops::RoundTrip::kNone && c.entry_format.type == CacheType::kF32)
        return;
    // The device's own plain entries through the CPU's round trip and encoder: its entries
    // exactly. (CPU compressor: the same round trip and encoder of its own plain entries.)
    std::vector<float> own = gp;
    if (c.entry_round_trip == ops::RoundTrip::kFp8)
        cpu_ref::round_trip({own.data(), rows, hd, hd - rd, 64, ops::RoundTrip::kFp8});
    else if (c.entry_round_trip != ops::RoundTrip::kNone)
        cpu_ref::round_trip({own.data(), rows, hd, hd, 32, c.entry_round_trip});
    const int64_t rb = cache_row_bytes(c.entry_format, hd);
    const std::vector<uint8_t> want = stored_rows(c.entry_format, hd, own);
    const auto* got = reinterpret_cast<const uint8_t*>(gpu_ent.data());
    const auto* cpu = reinterpret_cast<const uint8_t*>(ref_ent.data());
    int64_t diff = 0, diff_cpu = 0;
    for (int64_t i = 0; i < rows; ++i) {
        // Typed rows lie cache_row_bytes apart in the entries' storage (f32: hd floats apart).
        const int64_t at = (done[i].first * n_entries + done[i].second) * rb;
        for (int64_t k = 0; k < rb; ++k) {
            diff += got[at + k] != want[i * rb + k];
            diff_cpu += got[at + k] != cpu[at + k];
        }
    }
    std::printf(
        "[bf16] %-44s stored: %lld of %lld bytes differ from the CPU round trip and "
        "encoder of its own entries (%lld from the CPU compressor's)\n",
        what, static_cast<long long>(diff), static_cast<long long>(rows * rb),
        static_cast<long long>(diff_cpu));
    EXPECT_EQ(diff, 0) << what;
}

TEST(CudaBf16Gpu, CompressCsaWithNormRope) {
    DSV4_REQUIRE_GPU();
    compress_bf16_case("compress bf16 CSA m=4 hd=128 norm+rope", {2, 4, 128, 64, true}, two_steps(),
                       61);
    compress_bf16_case("compress bf16 CSA m=4 hd=36 pooled", {2, 4, 36, 12, false}, two_steps(),
                       67);
}

TEST(CudaBf16Gpu, CompressHca) {
    DSV4_REQUIRE_GPU();
    compress_bf16_case("compress bf16 HCA m=7 hd=192 norm+rope", {1, 7, 192, 64, true}, two_steps(),
                       71);
    compress_bf16_case("compress bf16 HCA m=7 hd=36 pooled", {1, 7, 36, 12, false}, two_steps(),
                       73);
    compress_bf16_case("compress bf16 HCA m=128 hd=512 norm+rope", {1, 128, 512, 64, true},
                       hca128_steps(), 79);
}

// The entry round trips of this mode: the indexer's keys Hadamard + bf16 + FP4 per 32 (CSA, V4's
// 128 dims), the main entries' NoPE dims FP8 per 64 (f32 cache rows; CSA and HCA at V4's 512).
TEST(CudaBf16Gpu, CompressEntryRoundTrips) {
    DSV4_REQUIRE_GPU();
    compress_bf16_case("compress bf16 CSA hd=128 Hadamard bf16 FP4",
                       {2, 4, 128, 64, true, ops::RoundTrip::kHadamardBf16Fp4}, two_steps(), 83);
    compress_bf16_case("compress bf16 CSA hd=512 FP8", {2, 4, 512, 64, true, ops::RoundTrip::kFp8},
                       two_steps(), 89);
    compress_bf16_case("compress bf16 HCA m=7 hd=512 FP8",
                       {1, 7, 512, 64, true, ops::RoundTrip::kFp8}, two_steps(), 97);
}

// Typed entries as the model stores them in this mode: fp8 K=V rows (no round trip: the row is
// it), bf16 K=V rows after the FP8 round trip, fp4 indexer keys (the encoder rotates), fp8
// indexer keys after the Hadamard + bf16 + FP4 round trip.
TEST(CudaBf16Gpu, CompressTypedEntries) {
    DSV4_REQUIRE_GPU();
    compress_bf16_case(
        "compress bf16 HCA m=7 hd=512 fp8 rows",
        {1, 7, 512, 64, true, ops::RoundTrip::kNone, kv_row_format(CacheType::kFp8, 64)},
        two_steps(), 101);
    compress_bf16_case(
        "compress bf16 CSA hd=128 FP8 + bf16 rows",
        {2, 4, 128, 64, true, ops::RoundTrip::kFp8, kv_row_format(CacheType::kBf16, 64)},
        two_steps(), 103);
    compress_bf16_case(
        "compress bf16 CSA hd=128 fp4 keys",
        {2, 4, 128, 64, true, ops::RoundTrip::kNone, index_key_format(CacheType::kFp4)},
        two_steps(), 107);
    compress_bf16_case(
        "compress bf16 CSA hd=128 Hadamard FP4 + fp8 keys",
        {2, 4, 128, 64, true, ops::RoundTrip::kHadamardBf16Fp4, index_key_format(CacheType::kFp8)},
        two_steps(), 109);
}

}  // namespace
}  // namespace dsv4
