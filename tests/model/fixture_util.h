// Helpers the model tests share: a golden fixture's prompt, random prompts, the largest
// difference between two logit vectors, and running requests through an engine to their ends.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "dsv4/engine.h"
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

// A CPU engine for request tests: `seqs` slots of 128 tokens, prompt chunks of 16 (so prompts
// span several steps); the small-rates fixture unless `dir` (a failed expectation when it does
// not load).
inline std::unique_ptr<Engine> request_engine(int seqs,
                                              std::string dir = std::string(DSV4_GOLDEN_DIR) +
                                                                "/small-rates") {
    EngineOptions o;
    o.model_dir = std::move(dir);
    o.max_context = 128;
    o.max_seqs = seqs;
    o.max_chunk = 16;
    auto e = Engine::create(o);
    EXPECT_TRUE(e.has_value()) << (e ? "" : e.status().message());
    return e ? std::move(*e) : nullptr;
}

// Submits the requests, then steps the engine until it is idle: each request's events (token
// and finish events alike), in submit order. A refused request, a failed step, an error event
// or an engine still busy after max_steps steps is a failed expectation (a refused request's
// events: none).
inline std::vector<std::vector<TokenEvent>> run_requests(Engine& e,
                                                         const std::vector<Request>& reqs,
                                                         int max_steps = 10000) {
    std::vector<RequestId> ids;
    for (const Request& r : reqs) {
        auto id = e.submit(r);
        EXPECT_TRUE(id.has_value()) << id.status().message();
        ids.push_back(id ? *id : 0);
    }
    std::map<RequestId, std::vector<TokenEvent>> by_id;
    std::vector<TokenEvent> events;
    for (int step = 0; !e.idle() && step < max_steps; ++step) {
        events.clear();
        EXPECT_TRUE(e.step(&events).is_ok());
        for (TokenEvent& ev : events) {
            EXPECT_NE(ev.finish, FinishReason::kError) << ev.error;
            by_id[ev.id].push_back(std::move(ev));
        }
    }
    EXPECT_TRUE(e.idle()) << "still busy after " << max_steps << " steps";
    std::vector<std::vector<TokenEvent>> out;
    for (RequestId id : ids) out.push_back(id != 0 ? by_id[id] : std::vector<TokenEvent>{});
    return out;
}

// The log-softmax of a row of V logits at id (the logprobs op's formula, ops/sample.h).
inline double log_softmax(const float* l, int64_t V, int32_t id) {
    const double mx = *std::max_element(l, l + V);
    double sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(l[i]) - mx);
    return l[id] - (mx + std::log(sum));
}

// The tokens among a request's events.
inline std::vector<int32_t> tokens_of(const std::vector<TokenEvent>& events) {
    std::vector<int32_t> t;
    for (const TokenEvent& ev : events)
        if (ev.token >= 0) t.push_back(ev.token);
    return t;
}

}  // namespace dsv4::test
