// Cache row formats (formats/cache_row.h): every typed row decodes to exactly the reference
// round trip of the values written, the ops read and write them, the pool sizes follow, and
// how often fp8 / fp4 indexer keys change the indexer's choice against float keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/ref/ref_ops.h"
#include "base/fp_codes.h"
#include "model/cache_pool.h"
#include "unit_util.h"

namespace dsv4 {
namespace {

bool same_bits(float a, float b) {
    return std::memcmp(&a, &b, 4) == 0;
}

// Rows with blocks of very different magnitudes: tiny ones (below the FP8 scale floor), zeros,
// large ones, so every scale path is taken.
std::vector<float> varied_rows(int rows, int width, uint64_t seed) {
    std::vector<float> x = unit::lcg_values(int64_t{rows} * width, seed);
    const float mags[] = {1.0f, 1e-7f, 0.0f, 37.0f, 3e-3f, 1e3f, 0.5f};
    for (int r = 0; r < rows; ++r)
        for (int i = 0; i < width; ++i) x[r * width + i] *= mags[(r + i / 32) % 7];
    return x;
}

TEST(CacheRow, TypeNamesRoundTrip) {
    for (const char* n : {"f32", "bf16", "fp8", "fp4"}) {
        const auto t = cache_type_from_name(n);
        ASSERT_TRUE(t.has_value()) << n;
        EXPECT_EQ(cache_type_name(*t), n);
    }
    EXPECT_FALSE(cache_type_from_name("fp16").has_value());
}

TEST(CacheRow, Bytes) {
    // DeepSeek's entry: 448 FP8 + 64 bf16 RoPE (128 B) + 7 scales + 1 pad.
    EXPECT_EQ(cache_row_bytes(kv_row_format(CacheType::kFp8, 64), 512), 584);
    EXPECT_EQ(cache_row_bytes(kv_row_format(CacheType::kFp8, 64), 192), 128 + 128 + 2 + 2);
    EXPECT_EQ(cache_row_bytes(kv_row_format(CacheType::kBf16, 64), 512), 1024);
    EXPECT_EQ(cache_row_bytes(kv_row_format(CacheType::kF32, 64), 512), 2048);
    EXPECT_EQ(cache_row_bytes(index_key_format(CacheType::kFp8), 128), 128 + 1 + 3);
    EXPECT_EQ(cache_row_bytes(index_key_format(CacheType::kFp4), 128), 64 + 4);
    EXPECT_NE(cache_row_unsupported(index_key_format(CacheType::kFp4), 96), "");
    EXPECT_NE(cache_row_unsupported(kv_row_format(CacheType::kFp8, 64), 64), "");
}

TEST(CacheRow, Fp8EntryIsTheReferenceRoundTripWithBf16Rope) {
    // hd 64 / rd 16 (kjv-tiny): one short block of 48.
    for (const auto& [hd, rd] : {std::pair{512, 64}, std::pair{192, 64}, std::pair{64, 16}}) {
        const int rows = 21, block = std::min(64, hd - rd);
        const CacheRowFormat f = kv_row_format(CacheType::kFp8, rd);
        std::vector<float> x = varied_rows(rows, hd, hd), want = x, got(x.size());
        cpu_ref::round_trip({want.data(), rows, hd, hd - rd, block, ops::RoundTrip::kFp8});
        std::vector<uint8_t> row(cache_row_bytes(f, hd));
        for (int r = 0; r < rows; ++r) {
            encode_cache_row(f, hd, x.data() + r * hd, row.data());
            decode_cache_row(f, hd, row.data(), got.data() + r * hd);
        }
        for (int r = 0; r < rows; ++r)
            for (int i = 0; i < hd; ++i) {
                const int k = r * hd + i;
                const float w = i < hd - rd ? want[k] : bf16_to_f32(f32_to_bf16(x[k]));
                ASSERT_TRUE(same_bits(got[k], w)) << hd << " " << r << " " << i;
            }
    }
}

TEST(CacheRow, IndexKeysAreTheReferenceRoundTrips) {
    const int hi = 128, rows = 21;
    std::vector<float> x = varied_rows(rows, hi, 7);
    struct Case {
        CacheType type;
        ops::RoundTrip rt;
        int block;
    };
    for (const Case c : {Case{CacheType::kFp8, ops::RoundTrip::kFp8, 128},
                         Case{CacheType::kFp4, ops::RoundTrip::kHadamardFp4, 32}}) {
        std::vector<float> want = x, got(x.size());
        cpu_ref::round_trip({want.data(), rows, hi, hi, c.block, c.rt});
        for (int r = 0; r < rows; ++r)
            store_and_load_row(index_key_format(c.type), hi, x.data() + r * hi,
                               got.data() + r * hi);
        for (size_t k = 0; k < x.size(); ++k)
            ASSERT_TRUE(same_bits(got[k], want[k])) << cache_type_name(c.type) << " " << k;
    }
}

// Attention over typed rows (ring, entries, the step's own keys) equals attention over float
// rows holding what those rows decode to, bit for bit; ring_write stores encoded rows.
TEST(CacheRow, AttentionReadsAndRingWriteWritesTypedRows) {
    const int H = 2, hd = 192, rd = 64, W = 4, m = 2, T = 3;
    const int64_t n_entries = 8, pos0 = 9;
    for (const CacheType type : {CacheType::kBf16, CacheType::kFp8}) {
        const CacheRowFormat f = kv_row_format(type, rd);
        const int64_t rb = cache_row_bytes(f, hd);
        std::vector<float> q = unit::lcg_values(T * H * hd, 1), kv = varied_rows(T, hd, 2);
        std::vector<float> ring = varied_rows(W, hd, 3), entries = varied_rows(n_entries, hd, 4);
        std::vector<float> sink = {0.1f, -0.2f};
        std::vector<uint8_t> ring_t(W * rb), entries_t(n_entries * rb);
        std::vector<float> ring_f(ring.size()), entries_f(entries.size()), kv_f(kv.size());
        for (int i = 0; i < W; ++i) {
            encode_cache_row(f, hd, ring.data() + i * hd, ring_t.data() + i * rb);
            decode_cache_row(f, hd, ring_t.data() + i * rb, ring_f.data() + i * hd);
        }
        for (int i = 0; i < n_entries; ++i) {
            encode_cache_row(f, hd, entries.data() + i * hd, entries_t.data() + i * rb);
            decode_cache_row(f, hd, entries_t.data() + i * rb, entries_f.data() + i * hd);
        }
        for (int t = 0; t < T; ++t)
            store_and_load_row(f, hd, kv.data() + t * hd, kv_f.data() + t * hd);
        ops::HostStep step;
        step.add_row(0, pos0, T);
        std::vector<float> out_t(T * H * hd), out_f(T * H * hd);
        ops::AttentionArgs a{.q = q.data(),
                             .kv = kv.data(),
                             .ring = reinterpret_cast<float*>(ring_t.data()),
                             .entries = reinterpret_cast<float*>(entries_t.data()),
                             .sink = sink.data(),
                             .out = out_t.data(),
                             .step = step.view(),
                             .H = H,
                             .hd = hd,
                             .W = W,
                             .compress_rate = m,
                             .n_entries = n_entries,
                             .softmax_scale = 0.1f,
                             .kv_format = f};
        cpu_ref::attention(a);
        a.kv = kv_f.data(), a.ring = ring_f.data(), a.entries = entries_f.data();
        a.out = out_f.data(), a.kv_format = {};
        cpu_ref::attention(a);
        for (size_t i = 0; i < out_t.size(); ++i)
            ASSERT_TRUE(same_bits(out_t[i], out_f[i])) << cache_type_name(type) << " " << i;

        cpu_ref::ring_write(
            {kv.data(), reinterpret_cast<float*>(ring_t.data()), step.view(), W, hd, f});
        std::vector<uint8_t> want(rb);
        for (int t = 0; t < T; ++t) {
            encode_cache_row(f, hd, kv.data() + t * hd, want.data());
            EXPECT_EQ(std::memcmp(ring_t.data() + ((pos0 + t) % W) * rb, want.data(), rb), 0);
        }
    }
}

TEST(CacheRow, PoolHoldsDeepSeekEntries) {
    ModelConfig c;
    c.head_dim = 512, c.rope_dim = 64, c.sliding_window = 128, c.index_head_dim = 128;
    c.layers = {{LayerKind::kSliding, 0}, {LayerKind::kCsa, 4}, {LayerKind::kHca, 128}};
    auto backend = make_cpu_backend();
    const int64_t ctx = 1024;
    const int S = 2;
    auto pool = CachePool::create(c, *backend, {S, ctx, CacheType::kFp8, CacheType::kFp4});
    ASSERT_TRUE(pool.has_value()) << pool.status().message();
    const int64_t ring = 3 * S * 128 * 584;
    const int64_t csa = S * ((ctx / 4 + 1) * 584 + 2 * 2 * 4 * 2 * 512 * 4) +
                        S * ((ctx / 4 + 1) * 68 + 2 * 2 * 4 * 2 * 128 * 4);
    const int64_t hca = S * ((ctx / 128 + 1) * 584 + 2 * 128 * 512 * 4);
    // (and each slot's generator and logits rules: ops::SlotRules, the entries, a token table)
    const int64_t rules =
        S * (sizeof(ops::SlotRules) + CachePool::kRuleEntries * sizeof(ops::LogitsRuleEntry) +
             4 * int64_t{c.vocab_size});
    EXPECT_EQ(static_cast<int64_t>((*pool)->bytes()), ring + csa + hca + S * 4 * 8 + rules);
    const CacheFootprint fp = cache_footprint(c, CacheType::kFp8, CacheType::kFp4);
    EXPECT_DOUBLE_EQ(fp.bytes_per_token, 584.0 / 4 + 68.0 / 4 + 584.0 / 128);
    auto bad = CachePool::create(c, *backend, {S, ctx, CacheType::kFp4, CacheType::kF32});
    EXPECT_FALSE(bad.has_value());
}

}  // namespace
}  // namespace dsv4
