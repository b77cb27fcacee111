// The result must not depend on how the tokens are chunked: random splits (and several
// internal step sizes) against one pass over the whole sequence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "fixture_util.h"
#include "formats/safetensors.h"

namespace dsv4 {
namespace {

using test::fixture_ids;
using test::max_abs_diff;

std::vector<float> run_chunked(const std::string& dir, const std::vector<int32_t>& ids,
                               const std::vector<int>& chunks, int max_chunk) {
    EngineOptions o;
    o.model_dir = dir;
    o.max_chunk = max_chunk;
    o.max_context = static_cast<int64_t>(ids.size());
    auto engine = Engine::create(o);
    EXPECT_TRUE(engine.has_value()) << (engine ? "" : engine.status().message());
    auto made = (*engine)->new_session();
    EXPECT_TRUE(made.has_value());
    auto& session = *made;
    std::vector<float> all, piece;
    size_t pos = 0;
    for (int c : chunks) {
        std::vector<int32_t> part(ids.begin() + pos, ids.begin() + pos + c);
        EXPECT_TRUE(session->feed(part, &piece, nullptr).is_ok());
        all.insert(all.end(), piece.begin(), piece.end());
        pos += c;
    }
    EXPECT_EQ(pos, ids.size());
    return all;
}

class Chunking : public ::testing::TestWithParam<std::string> {};

TEST_P(Chunking, RandomSplitsMatchOnePass) {
    const std::string dir = std::string(DSV4_GOLDEN_DIR) + "/" + GetParam();
    const std::vector<int32_t> ids = fixture_ids(dir);
    const int S = static_cast<int>(ids.size());
    const std::vector<float> one_pass = run_chunked(dir, ids, {S}, S);
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 3; ++trial) {
        std::vector<int> chunks;
        for (int left = S; left > 0;) {
            // Mix of 1-token steps, block-sized and long chunks (crossing compress blocks).
            const int pick = std::uniform_int_distribution<int>(0, 3)(rng);
            int c = pick == 0 ? 1 : std::uniform_int_distribution<int>(2, std::max(2, S / 3))(rng);
            c = std::min(c, left);
            chunks.push_back(c);
            left -= c;
        }
        const int max_chunk = trial == 2 ? 7 : 64;
        const auto got = run_chunked(dir, ids, chunks, max_chunk);
        // Same arithmetic per token whatever the split: only summation order inside an op
        // could differ, and none of the ops' per-token sums depend on the chunk.
        EXPECT_LE(max_abs_diff(got, one_pass), 1e-5) << "trial " << trial;
    }
}

INSTANTIATE_TEST_SUITE_P(Golden, Chunking,
                         ::testing::Values("tiny-mix", "tiny-yarn", "tiny-eps", "small-rates",
                                           "x-window16", "x-hash2", "x-hc1", "x-rates",
                                           "x-fmt-mx"));

}  // namespace
}  // namespace dsv4
