// The CUDA backend's reference-numerics ops and the sampler against the CPU reference on random
// inputs with odd sizes: the round trips (FP8, Hadamard + FP4) and the FP8 activation copy
// bitwise; the compressor's entry round trip bitwise against the CPU round trip of the device's
// own pooled entries (and within one code step of the full CPU compressor); sampling with every
// top_k up to V = 129280, top_p cuts, ties and speculative drafts: ids and generator states
// equal. Why each comparison can be exact: docs/numerics-cuda.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels/quant/round_trip.h"
#include "base/fp_codes.h"
#include "cuda_test_util.h"
#include "ops_gpu_util.h"

namespace dsv4 {
namespace {

using namespace ops_gpu_test;  // NOLINT(google-build-using-namespace): the shared helpers

std::vector<uint32_t> bits(const std::vector<float>& v) {
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    return b;
}

// Bitwise equality, with the count and the first difference in the message.
void expect_bitwise(const char* what, const std::vector<float>& gpu,
                    const std::vector<float>& ref) {
    ASSERT_EQ(gpu.size(), ref.size()) << what;
    const auto g = bits(gpu), r = bits(ref);
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < r.size(); ++i)
        if (g[i] != r[i] && diff++ == 0) first = i;
    std::printf("[numerics] %-40s n=%zu: %zu values differ\n", what, r.size(), diff);
    EXPECT_EQ(diff, 0u) << what << ": first at " << first << ": gpu " << gpu[first] << " ref "
                        << ref[first];
}

// Values that exercise the roundings: a per-block scale over many binades, all-zero blocks,
// blocks under the scale floors (1e-4 for FP8), and exact E4M3 / E2M1 midpoints (ties).
std::vector<float> awkward_rows(int64_t rows, int width, int block, std::mt19937& rng) {
    std::normal_distribution<float> n01(0.0f, 1.0f);
    std::uniform_int_distribution<int> binade(-30, 12), pick(0, 9);
    std::vector<float> x(rows * width);
    for (int64_t r = 0; r < rows; ++r)
        for (int b = 0; b < width; b += block) {
            const int kind = pick(rng);
            const float s = std::ldexp(1.0f, binade(rng));
            for (int i = b; i < std::min(b + block, width); ++i) {
                float& v = x[r * width + i];
                if (kind == 0)
                    v = 0.0f;
                else if (kind == 1)
                    v = n01(rng) * 1e-6f;
                else if (kind == 2)  // amax 448 (scale 1): E4M3 midpoints such as 1.0625
                    v = i == b ? 448.0f
                               : (1.0f + (2 * static_cast<int>(rng() % 8) + 1) / 16.0f) *
                                     std::ldexp(1.0f, static_cast<int>(rng() % 8) - 4) *
                                     (rng() % 2 ? 1.0f : -1.0f);
                else if (kind == 3)  // amax 6 (scale 1): E2M1 midpoints 0.25, 0.75, ..., 5
                    v = i == b
                            ? 6.0f
                            : std::vector<
                                  float>{0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f}[rng() % 7] *
                                  (rng() % 2 ? 1.0f : -1.0f);
                else
                    v = n01(rng) * s;
            }
        }
    return x;
}

void round_trip_case(const char* what, int64_t rows, int width, int dims, int block,
                     ops::RoundTrip kind, uint32_t seed) {
    auto be = make_gpu();
    std::mt19937 rng(seed);
    auto x = awkward_rows(rows, width, block, rng);
    Dev<float> dx(*be, x);
    be->round_trip({dx.p, rows, width, dims, block, kind});
    cpu_ref::round_trip({x.data(), rows, width, dims, block, kind});
    expect_bitwise(what, dx.get(), x);
}

TEST(CudaNumericsGpu, RoundTripFp8Bitwise) {
    DSV4_REQUIRE_GPU();
    round_trip_case("round trip FP8 512 (448 NoPE) /64", 37, 512, 448, 64, ops::RoundTrip::kFp8, 1);
    round_trip_case("round trip FP8 200 (192) /64", 11, 200, 192, 64, ops::RoundTrip::kFp8, 2);
    round_trip_case("round trip FP8 384 /128", 5, 384, 384, 128, ops::RoundTrip::kFp8, 3);
    round_trip_case("round trip FP8 96 /32", 1, 96, 96, 32, ops::RoundTrip::kFp8, 4);
}

TEST(CudaNumericsGpu, RoundTripHadamardFp4Bitwise) {
    DSV4_REQUIRE_GPU();
    round_trip_case("round trip Hadamard FP4 128 /32", 23, 128, 128, 32,
                    ops::RoundTrip::kHadamardFp4, 5);
    round_trip_case("round trip Hadamard FP4 64 /32", 7, 64, 64, 32, ops::RoundTrip::kHadamardFp4,
                    6);
    round_trip_case("round trip Hadamard FP4 512 /32", 3, 512, 512, 32,
                    ops::RoundTrip::kHadamardFp4, 7);
}

TEST(CudaNumericsGpu, ActFp8CopyBitwise) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(8);
    const cudaStream_t stream = cuda_backend_stream(*be);
    for (const auto& [M, K, ldx] : {std::tuple<int64_t, int64_t, int64_t>{5, 1000, 1003},
                                    {3, 384, 384},
                                    {1, 7168, 7200},
                                    {9, 77, 80}}) {
        const auto x = awkward_rows(M, static_cast<int>(ldx), 128, rng);
        Dev<float> dx(*be, x), dout(*be, M * K);
        cuda::launch_act_fp8_copy(dx.p, ldx, dout.p, M, K, stream);
        std::vector<float> ref(M * K);
        cpu_ref::fp8_activations(x.data(), M, K, ldx, ref.data());
        const std::string what = "act_fp8 copy M=" + std::to_string(M) + " K=" + std::to_string(K);
        expect_bitwise(what.c_str(), dout.get(), ref);
    }
}

