// How often fp8 / fp4 indexer keys change the indexer's top-k against float keys, on data
// shaped like V4-Flash's indexer (hi 128, RMS-normed keys with per-channel gains and a few
// outlier channels, K = 512 of 2048 entries). Prints the numbers docs/kv-cache.md quotes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "unit_util.h"

namespace dsv4 {
namespace {

struct Agreement {
    double identical = 0;  // fraction of tokens whose top-k set is the float keys' set
    double overlap = 0;    // mean |A ∩ B| / |A|
};

// Gaussian-like values (sum of 4 uniforms) with per-channel gains and 4 outlier channels,
// each row then RMS-normalised.
std::vector<float> realistic_rows(int rows, int width, uint64_t seed) {
    std::vector<float> u = unit::lcg_values(int64_t{rows} * width * 4, seed);
    std::vector<float> gain = unit::lcg_values(width, seed + 1), x(int64_t{rows} * width);
    for (int r = 0; r < rows; ++r) {
        double ss = 0;
        for (int i = 0; i < width; ++i) {
            const float* v = u.data() + (int64_t{r} * width + i) * 4;
            const float g = std::exp(gain[i]) * (i % 37 == 5 ? 6.0f : 1.0f);
            x[int64_t{r} * width + i] = (v[0] + v[1] + v[2] + v[3]) * g;
            ss += double(x[int64_t{r} * width + i]) * x[int64_t{r} * width + i];
        }
        const float inv = static_cast<float>(1.0 / std::sqrt(ss / width));
        for (int i = 0; i < width; ++i) x[int64_t{r} * width + i] *= inv;
    }
    return x;
}

Agreement agreement(const CacheRowFormat& f) {
    const int T = 8, Hi = 16, hi = 128, K = 512, m = 4;
    const int64_t n = 2048, pos0 = n * m - T;
    const std::vector<float> q = realistic_rows(T * Hi, hi, 11), keys = realistic_rows(n, hi, 12);
    std::vector<float> w = unit::lcg_values(T * Hi, 13);
    const int64_t rb = cache_row_bytes(f, hi);
    std::vector<uint8_t> stored(n * rb);
    for (int64_t e = 0; e < n; ++e)
        encode_cache_row(f, hi, keys.data() + e * hi, stored.data() + e * rb);
    ops::HostStep step;
    step.add_row(0, pos0, T);
    std::vector<int32_t> want(T * K), got(T * K);
    cpu_ref::indexer_topk(
        {q.data(), w.data(), keys.data(), want.data(), step.view(), n, Hi, hi, K, m});
    cpu_ref::indexer_topk({q.data(), w.data(), reinterpret_cast<const float*>(stored.data()),
                           got.data(), step.view(), n, Hi, hi, K, m, f});
    Agreement a;
    for (int t = 0; t < T; ++t) {
        const auto* x = want.data() + t * K;
        const auto* y = got.data() + t * K;
        std::vector<int32_t> common;
        std::set_intersection(x, x + K, y, y + K, std::back_inserter(common));
        a.overlap += static_cast<double>(common.size()) / K / T;
        a.identical += (common.size() == static_cast<size_t>(K)) / double(T);
    }
    return a;
}

TEST(IndexerKeys, TopkAgreementWithFloatKeys) {
    struct Case {
        const char* name;
        CacheRowFormat f;
        double min_overlap;
    };
    for (const Case& c : {Case{"bf16", index_key_format(CacheType::kBf16), 0.99},
                          Case{"fp8/128", index_key_format(CacheType::kFp8), 0.95},
                          Case{"fp8/64", CacheRowFormat{CacheType::kFp8, 0, 64}, 0.95},
                          Case{"fp4", index_key_format(CacheType::kFp4), 0.8}}) {
        const Agreement a = agreement(c.f);
        std::printf("indexer keys %-8s identical top-k %.3f  mean overlap %.4f\n", c.name,
                    a.identical, a.overlap);
        EXPECT_GE(a.overlap, c.min_overlap) << c.name;
    }
}

}  // namespace
}  // namespace dsv4
