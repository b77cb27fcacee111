// Prefix snapshots (EngineOptions::snapshots, Request::snapshot_every,
// Session::copy_prefix_from): a sequence started from another one's snapshot, or sent back to one
// of its own, gives bit for bit the logits and tokens of the same tokens fed from the start, on
// the CPU, for every cache row type and numerics, also when the source's request is still running;
// a request's tokens do not change when it takes snapshots (its chunks end at their positions);
// refusals are plain errors.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "dsv4/engine.h"
#include "fixture_util.h"

namespace dsv4 {
namespace prefix_snapshot_test {  // (named: the unity build joins the tests' anonymous namespaces)
namespace {

// (model folder, KV row type, indexer key type, numerics)
using Case = std::tuple<std::string, std::string, std::string, std::string>;

std::unique_ptr<Engine> snapshot_engine(const Case& c, int snapshots, int seqs = 3) {
    EngineOptions o;
    o.model_dir = std::get<0>(c);
    o.kv_cache = std::get<1>(c);
    o.indexer_cache = std::get<2>(c);
    o.numerics = std::get<3>(c);
    o.max_context = 512;
    o.max_seqs = seqs;
    o.max_chunk = 48;  // (not a multiple of the block: the snapshot positions cut the chunks)
    o.snapshots = snapshots;
    auto e = Engine::create(o);
    EXPECT_TRUE(e.has_value()) << (e ? "" : e.status().message());
    return e ? std::move(*e) : nullptr;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// The logits of the last n positions of feeding `ids` to a fresh session.
std::vector<float> fresh_tail(Engine& e, const std::vector<int32_t>& ids, size_t n) {
    auto s = e.new_session();
    EXPECT_TRUE(s.has_value());
    std::vector<float> all;
    EXPECT_TRUE((*s)->feed(ids, &all, nullptr).is_ok());
    const size_t V = static_cast<size_t>(e.info().vocab_size);
    return {all.end() - static_cast<std::ptrdiff_t>(n * V), all.end()};
}

// A greedy request of max_tokens tokens that does not stop at EOS.
Request greedy_request(std::vector<int32_t> prompt, int max_tokens) {
    Request r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.stop_at_eos = false;
    return r;
}

class PrefixSnapshot : public ::testing::TestWithParam<Case> {};

TEST_P(PrefixSnapshot, ContinuesExactlyFromASnapshot) {
    auto engine = snapshot_engine(GetParam(), 8);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    const int V = e.info().vocab_size;
    const int64_t B = e.info().snapshot_block;
    ASSERT_GT(B, 1) << "the model has compressed layers";
    ASSERT_GT(e.info().snapshot_bytes, 0u);
    const std::vector<int32_t> p1 = test::random_ids(static_cast<int>(2 * B + 7), V, 11);

    // A request on session a takes snapshots at B and 2B; its tokens are a plain request's.
    auto a = e.new_session();
    ASSERT_TRUE(a.has_value());
    Request r;
    r.prompt = p1;
    r.max_tokens = 4;
    r.stop_at_eos = false;
    r.logprobs = 1;
    const auto plain = test::run_requests(e, {r});
    r.session = a->get();
    r.snapshot_every = B;
    const auto snapped = test::run_requests(e, {r});
    EXPECT_EQ(test::tokens_of(snapped[0]), test::tokens_of(plain[0]));
    ASSERT_EQ(snapped[0].size(), plain[0].size());
    for (size_t k = 0; k < plain[0].size(); ++k)
        if (plain[0][k].logprobs) {
            EXPECT_EQ(snapped[0][k].logprobs->logprob, plain[0][k].logprobs->logprob);
        }
    std::vector<int64_t> every;  // B, 2B (and 3B with a block below 7)
    for (int64_t p = B; p <= static_cast<int64_t>(p1.size()); p += B) every.push_back(p);
    EXPECT_EQ((*a)->snapshot_positions(), every);
    EXPECT_EQ(e.free_snapshots(), 8 - static_cast<int>(every.size()));

    // Another sequence sharing p1's first 2B tokens: from each snapshot, exactly a fresh feed.
    const std::vector<int32_t> tail = test::random_ids(29, V, 12);
    const std::vector<int32_t> p2 = concat({p1.begin(), p1.begin() + 2 * B}, tail);
    for (const int64_t at : {B, 2 * B}) {
        auto c = e.new_session();
        ASSERT_TRUE(c.has_value());
        ASSERT_TRUE((*c)->copy_prefix_from(**a, at).is_ok());
        EXPECT_EQ((*c)->position(), at);
        EXPECT_EQ((*c)->tokens(), std::vector<int32_t>(p1.begin(), p1.begin() + at));
        EXPECT_TRUE((*c)->snapshot_positions().empty()) << "a copy holds none of the source's";
        std::vector<float> got;
        ASSERT_TRUE((*c)->feed({p2.begin() + at, p2.end()}, &got, nullptr).is_ok());
        const std::vector<float> want = fresh_tail(e, p2, p2.size() - static_cast<size_t>(at));
        EXPECT_EQ(got, want) << "from the snapshot at " << at;
    }

    // A request on a copied prefix samples as the whole prompt does (seeded temperature).
    Request whole;
    whole.prompt = p2;
    whole.max_tokens = 6;
    whole.stop_at_eos = false;
    whole.sampling = SamplingParams{0.9f, 0, 0.95f, 5};
    whole.logprobs = 2;
    auto d = e.new_session();
    ASSERT_TRUE(d.has_value());
    ASSERT_TRUE((*d)->copy_prefix_from(**a, 2 * B).is_ok());
    Request rest = whole;
    rest.prompt.assign(p2.begin() + 2 * B, p2.end());
    rest.session = d->get();
    const auto both = test::run_requests(e, {whole, rest});
    EXPECT_EQ(test::tokens_of(both[1]), test::tokens_of(both[0]));
    for (size_t k = 0; k < both[0].size() && k < both[1].size(); ++k)
        if (both[0][k].logprobs) {
            EXPECT_EQ(both[1][k].logprobs->logprob, both[0][k].logprobs->logprob);
        }

    // Session a back to B: its later snapshots go, the one at B stays.
    ASSERT_TRUE((*a)->copy_prefix_from(**a, B).is_ok());
    EXPECT_EQ((*a)->position(), B);
    EXPECT_EQ((*a)->snapshot_positions(), (std::vector<int64_t>{B}));
    EXPECT_EQ(e.free_snapshots(), 7);
    std::vector<float> got;
    ASSERT_TRUE((*a)->feed({p2.begin() + B, p2.end()}, &got, nullptr).is_ok());
    EXPECT_EQ(got, fresh_tail(e, p2, p2.size() - static_cast<size_t>(B)));
    (*a)->reset();
    EXPECT_EQ(e.free_snapshots(), 8);
}

INSTANTIATE_TEST_SUITE_P(
    RowTypes, PrefixSnapshot,
    ::testing::Values(Case{std::string(DSV4_GOLDEN_DIR) + "/small-rates", "f32", "f32", "float"},
                      Case{std::string(DSV4_GOLDEN_DIR) + "/small-rates", "fp8", "fp4", "float"},
                      Case{std::string(DSV4_GOLDEN_DIR) + "/small-rates", "bf16", "bf16", "float"},
                      Case{std::string(DSV4_KJV_DIR), "f32", "f32", "float"},
                      Case{std::string(DSV4_KJV_DIR), "fp8", "fp8", "float"},
                      // DeepSeek's own numerics, a release checkpoint with its MTP block (whose
                      // ring the snapshots keep too), block 4 and an 8-token window
                      Case{std::string(DSV4_DSREF_DIR) + "/dsref-pub-a", "fp8", "fp4", "reference"},
                      Case{std::string(DSV4_DSREF_DIR) + "/dsref-pub-a", "f32", "f32",
                           "reference-fp32"}));

const Case kSmall{std::string(DSV4_GOLDEN_DIR) + "/small-rates", "f32", "f32", "float"};

// A snapshot of a sequence whose request is still running: copied between its steps, it gives
// the fresh feed's logits, and the running request's tokens are those it gives alone.
TEST(PrefixSnapshotLimits, CopiesFromASequenceWhileItsRequestRuns) {
    auto engine = snapshot_engine(kSmall, 4);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    const int V = e.info().vocab_size;
    const int64_t B = e.info().snapshot_block;
    Request r;
    r.prompt = test::random_ids(static_cast<int>(2 * B + 30), V, 21);
    r.max_tokens = 5;
    r.stop_at_eos = false;
    const auto alone = test::run_requests(e, {r});
    auto a = e.new_session();
    auto c = e.new_session();
    ASSERT_TRUE(a.has_value() && c.has_value());
    r.session = a->get();
    r.snapshot_every = B;
    auto id = e.submit(r);
    ASSERT_TRUE(id.has_value());
    std::vector<TokenEvent> events, mine;
    while ((*a)->snapshot_positions().empty()) {
        events.clear();
        ASSERT_TRUE(e.step(&events).is_ok());
        mine.insert(mine.end(), events.begin(), events.end());
    }
    ASSERT_LT((*a)->position(), 2 * B) << "the request is still in its prompt";
    auto busy = (*c)->copy_prefix_from(**a, (*a)->position());
    EXPECT_TRUE(busy.is_ok()) << "a snapshot at the running sequence's position";
    ASSERT_TRUE((*c)->copy_prefix_from(**a, B).is_ok());
    while (!e.idle()) {
        events.clear();
        ASSERT_TRUE(e.step(&events).is_ok());
        mine.insert(mine.end(), events.begin(), events.end());
    }
    EXPECT_EQ(test::tokens_of(mine), test::tokens_of(alone[0]));
    const std::vector<int32_t> tail = test::random_ids(40, V, 22);
    std::vector<int32_t> p2(r.prompt.begin(), r.prompt.begin() + B);
    p2.insert(p2.end(), tail.begin(), tail.end());
    std::vector<float> got;
    ASSERT_TRUE((*c)->feed(tail, &got, nullptr).is_ok());
    EXPECT_EQ(got, fresh_tail(e, p2, tail.size()));
}

// With fewer buffers than positions a request takes the first ones and goes on; dropping them
// gives them back.
// Speculative requests (the MTP block's drafts, n-gram drafts) take snapshots and continue
// from them with plain decoding's greedy tokens. N-gram drafts see the session's tokens: the
// drafts of the whole prompt fed at once. (The MTP block's ring is in the snapshot, but its
// row n - 1 was made with the source's token n, so the first drafts after a copy may differ
// from a fresh run's: the fixture's random MTP block accepts none either way.)
TEST(PrefixSnapshotLimits, SpeculativeRequestsTakeAndContinueFromSnapshots) {
    // (dsref-pub-a has an MTP block; kjv-tiny's greedy text repeats itself, so n-gram drafts
    // are found)
    const std::pair<std::string, Speculation> cases[] = {
        {std::string(DSV4_DSREF_DIR) + "/dsref-pub-a", Speculation::kMtp},
        {std::string(DSV4_KJV_DIR), Speculation::kNgram}};
    for (const auto& [dir, how] : cases) {
        auto engine = snapshot_engine(Case{dir, "f32", "f32", "float"}, 8, 4);
        ASSERT_TRUE(engine);
        Engine& e = *engine;
        const int V = e.info().vocab_size;
        const int64_t every = e.info().snapshot_block;
        const int64_t at = 2 * every;
        std::vector<int32_t> p1, p2;
        if (how == Speculation::kMtp) {
            p1 = test::random_ids(static_cast<int>(3 * every + 5), V, 41);
            p2.assign(p1.begin(), p1.begin() + at);
            const std::vector<int32_t> tail = test::random_ids(9, V, 42);
            p2.insert(p2.end(), tail.begin(), tail.end());
        } else {
            // kjv-tiny's own greedy text, which repeats itself: p2 is a prefix of it one token
            // past `at`, so the first drafts are found only in the part before `at` (on the
            // copy: the session's tokens, not the request's prompt).
            const Request g = greedy_request({0, 1288}, static_cast<int>(3 * every + 5));
            std::vector<int32_t> text = g.prompt;
            for (const int32_t t : test::tokens_of(test::run_requests(e, {g})[0]))
                text.push_back(t);
            p1 = text;
            p2.assign(text.begin(), text.begin() + at + 1);
        }

        Request r = greedy_request(p1, 10);
        const auto plain1 = test::run_requests(e, {r});
        r.speculative = how;
        auto a = e.new_session();
        ASSERT_TRUE(a.has_value());
        r.session = a->get();
        r.snapshot_every = every;
        const auto spec1 = test::run_requests(e, {r});
        EXPECT_EQ(test::tokens_of(spec1[0]), test::tokens_of(plain1[0])) << dir;
        EXPECT_GE((*a)->snapshot_positions().size(), 3u);

        Request whole = greedy_request(p2, 24);
        const auto plain2 = test::run_requests(e, {whole});
        whole.speculative = how;
        const auto fresh = test::run_requests(e, {whole});
        auto c = e.new_session();
        ASSERT_TRUE(c.has_value());
        ASSERT_TRUE((*c)->copy_prefix_from(**a, at).is_ok());
        Request rest = whole;
        rest.prompt.assign(p2.begin() + at, p2.end());
        rest.session = c->get();
        const auto copied = test::run_requests(e, {rest});
        EXPECT_EQ(test::tokens_of(copied[0]), test::tokens_of(plain2[0])) << dir;
        ASSERT_FALSE(fresh[0].empty() || copied[0].empty());
        const TokenEvent &f = fresh[0].back(), &g = copied[0].back();
        EXPECT_GT(g.drafted, 0) << dir;
        if (how == Speculation::kMtp) continue;
        EXPECT_GT(f.accepted, 0) << dir << ": drafts kept";
        EXPECT_EQ(g.drafted, f.drafted) << dir << ": drafts as the whole prompt's";
        EXPECT_EQ(g.accepted, f.accepted) << dir;
        EXPECT_EQ(g.accepted_at, f.accepted_at) << dir;
    }
}

TEST(PrefixSnapshotLimits, TakesWhatIsFreeAndGivesItBack) {
    auto engine = snapshot_engine(kSmall, 1);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    const int64_t B = e.info().snapshot_block;
    auto a = e.new_session();
    auto b = e.new_session();
    ASSERT_TRUE(a.has_value() && b.has_value());
    Request r;
    r.prompt = test::random_ids(static_cast<int>(3 * B), e.info().vocab_size, 4);
    r.max_tokens = 0;
    r.snapshot_every = B;
    r.session = a->get();
    test::run_requests(e, {r});
    EXPECT_EQ((*a)->snapshot_positions(), (std::vector<int64_t>{B}));
    r.session = b->get();
    test::run_requests(e, {r});
    EXPECT_TRUE((*b)->snapshot_positions().empty());
    EXPECT_EQ(e.free_snapshots(), 0);
    // A session fed to a block boundary takes one when asked, once a buffer is free.
    auto c = e.new_session();
    ASSERT_TRUE(c.has_value());
    ASSERT_TRUE(
        (*c)->feed(std::vector<int32_t>(r.prompt.begin(), r.prompt.begin() + B), nullptr, nullptr)
            .is_ok());
    EXPECT_NE((*c)->snapshot().message().find("prefix snapshots are in use"), std::string::npos);
    (*a)->drop_snapshots();
    EXPECT_EQ(e.free_snapshots(), 1);
    ASSERT_TRUE((*c)->snapshot().is_ok());
    EXPECT_EQ((*c)->snapshot_positions(), (std::vector<int64_t>{B}));
    EXPECT_EQ(e.free_snapshots(), 0);
    (*c)->reset();
    EXPECT_EQ(e.free_snapshots(), 1);
    // A copy of the whole of a sequence needs no snapshot (copy_from).
    ASSERT_TRUE((*b)->copy_prefix_from(**a, (*a)->position()).is_ok());
    EXPECT_EQ((*b)->tokens(), (*a)->tokens());
}

TEST(PrefixSnapshotLimits, RefusalsArePlainErrors) {
    auto engine = snapshot_engine(kSmall, 2);
    ASSERT_TRUE(engine);
    Engine& e = *engine;
    const int64_t B = e.info().snapshot_block;
    const int V = e.info().vocab_size;
    auto a = e.new_session();
    auto b = e.new_session();
    ASSERT_TRUE(a.has_value() && b.has_value());
    ASSERT_TRUE(
        (*a)->feed(test::random_ids(static_cast<int>(B + 3), V, 2), nullptr, nullptr).is_ok());
    auto message = [](const Status& s) { return s.is_ok() ? std::string("ok") : s.message(); };
    EXPECT_NE(message((*a)->snapshot()).find("not a positive multiple of"), std::string::npos);
    EXPECT_NE(message((*b)->copy_prefix_from(**a, B)).find("no snapshot at position"),
              std::string::npos);
    EXPECT_NE(message((*b)->copy_prefix_from(**a, B + 4)).find("outside the source"),
              std::string::npos);
    Request r;
    r.prompt = test::random_ids(5, V, 3);
    r.session = a->get();
    r.snapshot_every = B + 1;
    auto id = e.submit(r);
    ASSERT_FALSE(id.has_value());
    EXPECT_NE(id.status().message().find("positive multiple of"), std::string::npos);
    r.snapshot_every = B;
    r.session = nullptr;
    id = e.submit(r);
    ASSERT_FALSE(id.has_value());
    EXPECT_NE(id.status().message().find("on a session"), std::string::npos);

    auto none = snapshot_engine(kSmall, 0, 1);
    ASSERT_TRUE(none);
    auto c = none->new_session();
    ASSERT_TRUE(c.has_value());
    r.session = c->get();
    id = none->submit(r);
    ASSERT_FALSE(id.has_value());
    EXPECT_NE(id.status().message().find("keeps no prefix snapshots"), std::string::npos);
    EXPECT_NE(message((*c)->copy_prefix_from(**a, 0)).find("different engines"), std::string::npos);
    EXPECT_NE(message((*c)->snapshot()).find("keeps no prefix snapshots"), std::string::npos);
    EngineOptions o;
    o.model_dir = std::get<0>(kSmall);
    o.snapshots = -1;
    auto bad = Engine::create(o);
    ASSERT_FALSE(bad.has_value());
    EXPECT_NE(bad.status().message().find("snapshots must be >= 0"), std::string::npos);
}

}  // namespace
}  // namespace prefix_snapshot_test
}  // namespace dsv4