// Two steps through the compressor with the entry round trip. The device's round trip inside
// the kernel must be bitwise the CPU round trip of the device's own pooled (and normed, roped)
// entries, which a second device run without the round trip provides; against the full CPU
// compressor the pooled values may differ by an ulp (the compress tolerance), which can move a
// value to the neighbouring code: at most one code step (two for a flipped block scale).
void compress_round_trip_case(const char* what, int coff, int m, int hd, int rd,
                              ops::RoundTrip kind) {
    auto be = make_gpu();
    const CompressRun run = run_compress(*be, {coff, m, hd, rd, true, kind}, 20 + coff * 10 + m);
    EXPECT_EQ(run.gpu_kv, run.ref_kv) << what;
    EXPECT_EQ(run.gpu_gate, run.ref_gate) << what;
    const bool fp8 = kind == ops::RoundTrip::kFp8;
    const int dims = fp8 ? hd - rd : hd, block = fp8 ? 64 : 32;
    const int64_t rows = static_cast<int64_t>(run.ref_entries.size()) / hd;
    auto own = run.gpu_plain_entries;
    cpu_ref::round_trip({own.data(), rows, hd, dims, block, kind});
    expect_bitwise(what, run.gpu_entries, own);
    // Against the full CPU compressor: one code step at the block's scale (two for a flipped
    // scale); the RoPE dims of FP8 entries with the compress tolerance.
    const auto& ref_all = run.ref_entries;
    int64_t bad = 0, moved = 0;
    const float atol = 1e-6f + 1e-6f * max_abs(ref_all);
    for (int64_t e = 0; e < rows; ++e)
        for (int c = 0; c < hd; ++c) {
            const float ref = ref_all[e * hd + c];
            const float err = std::fabs(run.gpu_entries[e * hd + c] - ref);
            float tol = atol;
            if (c < dims) {
                const float* blk = &ref_all[e * hd + c / block * block];
                float amax = 0;
                for (int i = 0; i < block; ++i) amax = std::max(amax, std::fabs(blk[i]));
                const float s = fp8 ? fp8_block_scale(amax) : fp4_block_scale(amax);
                tol = 2.0f * (fp8 ? std::max(std::fabs(ref) / 8.0f, s / 512.0f) : 2.0f * s);
            }
            moved += err > 0;
            bad += !(err <= tol);
        }
    std::printf("[numerics] %-40s vs CPU compress: %lld values differ, %lld beyond a code step\n",
                what, static_cast<long long>(moved), static_cast<long long>(bad));
    EXPECT_EQ(bad, 0) << what;
}

TEST(CudaNumericsGpu, CompressEntryRoundTripFp8) {
    DSV4_REQUIRE_GPU();
    compress_round_trip_case("compress CSA m=4 hd=140 FP8", 2, 4, 140, 12, ops::RoundTrip::kFp8);
    compress_round_trip_case("compress HCA m=7 hd=192 FP8", 1, 7, 192, 64, ops::RoundTrip::kFp8);
}

