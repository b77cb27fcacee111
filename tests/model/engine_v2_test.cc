// Engine-v2 contracts on the CPU reference: the decode step's host-side arguments do not depend
// on positions (graph-ready by construction), batching is invisible in each sequence's logits
// (bit for bit), and sessions come and go through a bounded cache pool without growth or aborts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "fixture_util.h"
#include "model/model.h"
#include "recording_backend.h"

namespace dsv4 {
namespace {

using test::random_ids;
using test::run_requests;
using test::tokens_of;

std::string fixture(const char* name) {
    return std::string(DSV4_GOLDEN_DIR) + "/" + name;
}

// An engine on a fixture; the test fails (and the pointer is null) when it does not load.
std::unique_ptr<Engine> make_engine(const char* name, int64_t context, int seqs, int chunk = 128,
                                    int queue = 1024) {
    EngineOptions o;
    o.model_dir = fixture(name);
    o.max_context = context;
    o.max_seqs = seqs;
    o.max_chunk = chunk;
    o.max_queue = queue;
    auto engine = Engine::create(o);
    EXPECT_TRUE(engine.has_value()) << (engine ? "" : engine.status().message());
    return engine ? std::move(*engine) : nullptr;
}

TEST(GraphReady, DecodeStepArgumentsAreTheSameAtEveryPosition) {
    // tiny-mix: window 8, CSA m = 4, HCA m = 16. Three rows at different positions decode 24
    // steps: every row crosses window wrap-arounds and CSA and HCA block completions.
    test::RecordingBackend backend;
    auto model = Model::load(fixture("tiny-mix"), backend, 32);
    ASSERT_TRUE(model.has_value()) << model.status().message();
    Model& m = **model;
    auto pool = CachePool::create(m.config(), backend, {4, 64});
    ASSERT_TRUE(pool.has_value()) << pool.status().message();
    std::vector<CacheSlot> slots;
    for (int i = 0; i < 3; ++i) slots.push_back(std::move(*(*pool)->acquire()));
    const int V = m.config().vocab_size;
    const std::vector<int> prompt_len = {5, 11, 14};
    std::vector<int64_t> pos(3);
    std::vector<int32_t> next(3);
    std::vector<std::vector<int32_t>> prompts(3);
    std::vector<StepRow> rows(3);
    for (int i = 0; i < 3; ++i) {
        prompts[i] = random_ids(prompt_len[i], V, 10 + i);
        rows[i].slot = slots[i].index();
        rows[i].pos0 = 0;
        rows[i].ids = prompts[i].data();
        rows[i].len = prompt_len[i];
        rows[i].sample = true;
        rows[i].sampling.temperature = i == 1 ? 0.8f : 0.0f;  // one sampled row, two greedy
        rows[i].sampling.seed = 5;
        rows[i].sampled_out = &next[i];
        pos[i] = prompt_len[i];
    }
    ASSERT_TRUE(m.run_step(**pool, rows).is_ok());

    std::vector<std::string> first;
    std::vector<bool> hca_done(3, false), csa_done(3, false);
    for (int step = 0; step < 24; ++step) {
        for (int i = 0; i < 3; ++i) {
            rows[i].pos0 = pos[i];
            rows[i].ids = &next[i];
            rows[i].len = 1;
            hca_done[i] = hca_done[i] || pos[i] % 16 == 15;
            csa_done[i] = csa_done[i] || pos[i] % 4 == 3;
        }
        backend.start();
        ASSERT_TRUE(m.run_step(**pool, rows).is_ok());
        const std::vector<std::string> calls = backend.stop();
        for (int i = 0; i < 3; ++i) ++pos[i];
        if (step == 0) {
            first = calls;
            // Inside the step: no allocation, one synchronisation, at the end.
            EXPECT_EQ(std::count(calls.begin(), calls.end(), "synchronize{0,}"), 1);
            EXPECT_EQ(calls.back(), "synchronize{0,}");
            for (const std::string& c : calls) EXPECT_NE(c.rfind("try_alloc", 0), 0u) << c;
            continue;
        }
        ASSERT_EQ(calls.size(), first.size()) << "step " << step;
        for (size_t k = 0; k < calls.size(); ++k)
            ASSERT_EQ(calls[k], first[k]) << "step " << step << ", call " << k;
    }
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(hca_done[i] && csa_done[i]) << i;

    // The recording does see host values: a batch of another shape records differently.
    rows.pop_back();
    for (int i = 0; i < 2; ++i) rows[i].pos0 = pos[i]++;
    backend.start();
    ASSERT_TRUE(m.run_step(**pool, rows).is_ok());
    EXPECT_NE(backend.stop(), first);
}

// Each sequence's chunk plan: random prefill chunks, then 1-token decode rows.
std::vector<int> chunk_plan(int len, std::mt19937& rng) {
    std::vector<int> plan;
    for (int left = len; left > 0;) {
        const int c = std::min(left, left > len / 2 ? 1 + static_cast<int>(rng() % 16) : 1);
        plan.push_back(c);
        left -= c;
    }
    return plan;
}

TEST(BatchInvariance, EightSequencesInMixedStepsAreBitIdenticalToAlone) {
    // small-rates (CSA 4, HCA 128, window 128): 8 sequences of 20..150 tokens, each fed in its
    // own chunk plan; in the batched run every step holds each unfinished sequence's next chunk
    // (prefill chunks next to 1-token decode rows of sequences at other positions).
    auto engine = make_engine("small-rates", 160, 8);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    std::mt19937 rng(77);
    const int N = 8;
    std::vector<std::vector<int32_t>> seqs(N);
    std::vector<std::vector<int>> plans(N);
    for (int i = 0; i < N; ++i) {
        seqs[i] = random_ids(20 + static_cast<int>(rng() % 131), e.info().vocab_size, 100 + i);
        plans[i] = chunk_plan(static_cast<int>(seqs[i].size()), rng);
    }
    // Alone: one session, each chunk its own step.
    std::vector<std::vector<float>> alone(N);
    {
        auto s = e.new_session();
        ASSERT_TRUE(s.has_value());
        for (int i = 0; i < N; ++i) {
            (*s)->reset();
            size_t at = 0;
            for (int c : plans[i]) {
                std::vector<int32_t> part(seqs[i].begin() + at, seqs[i].begin() + at + c);
                std::vector<float> logits;
                ASSERT_TRUE((*s)->feed(part, &logits, nullptr).is_ok());
                alone[i].insert(alone[i].end(), logits.begin(), logits.end());
                at += c;
            }
        }
    }
    // Together.
    std::vector<std::unique_ptr<Session>> sessions;
    for (int i = 0; i < N; ++i) {
        auto s = e.new_session();
        ASSERT_TRUE(s.has_value()) << s.status().message();
        sessions.push_back(std::move(*s));
    }
    std::vector<std::vector<float>> together(N), piece(N);
    std::vector<size_t> at(N, 0), next_chunk(N, 0);
    int mixed_steps = 0;
    for (bool more = true; more;) {
        more = false;
        std::vector<BatchFeed> feeds;
        std::vector<int> who;
        bool has_decode = false, has_prefill = false;
        for (int i = 0; i < N; ++i) {
            if (next_chunk[i] == plans[i].size()) continue;
            const int c = plans[i][next_chunk[i]];
            (c == 1 ? has_decode : has_prefill) = true;
            feeds.push_back({sessions[i].get(),
                             {seqs[i].begin() + at[i], seqs[i].begin() + at[i] + c},
                             true,
                             &piece[i]});
            who.push_back(i);
            at[i] += c;
            ++next_chunk[i];
        }
        if (feeds.empty()) break;
        more = true;
        mixed_steps += has_decode && has_prefill;
        ASSERT_TRUE(e.feed_batch(feeds).is_ok());
        for (int i : who) together[i].insert(together[i].end(), piece[i].begin(), piece[i].end());
    }
    EXPECT_GT(mixed_steps, 0);
    for (int i = 0; i < N; ++i) {
        ASSERT_EQ(together[i].size(), alone[i].size()) << i;
        EXPECT_EQ(std::memcmp(together[i].data(), alone[i].data(), alone[i].size() * 4), 0)
            << "sequence " << i << " differs when batched";
    }
}

TEST(BatchInvariance, RequestsGiveTheSameTokensAloneOrAmongOthers) {
    // 9 requests (greedy and seeded sampling) on 4 slots with 16-token prompt chunks: requests
    // wait for slots, prompts are chunked next to running decode rows.
    auto engine = make_engine("small-rates", 128, 4, 16);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    std::vector<Request> reqs;
    for (int i = 0; i < 9; ++i) {
        Request r;
        r.prompt = random_ids(3 + 9 * i, e.info().vocab_size, 300 + i);
        r.max_tokens = 6 + i;
        r.stop_at_eos = false;
        if (i % 3 == 2) r.sampling = {0.9f, 20, 0.95f, static_cast<uint64_t>(i)};
        reqs.push_back(r);
    }
    const auto together = run_requests(e, reqs);
    for (int i = 0; i < 9; ++i) {
        const auto alone = tokens_of(run_requests(e, {reqs[i]})[0]);
        EXPECT_EQ(alone, tokens_of(together[i])) << "request " << i;
        EXPECT_EQ(alone.size(), static_cast<size_t>(reqs[i].max_tokens));
    }
}

// A fresh engine whose first steps are prompt chunks that are not the last: nothing is sampled
// and no logits are read, so the step uploads empty host arrays (null data()). UBSan (the asan
// preset) caught memcpy(dst, nullptr, 0) there through the server's long prompts.
TEST(BatchInvariance, StepsThatSampleNothing) {
    auto engine = make_engine("small-rates", 128, 1, 16);
    ASSERT_TRUE(engine);
    Request r;
    r.prompt = random_ids(50, engine->info().vocab_size, 7);
    r.max_tokens = 2;
    r.stop_at_eos = false;
    EXPECT_EQ(tokens_of(run_requests(*engine, {r})[0]).size(), 2u);
}

TEST(SessionChurn, TenThousandSessionsThroughABoundedPool) {
    auto engine = make_engine("tiny-mix", 32, 4);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    const size_t base = e.memory_in_use();
    std::vector<std::unique_ptr<Session>> held;
    for (int i = 0; i < 10000; ++i) {
        auto s = e.new_session();
        ASSERT_TRUE(s.has_value()) << "session " << i << ": " << s.status().message();
        if (i % 50 == 0) {  // some of them run a step
            std::vector<float> logits;
            ASSERT_TRUE((*s)->feed({1, 2, 3}, nullptr, &logits).is_ok());
        }
        held.push_back(std::move(*s));
        if (held.size() == 4) {
            // The pool is full: an error, not an abort.
            auto full = e.new_session();
            ASSERT_FALSE(full.has_value());
            EXPECT_NE(full.status().message().find("in use"), std::string::npos);
            held.erase(held.begin() + (i % 4));
        }
        ASSERT_EQ(e.memory_in_use(), base) << "session " << i;
    }
    held.clear();
    EXPECT_EQ(e.free_slots(), 4);
}

TEST(SessionChurn, RequestsWaitForSlotsAndCancelFreesThem) {
    auto engine = make_engine("tiny-mix", 32, 2, 128, 3);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    auto held = e.new_session();  // one slot taken by a session: requests share the other
    ASSERT_TRUE(held.has_value());
    std::vector<RequestId> ids;
    for (int i = 0; i < 3; ++i) {
        auto id = e.submit({{1, 2, 3}, 4, {}, false, nullptr});
        ASSERT_TRUE(id.has_value());
        ids.push_back(*id);
    }
    auto over = e.submit({{1, 2, 3}, 4, {}, false, nullptr});
    ASSERT_FALSE(over.has_value());  // queue full: a clear error for the server's 429
    EXPECT_NE(over.status().message().find("queue is full"), std::string::npos);
    std::vector<TokenEvent> events;
    ASSERT_TRUE(e.step(&events).is_ok());
    EXPECT_EQ(e.running(), 1u);
    EXPECT_EQ(e.queued(), 2u);
    e.cancel(ids[0]);  // running: ends at the next step, its slot goes to the next request
    e.cancel(ids[2]);  // still queued: never takes a slot
    // nor a place in the queue:
    EXPECT_EQ(e.queued(), 1u);
    std::map<RequestId, FinishReason> finished;
    std::map<RequestId, int> tokens;
    for (int guard = 0; !e.idle() && guard < 100; ++guard) {
        events.clear();
        ASSERT_TRUE(e.step(&events).is_ok());
        for (const TokenEvent& ev : events) {
            if (ev.token >= 0) ++tokens[ev.id];
            if (ev.finish != FinishReason::kNone) finished[ev.id] = ev.finish;
        }
    }
    EXPECT_EQ(finished[ids[0]], FinishReason::kCancelled);
    EXPECT_EQ(finished[ids[1]], FinishReason::kLength);
    EXPECT_EQ(tokens[ids[1]], 4);
    EXPECT_EQ(finished[ids[2]], FinishReason::kCancelled);
    EXPECT_EQ(tokens[ids[2]], 0);
    EXPECT_EQ(e.free_slots(), 1);
    // Bad requests are refused at submit.
    EXPECT_FALSE(e.submit({{1, 999999}, 4, {}, false, nullptr}).has_value());
    EXPECT_FALSE(e.submit({std::vector<int32_t>(40, 1), 4, {}, false, nullptr}).has_value());
    EXPECT_FALSE(e.submit({{}, 4, {}, false, nullptr}).has_value());
}

TEST(EngineOptionsCheck, CacheThatDoesNotFitIsAClearError) {
    EngineOptions o;
    o.model_dir = fixture("tiny-mix");
    o.max_context = int64_t{1} << 40;
    auto engine = Engine::create(o);
    ASSERT_FALSE(engine.has_value());
    EXPECT_NE(engine.status().message().find("exceeds the model"), std::string::npos)
        << engine.status().message();
    o.max_context = 4096;
    o.max_seqs = 1 << 28;
    engine = Engine::create(o);
    ASSERT_FALSE(engine.has_value());
    EXPECT_NE(engine.status().message().find("GiB is free"), std::string::npos)
        << engine.status().message();
}

}  // namespace
}  // namespace dsv4
