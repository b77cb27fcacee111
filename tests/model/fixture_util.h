// Helpers the model tests share: a golden fixture's prompt, random prompts, and the largest
// difference between two logit vectors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "formats/safetensors.h"

namespace dsv4::test {

// The input_ids of `dir`/expected.safetensors (a failed expectation, and none, when unreadable).
inline std::vector<int32_t> fixture_ids(const std::string& dir) {
    auto f = SafetensorsFile::open(dir + "/expected.safetensors");
    EXPECT_TRUE(f.has_value());
    if (!f) return {};
    auto ids = read_ids(**f, "input_ids");
    EXPECT_TRUE(ids.has_value()) << (ids ? "" : ids.status().message());
    return ids ? *ids : std::vector<int32_t>{};
}

// n ids below `vocab`, the same for a seed.
inline std::vector<int32_t> random_ids(int n, int vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    return ids;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
        m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
    return m;
}

}  // namespace dsv4::test