TEST(CudaNumericsGpu, CompressEntryRoundTripHadamardFp4) {
    DSV4_REQUIRE_GPU();
    compress_round_trip_case("compress CSA m=4 hd=64 Hadamard FP4", 2, 4, 64, 16,
                             ops::RoundTrip::kHadamardFp4);
    compress_round_trip_case("compress CSA m=4 hd=128 Hadamard FP4", 2, 4, 128, 64,
                             ops::RoundTrip::kHadamardFp4);
}

// Logits for one row of the sampling tests: normal at a spread, some rows quantised to
// multiples of 1/4 (many exact ties, ordered by id), some with a planted run of equal maxima,
// some flat (every logit in [8, 8.5): one bin of the sampler's histogram holds the whole row,
// more members than its shared-memory list takes at V = 129280).
std::vector<float> sample_logits(int64_t R, int64_t V, std::mt19937& rng) {
    std::vector<float> l(R * V);
    for (int64_t r = 0; r < R; ++r) {
        const float sigma = (r % 3 == 0) ? 1.0f : (r % 3 == 1 ? 3.0f : 8.0f);
        std::normal_distribution<float> d(0.0f, sigma);
        float* row = l.data() + r * V;
        for (int64_t i = 0; i < V; ++i) row[i] = d(rng);
        if (r % 4 == 1)
            for (int64_t i = 0; i < V; ++i) row[i] = std::round(row[i] * 4.0f) / 4.0f;
        if (r % 5 == 2)
            for (int i = 0; i < 9; ++i) row[(rng() % V)] = 40.0f;
        if (r % 7 == 3) {
            std::uniform_real_distribution<float> flat(8.0f, 8.5f);
            for (int64_t i = 0; i < V; ++i) row[i] = flat(rng);
        }
    }
    return l;
}

constexpr int32_t kArgmaxDraft = -2, kSecondDraft = -3;

struct SampleRun {
    int64_t rows = 0, mismatches = 0;
};

// `rounds` draws of the rows (fresh logits each round, the generators advancing), every id and
// the final generator states equal to the CPU's.
SampleRun sample_rounds(Backend& be, int64_t V, const std::vector<SamplingParams>& params,
                        const std::vector<int32_t>& drafts, int rounds, uint32_t seed,
                        const char* what) {
    std::mt19937 rng(seed);
    const int64_t R = static_cast<int64_t>(params.size());
    const int S = static_cast<int>(R) + 3;
    std::vector<int32_t> slot(R);
    for (int64_t r = 0; r < R; ++r) slot[r] = static_cast<int32_t>((r * 7 + 2) % S);  // distinct
    std::vector<uint64_t> state(S * 4);
    for (int s = 0; s < S; ++s) ops::seed_rng(seed * 1000 + s, state.data() + 4 * s);
    Dev<SamplingParams> dp(be, params);
    Dev<int32_t> dslot(be, slot), dout(be, R),
        ddraft(be, drafts.empty() ? std::vector<int32_t>(R, -1) : drafts);
    Dev<uint64_t> drng(be, state);
    Dev<float> dl(be, R * V);
    std::vector<int32_t> ref(R);
    SampleRun run;
    for (int round = 0; round < rounds; ++round) {
        auto logits = sample_logits(R, V, rng);
        if (round % 2 == 1) {  // non-finite rows: -1, no draw
            logits[0 * V + V / 3] = std::numeric_limits<float>::quiet_NaN();
            logits[(R - 1) * V + V - 1] = -std::numeric_limits<float>::infinity();
        }
        dl.set(logits);
        // Draft codes: kArgmaxDraft / kSecondDraft stand for the row's best / second-best id.
        std::vector<int32_t> dr = drafts;
        for (int64_t r = 0; r < static_cast<int64_t>(dr.size()); ++r) {
            if (dr[r] != kArgmaxDraft && dr[r] != kSecondDraft) continue;
            const float* row = logits.data() + r * V;
            int64_t a = 0, b = -1;
            for (int64_t i = 1; i < V; ++i) {
                if (row[i] > row[a]) {
                    b = a;
                    a = i;
                } else if (b < 0 || row[i] > row[b]) {
                    b = i;
                }
            }
            dr[r] = static_cast<int32_t>(dr[r] == kArgmaxDraft ? a : b);
        }
        if (!dr.empty()) ddraft.set(dr);
        const int32_t* dd = drafts.empty() ? nullptr : ddraft.p;
        be.sample({dl.p, dp.p, dslot.p, drng.p, dout.p, R, V, dd});
        cpu_ref::sample({logits.data(), params.data(), slot.data(), state.data(), ref.data(), R, V,
                         dr.empty() ? nullptr : dr.data()});
        const auto got = dout.get();
        for (int64_t r = 0; r < R; ++r) {
            run.mismatches += got[r] != ref[r];
            EXPECT_EQ(got[r], ref[r])
                << what << " round " << round << " row " << r << ": T " << params[r].temperature
                << " top_k " << params[r].top_k << " top_p " << params[r].top_p << " draft "
                << (dr.empty() ? -1 : dr[r]);
        }
        if (round % 2 == 1) {
            EXPECT_EQ(got[0], -1);
            EXPECT_EQ(got[R - 1], -1);
        }
        run.rows += R;
    }
    EXPECT_EQ(drng.get(), state) << what;
    std::printf("[numerics] %-40s %lld rows: %lld ids differ\n", what,
                static_cast<long long>(run.rows), static_cast<long long>(run.mismatches));
    return run;
}

// Every top_k in {0, 1, 7, 1024, 5000, V} with top_p in {1, 0.9, 0.5}, at several temperatures.
std::vector<SamplingParams> sample_grid(int64_t V) {
    std::vector<SamplingParams> p;
    const float temps[] = {1.0f, 0.7f, 1.5f, 0.05f};
    int t = 0;
    for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1024}, int64_t{5000}, V})
        for (float top_p : {1.0f, 0.9f, 0.5f})
            p.push_back({temps[t++ % 4], static_cast<int>(k), top_p, 0});
    p.push_back({0.0f, 50, 0.9f, 0});  // greedy
    p.push_back({0.8f, 1023, 0.95f, 0});
    p.push_back({0.8f, 1025, 0.95f, 0});
    return p;
}

TEST(CudaNumericsGpu, SampleEveryTopKSmallVocab) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    sample_rounds(*be, 512, sample_grid(512), {}, 16, 31, "sample V=512");
}

// Each large-vocabulary case twice: one launch a row (a backend without step scratch), then the
// split first pass (sample.h: many blocks a row scan slices first; prepare_steps gives the
// scratch), the same draws and the same ids.
TEST(CudaNumericsGpu, SampleEveryTopKFullVocab) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    const auto grid = sample_grid(129280);
    sample_rounds(*be, 129280, grid, {}, 6, 32, "sample V=129280");
    ASSERT_TRUE(be->prepare_steps(static_cast<int64_t>(grid.size())).is_ok());
    sample_rounds(*be, 129280, grid, {}, 6, 32, "sample V=129280, split scan");
}

// More rows than the split pass builds histograms for (the rows' own blocks build them, after
// the split first pass).
TEST(CudaNumericsGpu, SampleManyRowsFullVocab) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    const int64_t V = 129280;
    const auto grid = sample_grid(V);
    std::vector<SamplingParams> p;
    while (p.size() < 70) p.push_back(grid[p.size() % grid.size()]);
    ASSERT_TRUE(be->prepare_steps(static_cast<int64_t>(p.size())).is_ok());
    sample_rounds(*be, V, p, {}, 2, 34, "sample V=129280, 70 rows");
}

TEST(CudaNumericsGpu, SampleOddVocabLargeTopK) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    const int64_t V = 3001;
    std::vector<SamplingParams> p;
    for (int k : {0, 1025, 2999, 3001, 100000})
        for (float top_p : {1.0f, 0.99f, 0.3f, 0.0f}) p.push_back({0.9f, k, top_p, 0});
    sample_rounds(*be, V, p, {}, 12, 33, "sample V=3001 top_k > 1024");
    // (V % 4 != 0: the split scan's scalar loads)
    ASSERT_TRUE(be->prepare_steps(static_cast<int64_t>(p.size())).is_ok());
    sample_rounds(*be, V, p, {}, 12, 33, "sample V=3001 top_k > 1024, split scan");
}

// Speculative verification: drafts that are the arg-max (usually kept), random ids (usually
// rejected, in or out of the top-k / top-p set), the last id, none (-1), on greedy rows too.
void draft_case(int64_t V, int rounds, uint32_t seed, const char* what, bool split = false) {
    auto be = make_gpu();
    if (split) {
        ASSERT_TRUE(be->prepare_steps(64).is_ok());
    }
    std::mt19937 rng(seed);
    auto params = sample_grid(V);
    std::vector<int32_t> drafts(params.size());
    for (size_t r = 0; r < drafts.size(); ++r) {
        switch (r % 6) {
            case 0:
                drafts[r] = static_cast<int32_t>(rng() % V);
                break;
            case 1:
                drafts[r] = -1;
                break;
            case 2:
                drafts[r] = static_cast<int32_t>(V - 1);
                break;
            case 3:
                drafts[r] = kArgmaxDraft;
                break;
            case 4:
                drafts[r] = kSecondDraft;
                break;
            default:
                drafts[r] = static_cast<int32_t>(rng() % 16);
                break;
        }
    }
    sample_rounds(*be, V, params, drafts, rounds, seed, what);
}

TEST(CudaNumericsGpu, SampleDraftVerificationSmallVocab) {
    DSV4_REQUIRE_GPU();
    draft_case(512, 16, 41, "sample drafts V=512");
}

TEST(CudaNumericsGpu, SampleDraftVerificationFullVocab) {
    DSV4_REQUIRE_GPU();
    draft_case(129280, 4, 42, "sample drafts V=129280");
    draft_case(129280, 4, 42, "sample drafts V=129280, split scan", true);
}

// The new kernels hold no allocation and no host synchronisation: captured into a CUDA graph
// under global capture mode (any synchronising call would break the capture) and replayed from
// the same starting state, they give bitwise the direct run's results (round trips, the FP8
// copy, radix-path sampling with drafts, after the split first pass).
TEST(CudaNumericsGpu, CapturedInAGraph) {
    DSV4_REQUIRE_GPU();
    auto be = make_gpu();
    std::mt19937 rng(50);
    const int64_t R = 6, V = 40000, rows = 9;
    ASSERT_TRUE(be->prepare_steps(R).is_ok());  // (the sampler's split scan, as a step runs it)
    const auto x0 = awkward_rows(rows, 128, 32, rng);
    const auto logits = sample_logits(R, V, rng);
    std::vector<SamplingParams> params = {{1.0f, 0, 1.0f, 0},   {0.7f, 5000, 0.9f, 0},
                                          {1.2f, 0, 0.5f, 0},   {0.9f, 1025, 1.0f, 0},
                                          {1.0f, 20, 0.95f, 0}, {0.0f, 0, 1.0f, 0}};
    std::vector<int32_t> slots = {0, 1, 2, 3, 4, 5}, drafts = {7, -1, 123, 39999, 2, 5};
    std::vector<uint64_t> gen0(R * 4);
    for (int s = 0; s < R; ++s) ops::seed_rng(77 + s, gen0.data() + 4 * s);
    Dev<float> x(*be, x0), y(*be, x0), xq(*be, rows * 120), dlog(*be, logits);
    Dev<SamplingParams> dp(*be, params);
    Dev<int32_t> dslots(*be, slots), ddraft(*be, drafts), ids(*be, R);
    Dev<uint64_t> gen(*be, gen0);
    const cudaStream_t s = cuda_backend_stream(*be);
    auto reset = [&] {
        x.set(x0);
        y.set(x0);
        gen.set(gen0);
    };
    auto run = [&] {
        be->round_trip({x.p, rows, 128, 96, 32, ops::RoundTrip::kFp8});
        be->round_trip({y.p, rows, 128, 128, 32, ops::RoundTrip::kHadamardFp4});
        cuda::launch_act_fp8_copy(y.p, 128, xq.p, rows, 120, s);
        be->sample({dlog.p, dp.p, dslots.p, gen.p, ids.p, R, V, ddraft.p});
    };
    reset();
    run();
    const auto want_x = x.get(), want_y = y.get(), want_xq = xq.get();
    const auto want_ids = ids.get();
    const auto want_gen = gen.get();
    cuda::CudaGraph graph;
    reset();
    ASSERT_TRUE(capture_graph(s, run, &graph));
    for (int replay = 0; replay < 2; ++replay) {
        reset();
        be->fill(xq.p, 0.0f, static_cast<int64_t>(xq.n));
        graph.launch(s);
        EXPECT_EQ(bits(x.get()), bits(want_x)) << replay;
        EXPECT_EQ(bits(y.get()), bits(want_y)) << replay;
        EXPECT_EQ(bits(xq.get()), bits(want_xq)) << replay;
        EXPECT_EQ(ids.get(), want_ids) << replay;
        EXPECT_EQ(gen.get(), want_gen) << replay;
    }
}

}  // namespace
}  // namespace dsv4
