// Engine: owns the backend, the model and the cache pool; sessions hold slots; requests are
// scheduled into batched steps (decode rows first, then prompt chunks up to the step's size).
#include "dsv4/engine.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <map>
#include <numeric>
#include <optional>
#include <span>

#include "backend/cpu/cpu_backend.h"
#include "dsv4/parallel.h"
#include "engine/rank_group.h"
#include "ops/collective.h"
#if DSV4_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "base/thread_pool.h"
#include "formats/safetensors.h"
#include "model/backend_fit.h"
#include "model/cache_snapshots.h"
#include "model/model.h"

namespace dsv4 {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kNone:
            return "none";
        case FinishReason::kLength:
            return "length";
        case FinishReason::kEos:
            return "stop";
        case FinishReason::kCancelled:
            return "cancelled";
        case FinishReason::kError:
            return "error";
    }
    return "?";
}

namespace {

// Drafts fed per step at most: kMaxDraftTokens (also n-gram's default; the MTP's is 1). A
// rejected draft at position p + j writes the window-ring row of position p + j - R, which the
// corrected token at p + 1 still attends to unless the ring holds R >= W + k - 1 rows: the cache
// is laid out with kMaxDraftTokens - 1 extra rows where the backend takes them
// (Backend::max_ring_extra: both do), and a step feeds at most ring_extra + 1 drafts a row. (The
// MTP block's own ring gets the same rows: its chained drafts write positions up to p + k - 1 ahead
// of the sequence, rewritten before any later step reads them.)

// A request from submit to its end.
struct Running {
    RequestId id = 0;
    Request r;
    CacheSlot own;  // held when the request has no session
    int slot = -1;
    int64_t pos = 0;       // tokens in the slot's sequence
    size_t fed = 0;        // prompt tokens fed
    int32_t pending = -1;  // sampled token to feed next (decode)
    int generated = 0;
    bool cancelled = false;
    int32_t sampled = -1;  // this step's output
    // Requests with logprobs: the step's log-probabilities of each sample (one, or one a fed
    // token with speculative drafts).
    std::vector<TokenLogprobs> logprobs;
    // Speculative decoding: the MTP's drafts of the tokens after `pending` (empty: none), this
    // step's fed tokens and samples after each, and the counts reported at the finish.
    std::vector<int32_t> mtp_drafts;
    std::vector<int32_t> fed_tokens, spec_out, spec_drafts;
    int drafted = 0, accepted = 0;
    std::array<int, kMaxDraftTokens> drafted_at{}, accepted_at{};
    std::vector<int32_t> history;  // prompt + generated (n-gram drafts)
    bool rules_on = false;         // its slot holds its logits rules (Request::rules)
    // Request::share_prompt: `leads` for the first request of a key (it stops its prompt one
    // token short while others wait for its cache); `leader` for one that waits (0: none).
    bool leads = false;
    RequestId leader = 0;
};

// Whether a request may take part in prompt sharing (Request::share_prompt).
bool may_share_prompt(const Request& r) {
    return r.share_prompt != 0 && r.session == nullptr && r.prompt.size() >= 2 &&
           r.max_tokens > 0 && !r.rules.penalties();
}

// Every id of `ids` in the vocabulary; else the first one outside it, named `what`.
Status check_vocab(std::span<const int32_t> ids, const char* what, int vocab) {
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= vocab)
            return error(what, " ", ids[i], " at index ", i, " is outside the vocabulary [0, ",
                         vocab, ")");
    return Status::ok();
}

// Request::rules checked against the vocabulary and the request (one line each).
Status check_rules(const Request& r, int vocab) {
    const LogitsRules& u = r.rules;
    if (!(u.repetition_penalty > 0.0f && u.repetition_penalty <= 100.0f))
        return error("repetition_penalty must be in (0, 100], got ", u.repetition_penalty);
    for (const auto& [name, v] : {std::pair{"frequency_penalty", u.frequency_penalty},
                                  std::pair{"presence_penalty", u.presence_penalty}})
        if (!(v >= -2.0f && v <= 2.0f)) return error(name, " must be in [-2, 2], got ", v);
    if (u.penalties() && r.speculative != Speculation::kNone)
        return error("penalties need a request without speculative decoding");
    if (u.logit_bias.size() > static_cast<size_t>(kMaxLogitBias))
        return error("logit_bias has ", u.logit_bias.size(), " entries; at most ", kMaxLogitBias);
    std::vector<int32_t> seen;
    for (const TokenBias& b : u.logit_bias) {
        if (!(b.bias >= -100.0f && b.bias <= 100.0f))
            return error("logit_bias values must be in [-100, 100], got ", b.bias);
        seen.push_back(b.token);
    }
    DSV4_RETURN_IF_ERROR(check_vocab(seen, "logit_bias token", vocab));
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end())
        return error("logit_bias names a token twice");
    if (u.min_tokens < 0 || u.min_tokens > r.max_tokens)
        return error("min_tokens must be in [0, max_tokens = ", r.max_tokens, "], got ",
                     u.min_tokens);
    if (u.min_tokens_stops.size() > static_cast<size_t>(kMaxMinTokensStops))
        return error("at most ", kMaxMinTokensStops, " stop ids are banned until min_tokens, got ",
                     u.min_tokens_stops.size());
    return check_vocab(u.min_tokens_stops, "stop token id", vocab);
}

// A request's rules as its slot holds them (ops::SlotRules): output positions start after its
// prompt; the entries are its logit_bias and, with min_tokens, its stop ids and EOS (when it
// stops there) banned, one entry a token, sorted.
std::vector<ops::LogitsRuleEntry> rule_entries(const Request& r, int32_t eos) {
    std::map<int32_t, ops::LogitsRuleEntry> by_token;
    for (const TokenBias& b : r.rules.logit_bias) by_token[b.token] = {b.token, b.bias, 0};
    if (r.rules.min_tokens > 0) {
        std::vector<int32_t> ban = r.rules.min_tokens_stops;
        if (r.stop_at_eos) ban.push_back(eos);
        for (int32_t id : ban) {
            ops::LogitsRuleEntry& e = by_token[id];
            e.token = id;
            e.ban = 1;
        }
    }
    std::vector<ops::LogitsRuleEntry> out;
    for (const auto& [token, e] : by_token) out.push_back(e);
    return out;
}

// Up to `k` n-gram draft tokens after `h`'s last token: what followed the latest earlier
// occurrence of the last two tokens, else of the last one, within the last 4096 tokens; empty
// when there is none.
std::vector<int32_t> ngram_drafts(const std::vector<int32_t>& h, int k) {
    const int64_t n = static_cast<int64_t>(h.size()), lo = std::max<int64_t>(0, n - 4096);
    if (n < 2) return {};
    for (int gram = 2; gram >= 1; --gram) {
        if (n < gram + 1) continue;
        for (int64_t i = n - 2; i >= lo + gram - 1; --i) {
            bool match = true;
            for (int g = 0; g < gram && match; ++g) match = h[i - g] == h[n - 1 - g];
            if (match) return {h.begin() + i + 1, h.begin() + std::min<int64_t>(n, i + 1 + k)};
        }
    }
    return {};
}

StepRow row(int slot, int64_t pos0, const int32_t* ids, int32_t len) {
    StepRow r;
    r.slot = slot;
    r.pos0 = pos0;
    r.ids = ids;
    r.len = len;
    return r;
}

}  // namespace

struct Session::Impl {
    Engine::Impl* engine = nullptr;
    CacheSlot slot;
    bool busy = false;  // a request is running on it
    // The tokens fed so far, in order: a request continuing the session counts them as part
    // of its prompt for the repetition penalty (Request::rules).
    std::vector<int32_t> tokens;
    // Its prefix snapshots (Request::snapshot_every), by ascending position.
    struct Snapshot {
        int64_t pos = 0;
        SnapshotRef ref;
    };
    std::vector<Snapshot> snapshots;
    int64_t pos() const { return static_cast<int64_t>(tokens.size()); }
    const Snapshot* snapshot_at(int64_t p) const {
        for (const Snapshot& s : snapshots)
            if (s.pos == p) return &s;
        return nullptr;
    }
    void drop_snapshots_after(int64_t p) {
        while (!snapshots.empty() && snapshots.back().pos > p) snapshots.pop_back();
    }
};

namespace {

// A step of an engine in a rank group, from its start to its end (RankGroup::Impl::step_begin).
class StepMark {
  public:
    explicit StepMark(RankGroup* group) : group_(group) {
        if (group_ != nullptr) group_->impl().step_begin();
    }
    ~StepMark() {
        if (group_ != nullptr) group_->impl().step_end();
    }
    StepMark(const StepMark&) = delete;
    StepMark& operator=(const StepMark&) = delete;

  private:
    RankGroup* group_;
};

}  // namespace

struct Engine::Impl {
    // One session's part of a feed.
    struct FeedRow {
        Session::Impl* s = nullptr;
        const std::vector<int32_t>* ids = nullptr;
        bool all = false;
        std::vector<float>* logits = nullptr;
        const std::vector<int32_t>* mtp_next = nullptr;  // [ids] when the MTP runs
        std::vector<float>* mtp_logits = nullptr;
    };

    EngineOptions options;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Model> model;
    std::unique_ptr<CachePool> pool;
    std::unique_ptr<SnapshotStore> snapshots;  // EngineOptions::snapshots (null: none)
    ModelInfo info;
    std::deque<Running> waiting;
    // The waiting requests not cancelled (a cancelled one ends at the next step without taking
    // a slot, so it no longer holds a place in the queue): all of them (the queue's length), or
    // those that need a slot (not those on a session, which has its own).
    size_t waiting_count(bool need_slot) const {
        return static_cast<size_t>(
            std::count_if(waiting.begin(), waiting.end(), [need_slot](const Running& w) {
                return !w.cancelled && !(need_slot && w.r.session != nullptr);
            }));
    }
    std::map<RequestId, Running> running;  // admission order = id order
    RequestId next_id = 1;
    int64_t prompt_tokens_fed = 0;
    // Request::share_prompt: the leading request of each key while it may take followers.
    std::map<uint64_t, RequestId> prompt_leaders;

    Running* find(RequestId id) {
        if (auto it = running.find(id); it != running.end()) return &it->second;
        for (Running& w : waiting)
            if (w.id == id) return &w;
        return nullptr;
    }
    // A request waiting for its leader's prefix: whether it still should (else it prefills on
    // its own from now on).
    bool waits_for_leader(Running& q) {
        if (q.leader == 0) return false;
        const Running* l = find(q.leader);
        if (l == nullptr || l->cancelled || l->fed >= l->r.prompt.size() - 1) q.leader = 0;
        return q.leader != 0;
    }
    // A leader's followers, running and holding their slots, start from a copy of its cache now
    // that it has fed all but the last prompt token.
    void hand_prefix_to_followers(Running& l) {
        for (auto& [id, f] : running) {
            if (f.leader != l.id || f.cancelled) continue;
            pool->copy_slot(l.slot, f.slot);  // (rings, states, entries, generator, token table)
            seed(f.slot, f.r.sampling.seed);
            f.fed = l.fed;
            f.pos = l.pos;
            f.leader = 0;
        }
        stop_leading(l);
    }
    void stop_leading(Running& l) {
        if (!l.leads) return;
        l.leads = false;
        if (auto it = prompt_leaders.find(l.r.share_prompt);
            it != prompt_leaders.end() && it->second == l.id)
            prompt_leaders.erase(it);
    }
    bool has_followers(const Running& l) const {
        for (const auto& [id, f] : running)
            if (f.leader == l.id) return true;
        for (const Running& w : waiting)
            if (w.leader == l.id) return true;
        return false;
    }

    // The model's steps, marked for the rank group's watch (RankGroupWatch::step_timeout_s).
    Status run_step(std::span<const StepRow> rows, const LayerTap& tap = nullptr) {
        StepMark mark(options.rank_group.get());
        return model->run_step(*pool, rows, tap);
    }
    Status run_mtp(std::span<const Model::MtpRow> rows, bool chained = false) {
        StepMark mark(options.rank_group.get());
        return model->run_mtp(*pool, rows, chained);
    }

    void seed(int slot, uint64_t seed) {
        uint64_t s[4];
        ops::seed_rng(seed, s);
        backend->upload(pool->rng() + 4 * int64_t{slot}, s, sizeof(s));
    }

    // Feeds sessions' tokens: one row alone is split into steps of step_tokens; several rows
    // go in one step.
    Status feed(const std::vector<FeedRow>& rows, const LayerTap& tap) {
        const int cap = model->step_tokens();
        const int64_t V = info.vocab_size;
        int64_t total = 0;
        for (const FeedRow& f : rows) {
            if (f.ids->empty()) return error("feed: no tokens");
            if (f.s->busy) return error("feed: a request is running on this session");
            if (f.s->pos() + static_cast<int64_t>(f.ids->size()) > pool->layout().max_context)
                return error("context full: ", f.s->pos(), " + ", f.ids->size(),
                             " tokens exceed the cache capacity of ", pool->layout().max_context,
                             " (raise --max-context)");
            total += static_cast<int64_t>(f.ids->size());
        }
        if (rows.size() > 1 && total > cap)
            return error("feed_batch: ", total, " tokens exceed the step capacity of ", cap);
        if (rows.size() > 1 && tap) return error("feed_batch: taps need a single row");
        if (rows.size() == 1) {
            const FeedRow& f = rows[0];
            const int64_t n = static_cast<int64_t>(f.ids->size());
            if (f.mtp_next && f.mtp_next->size() != f.ids->size())
                return error("feed_with_mtp: ", f.mtp_next->size(), " next tokens for ",
                             f.ids->size(), " tokens");
            std::vector<float> all, piece, mtp_all, mtp_piece;
            for (int64_t done = 0; done < n;) {
                const int32_t c = static_cast<int32_t>(std::min<int64_t>(cap, n - done));
                StepRow r = row(f.s->slot.index(), f.s->pos(), f.ids->data() + done, c);
                r.logits =
                    f.all ? LogitsWanted::kAll
                          : (done + c == n && f.logits ? LogitsWanted::kLast : LogitsWanted::kNone);
                r.logits_out = &piece;
                if (f.mtp_next) {
                    r.mtp_next = f.mtp_next->data() + done;
                    r.mtp_logits_out = &mtp_piece;
                }
                DSV4_RETURN_IF_ERROR(run_step({&r, 1}, tap));
                f.s->tokens.insert(f.s->tokens.end(), f.ids->begin() + done,
                                   f.ids->begin() + done + c);
                if (f.all) all.insert(all.end(), piece.begin(), piece.end());
                if (f.mtp_next) mtp_all.insert(mtp_all.end(), mtp_piece.begin(), mtp_piece.end());
                done += c;
            }
            if (f.logits) *f.logits = f.all ? std::move(all) : std::move(piece);
            if (f.mtp_logits) *f.mtp_logits = std::move(mtp_all);
            return Status::ok();
        }
        std::vector<StepRow> step;
        for (const FeedRow& f : rows) {
            StepRow& r = step.emplace_back(row(f.s->slot.index(), f.s->pos(), f.ids->data(),
                                               static_cast<int32_t>(f.ids->size())));
            r.logits =
                f.logits ? (f.all ? LogitsWanted::kAll : LogitsWanted::kLast) : LogitsWanted::kNone;
            r.logits_out = f.logits;
        }
        DSV4_RETURN_IF_ERROR(run_step(step));
        for (const FeedRow& f : rows)
            f.s->tokens.insert(f.s->tokens.end(), f.ids->begin(), f.ids->end());
        (void)V;
        return Status::ok();
    }

    // Moves waiting requests into slots while there are free ones.
    void admit() {
        while (!waiting.empty()) {
            Running& w = waiting.front();
            if (w.r.session == nullptr) {
                auto slot = pool->acquire();
                if (!slot) break;  // full: wait for a slot
                w.own = std::move(*slot);
                w.slot = w.own.index();
                w.pos = 0;
            }
            seed(w.slot, w.r.sampling.seed);
            if (w.r.rules.any()) {
                const std::vector<ops::LogitsRuleEntry> entries =
                    rule_entries(w.r, info.eos_token_id);
                ops::SlotRules rules;
                rules.on = 1;
                rules.count = w.r.rules.penalties();
                rules.output_from = static_cast<int32_t>(w.pos + w.r.prompt.size());
                rules.min_tokens = w.r.rules.min_tokens;
                rules.n_entries = static_cast<int32_t>(entries.size());
                rules.repetition = w.r.rules.repetition_penalty;
                rules.frequency = w.r.rules.frequency_penalty;
                rules.presence = w.r.rules.presence_penalty;
                // A session's earlier tokens are part of the prompt the penalties see.
                std::span<const int32_t> before;
                if (w.r.session != nullptr) before = w.r.session->impl_->tokens;
                pool->set_rules(w.slot, rules, entries, before);
                w.rules_on = true;
            }
            const RequestId id = w.id;
            running.emplace(id, std::move(w));
            waiting.pop_front();
        }
    }

    void finish(Running& q, FinishReason why, std::vector<TokenEvent>* events, int32_t token = -1,
                std::string err = {}, const TokenLogprobs* lp = nullptr) {
        TokenEvent& ev = token_event(q, token, lp, events);
        ev.finish = why;
        ev.error = std::move(err);
        ev.drafted = q.drafted;
        ev.accepted = q.accepted;
        ev.drafted_at = q.drafted_at;
        ev.accepted_at = q.accepted_at;
        if (q.r.session != nullptr) q.r.session->impl_->busy = false;
        if (q.rules_on) pool->set_rules(q.slot, {}, {});  // (the slot may serve a feed next)
        stop_leading(q);
    }
    // An event with a token (or none: -1) and its log-probabilities, as the request asked
    // (Request::logprobs; lp: the step's, or nullptr).
    static TokenEvent& token_event(const Running& q, int32_t token, const TokenLogprobs* lp,
                                   std::vector<TokenEvent>* events) {
        TokenEvent& ev = events->emplace_back();
        ev.id = q.id;
        ev.token = token;
        if (lp != nullptr && q.r.logprobs >= 0) {
            ev.logprobs = *lp;
            ev.logprobs->top_n = q.r.logprobs;
            std::fill(ev.logprobs->top.begin() + q.r.logprobs, ev.logprobs->top.end(),
                      TokenLogprob{});
        }
        return ev;
    }

    // A snapshot of the session's sequence where it is now, held by the session; an error
    // when no buffer is free.
    Status save_snapshot(Session::Impl& s) {
        if (s.snapshot_at(s.pos()) != nullptr) return Status::ok();
        DSV4_ASSIGN_OR_RETURN(SnapshotRef ref, snapshots->save(s.slot.index()));
        s.snapshots.push_back({s.pos(), std::move(ref)});
        return Status::ok();
    }

    Status step(std::vector<TokenEvent>* events);
    bool completes_block(int64_t p) const;
    int draft_limit(Speculation speculative, int draft_tokens) const;
    Status run_mtp_drafts(std::vector<Model::MtpRow>& rows, const std::vector<Running*>& owner);
};

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

Status Session::feed(const std::vector<int32_t>& ids, std::vector<float>* all_logits,
                     std::vector<float>* last_logits) {
    if (all_logits && last_logits) {
        DSV4_RETURN_IF_ERROR(impl_->engine->feed({{impl_.get(), &ids, true, all_logits}}, nullptr));
        const int64_t V = impl_->engine->info.vocab_size;
        last_logits->assign(all_logits->end() - V, all_logits->end());
        return Status::ok();
    }
    return impl_->engine->feed(
        {{impl_.get(), &ids, all_logits != nullptr, all_logits ? all_logits : last_logits}},
        nullptr);
}

Status Session::feed_with_taps(const std::vector<int32_t>& ids, std::vector<float>* all_logits,
                               const std::function<void(int, const float*, int64_t)>& tap) {
    std::vector<float> scratch;
    return impl_->engine->feed({{impl_.get(), &ids, true, all_logits ? all_logits : &scratch}},
                               tap);
}

Status Session::feed_with_mtp(const std::vector<int32_t>& ids, const std::vector<int32_t>& next,
                              std::vector<float>* logits, std::vector<float>* mtp_logits) {
    std::vector<float> scratch;
    Engine::Impl::FeedRow row{impl_.get(), &ids, true, logits ? logits : &scratch};
    row.mtp_next = &next;
    row.mtp_logits = mtp_logits;
    return impl_->engine->feed({row}, nullptr);
}

int64_t Session::position() const {
    return impl_->pos();
}

const std::vector<int32_t>& Session::tokens() const {
    return impl_->tokens;
}

void Session::reset() {
    impl_->engine->pool->reset(impl_->slot.index());
    impl_->tokens.clear();
    impl_->snapshots.clear();
}

Status Session::copy_from(const Session& src) {
    return copy_prefix_from(src, src.position());
}

Status Session::copy_prefix_from(const Session& src, int64_t n) {
    Session::Impl& d = *impl_;
    const Session::Impl& s = *src.impl_;
    if (s.engine != d.engine) return error("copy_from: the sessions belong to different engines");
    if (d.busy) return error("copy_from: a request is running on this session");
    if (n < 0 || n > s.pos())
        return error("copy_from: position ", n, " is outside the source's ", s.pos(), " tokens");
    // (a snapshot where there is one: the source may have a request running)
    const Session::Impl::Snapshot* snap = s.snapshot_at(n);
    if (n < s.pos() && snap == nullptr) {
        std::string held;
        for (const Session::Impl::Snapshot& h : s.snapshots) held += " " + std::to_string(h.pos);
        return error("copy_from: the source holds no snapshot at position ", n,
                     held.empty() ? " (it holds none)" : " (it holds" + held + ")");
    }
    if (snap == nullptr && s.busy)
        return error("copy_from: a request is running on the source session");
    Engine::Impl& e = *d.engine;
    if (&s == &d) {  // back to position n (the snapshot there stays valid)
        if (n == d.pos()) return Status::ok();
        e.snapshots->restore(snap->ref, d.slot.index());
        d.tokens.resize(static_cast<size_t>(n));
        d.drop_snapshots_after(n);
        return Status::ok();
    }
    d.snapshots.clear();
    e.pool->copy_slot(s.slot.index(), d.slot.index(), snap != nullptr ? n : -1);
    if (snap != nullptr) e.snapshots->restore(snap->ref, d.slot.index());
    d.tokens.assign(s.tokens.begin(), s.tokens.begin() + n);
    return Status::ok();
}

Status Session::snapshot() {
    Session::Impl& d = *impl_;
    Engine::Impl& e = *d.engine;
    if (e.snapshots == nullptr) return error("snapshot: the engine keeps no prefix snapshots");
    if (d.busy) return error("snapshot: a request is running on this session");
    if (d.pos() == 0 || d.pos() % e.info.snapshot_block != 0)
        return error("snapshot: position ", d.pos(), " is not a positive multiple of ",
                     e.info.snapshot_block, " (the model's compress rates)");
    return e.save_snapshot(d);
}

std::vector<int64_t> Session::snapshot_positions() const {
    std::vector<int64_t> p;
    for (const Session::Impl::Snapshot& s : impl_->snapshots) p.push_back(s.pos);
    return p;
}

void Session::drop_snapshots() {
    impl_->snapshots.clear();
}

Status check_model_folder(const std::string& dir) {
    auto cfg = load_model_config(dir + "/config.json");
    if (!cfg) return cfg.status().with_context(dir);
    auto store = TensorStore::open(dir);
    if (!store) return store.status().with_context(dir);
    auto backend = make_cpu_backend();
    auto w = bind_weights(*store, *cfg, *backend);
    if (!w) return w.status().with_context(dir);
    return Status::ok();
}

int visible_gpus() {
#if DSV4_WITH_CUDA
    return cuda_device_count();
#else
    return 0;
#endif
}

namespace {

// The bytes of `store` a rank holding `shard` of every layer's routed experts loads: every
// tensor but the other ranks' experts (named "...experts.<e>." in every checkpoint layout; the
// shared expert's "shared_experts." is not; a tensor of stacked experts counts whole).
size_t rank_weight_bytes(const TensorStore& store, const ops::ExpertShard& shard) {
    size_t n = 0;
    for (const std::string& name : store.names()) {
        const size_t at = name.find(".experts.");
        if (at != std::string::npos && at + 9 < name.size() &&
            std::isdigit(static_cast<unsigned char>(name[at + 9]))) {
            const int e = std::atoi(name.c_str() + at + 9);
            if (e < shard.first || e >= shard.first + shard.count) continue;
        }
        n += store.find(name)->nbytes;
    }
    return n;
}

// The backend for options.device ("auto": CUDA where it can run this configuration).
Expected<std::unique_ptr<Backend>> make_backend(const EngineOptions& o) {
    if (o.device == "cpu") return make_cpu_backend();
    if (o.device != "cuda" && o.device != "auto")
        return error("unknown device '", o.device, "' (cpu, cuda or auto)");
#if DSV4_WITH_CUDA
    if (o.device == "auto") {
        auto b = make_cuda_backend(0);
        if (b) return b;
        return make_cpu_backend();
    }
    // Ranks on GPUs (docs/parallel.md): rank r on GPU r mod the GPUs this process sees, so one
    // process a GPU on each host with the ranks numbered host by host, or every rank a thread
    // of one process with a GPU each (NCCL takes one rank a GPU).
    int device = 0;
    if (o.rank_group != nullptr) {
        const int gpus = visible_gpus();
        if (o.rank_group->impl().all_here() && o.rank_group->size() > gpus)
            return error(o.rank_group->size(), " ranks in one process need a GPU each; ", gpus,
                         " visible");
        if (gpus > 0) device = o.rank % gpus;
    }
    return make_cuda_backend(device);
#else
    if (o.device == "auto") return make_cpu_backend();
    return error(
        "device 'cuda': this build has no CUDA backend (configure with nvcc present, "
        "or -DDSV4_CUDA=ON)");
#endif
}

}  // namespace

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Expected<std::unique_ptr<Engine>> Engine::create(const EngineOptions& given) {
    EngineOptions options = given;
    // Ranks take GPUs only when asked (--device cuda, --gpus N): "auto" picks the CPU for them.
    if (options.rank_group != nullptr && options.device == "auto") options.device = "cpu";
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    if (options.model_dir.empty() == options.synthetic.empty())
        return error(options.model_dir.empty()
                         ? "no model: give --model DIR (or --synthetic v4-flash|v4-pro|CONFIG.json)"
                         : "give either a model folder or a synthetic model, not both");
    if (options.max_context < 0) return error("max_context must be >= 0");
    if (options.max_chunk <= 0) return error("max_chunk must be > 0");
    if (options.max_seqs <= 0) return error("max_seqs must be > 0");
    if (options.max_queue < 0) return error("max_queue must be >= 0");
    if (options.cache_gib < 0) return error("cache budget must be >= 0");
    if (options.snapshots < 0) return error("snapshots must be >= 0, got ", options.snapshots);
    if (options.threads > 0) set_num_threads(options.threads);
    const std::optional<CacheType> kv_type = cache_type_from_name(options.kv_cache);
    const std::optional<CacheType> index_type = cache_type_from_name(options.indexer_cache);
    if (!kv_type || *kv_type == CacheType::kFp4)
        return error("unknown --kv-cache '", options.kv_cache, "' (f32, bf16 or fp8)");
    if (!index_type)
        return error("unknown --indexer-cache '", options.indexer_cache,
                     "' (f32, bf16, fp8 or fp4)");
    if (options.rank_group != nullptr) {
        if (options.rank < 0 || options.rank >= options.rank_group->size())
            return error("rank ", options.rank, " of a group of ", options.rank_group->size());
        if (options.rank_group->impl().collective(options.rank) == nullptr)
            return error("rank ", options.rank, " runs in another process of the group");
        // The bf16 configuration rounds the MoE's sum to bf16: per rank it would round partial
        // sums, which DeepSeek's code never does.
        if (options.numerics == "reference")
            return error(
                "ranks: numerics 'reference' (the bf16 configuration) is not split over "
                "ranks (its MoE sum is rounded whole); use float or reference-fp32");
    }
    DSV4_ASSIGN_OR_RETURN(impl->backend, make_backend(options));
    if (options.rank_group != nullptr) {
        // (A step for the watch too: on CUDA, NCCL's join waits for every rank forever.)
        const Status joined = [&] {
            StepMark mark(options.rank_group.get());
            return impl->backend->set_collective(
                options.rank_group->impl().collective(options.rank));
        }();
        // (the group's own errors name the rank already)
        const std::string whose = str_cat("rank ", options.rank);
        if (!joined.is_ok() && joined.message().rfind(whose + ": ", 0) == 0) return joined;
        if (!joined.is_ok()) return joined.with_context(whose);
    }
    const bool synthetic = !options.synthetic.empty();
    const std::string source =
        synthetic ? "synthetic " + options.synthetic + " (" + options.synthetic_format + ")"
                  : options.model_dir;
    SynthSpec synth{options.synthetic, options.synthetic_layers, options.synthetic_format};
    synth.mtp = options.synthetic_mtp;
    auto cfg =
        synthetic ? synth_config(synth) : load_model_config(options.model_dir + "/config.json");
    if (!cfg) return cfg.status().with_context("loading " + source);
    if (options.synthetic_mtp && (!synthetic || cfg->num_mtp_layers == 0))
        return error(synthetic ? source + " has no MTP block (num_nextn_predict_layers)"
                               : std::string("synthetic_mtp without a synthetic model"));
    if (std::string why =
            shape_beyond_limits(*cfg, *kv_type, *index_type, impl->backend->shape_limits());
        !why.empty())
        return error(source, ": the ", impl->backend->name(), " backend's kernels take no ", why);
    // The cache first: its size is the one most likely not to fit, and checking it needs
    // only the config.
    // The MTP block's caches when the config has one (a checkpoint without its tensors then
    // keeps one unused window ring per slot).
    int64_t context = options.max_context;
    if (context == 0)
        context = cfg->max_position_embeddings > 0
                      ? std::min<int64_t>(4096, cfg->max_position_embeddings)
                      : 4096;
    CacheLayout layout{options.max_seqs, context, *kv_type, *index_type, cfg->num_mtp_layers > 0};
    layout.ring_extra = std::min(kMaxDraftTokens - 1, impl->backend->max_ring_extra());
    const CacheFootprint fp =
        cache_footprint(*cfg, layout.kv, layout.index, layout.mtp, layout.ring_extra);
    if (options.cache_gib > 0) {
        const double per_seq = fp.per_sequence(context);
        const double fit = options.cache_gib * (1 << 30) / per_seq;
        if (fit < 1)
            return error("a KV-cache budget of ", options.cache_gib, " GiB holds no sequence of ",
                         context, " tokens (", per_seq / (1 << 30), " GiB each)");
        layout.max_seqs = static_cast<int>(std::min(fit, 1e6));
    }
    // The device's indexer keeps a token's scores on chip: a bound on the context.
    for (const LayerSpec& spec : cfg->layers) {
        if (spec.kind != LayerKind::kCsa) continue;
        const int64_t entries = context / spec.compress_rate + 1;
        const int64_t most =
            impl->backend->max_indexer_entries(cfg->index_n_heads, cfg->index_head_dim);
        if (entries > most)
            return error("--max-context ", context, " is too long for the ", impl->backend->name(),
                         " indexer: at most ", (most - 1) * spec.compress_rate, " tokens (", most,
                         " compressed entries per sequence)");
    }
    const double gib = 1024.0 * 1024.0 * 1024.0;
    // The prefix snapshots count with the cache (SnapshotStore::create checks them again).
    const double snapshot_bytes = options.snapshots * fp.snapshot_bytes;
    // The routed experts this rank holds (all on one rank): what the memory checks count.
    const ops::ExpertShard shard =
        ops::expert_shard(cfg->n_routed_experts, impl->backend->rank(), impl->backend->ranks());
    if (synthetic) {
        // As many layers as fit (or the ones asked for, if they fit), with the cache and a
        // margin for the workspaces.
        const double avail = static_cast<double>(impl->backend->memory_available());
        const double cache =
            static_cast<double>(layout.max_seqs) * fp.per_sequence(context) + snapshot_bytes;
        // The margin: the step workspaces (all buckets: about twice the largest, whose logits,
        // streams and projections dominate) and 2 GiB for everything else.
        const double step_tokens = options.max_chunk + layout.max_seqs;
        const double workspaces =
            3.0 * step_tokens * 4 *
            (cfg->vocab_size + 16.0 * cfg->hidden_size + 2.0 * cfg->num_heads * cfg->head_dim);
        const int local = shard.count;
        double need = synth_fixed_bytes(*cfg, synth.format, local) + cache + workspaces + 2 * gib;
        int fit = 0;
        while (fit < cfg->num_layers &&
               need + synth_layer_bytes(*cfg, synth.format, fit, local) <= avail)
            need += synth_layer_bytes(*cfg, synth.format, fit++, local);
        if (fit == 0 || (synth.layers > 0 && fit < synth.layers))
            return error("synthetic ", options.synthetic, ": ",
                         synth.layers > 0 ? std::to_string(synth.layers) : std::string("1"),
                         " layers need more than the ", avail / gib, " GiB free on the ",
                         impl->backend->name(), " device (~",
                         synth_layer_bytes(*cfg, synth.format, 0, local) / gib, " GiB per layer + ",
                         cache / gib, " GiB of KV cache); at most ", fit, " fit");
        if (synth.layers == 0) {
            if (options.rank_group != nullptr) {
                // Every rank must build the same model: the fewest layers any rank fits (a sum
                // of one-hot rows over the group's host collective, whatever the device).
                ops::Collective& group = *options.rank_group->impl().collective(options.rank);
                std::vector<float> hot(static_cast<size_t>(cfg->num_layers) + 1, 0.0f);
                hot[static_cast<size_t>(fit)] = 1.0f;
                group.all_reduce_sum(hot.data(), static_cast<int64_t>(hot.size()));
                DSV4_RETURN_IF_ERROR(group.status());
                fit = static_cast<int>(
                    std::find_if(hot.begin(), hot.end(), [](float v) { return v > 0; }) -
                    hot.begin());
            }
            synth.layers = fit;
            DSV4_ASSIGN_OR_RETURN(*cfg, synth_config(synth));
        }
    }
    // On a GPU, everything must fit at once: one line with what is needed and what is there,
    // before anything is copied (weights as stored: the GPU keeps them packed as they are).
    if (!synthetic && impl->backend->name() != std::string("cpu")) {
        auto store = TensorStore::open(options.model_dir);
        if (!store) return store.status().with_context("loading " + options.model_dir);
        const double weights = static_cast<double>(rank_weight_bytes(*store, shard));
        const double cache =
            static_cast<double>(layout.max_seqs) * fp.per_sequence(context) + snapshot_bytes;
        const double avail = static_cast<double>(impl->backend->memory_available());
        if (weights + cache > avail)
            return error("the model needs ~", weights / gib, " GiB of weights + ", cache / gib,
                         " GiB of KV cache on the ", impl->backend->name(), " device, which has ",
                         avail / gib,
                         " GiB free (fewer --max-seqs / --max-context, or --device cpu)");
    }
    auto pool = CachePool::create(*cfg, *impl->backend, layout);
    if (!pool) return pool.status();
    impl->pool = std::move(*pool);
    if (options.snapshots > 0) {
        DSV4_ASSIGN_OR_RETURN(
            impl->snapshots,
            SnapshotStore::create(*cfg, *impl->backend, *impl->pool, options.snapshots));
    }
    const std::optional<Numerics> numerics = numerics_from_name(options.numerics);
    if (!numerics)
        return error("unknown numerics '", options.numerics,
                     "' (float, reference or reference-fp32)");
    const int step_tokens = options.max_chunk + layout.max_seqs;
    auto model = synthetic ? Model::load_synthetic(synth, *impl->backend, step_tokens, *numerics,
                                                   options.on_load_progress)
                           : Model::load(options.model_dir, *impl->backend, step_tokens, *numerics,
                                         options.on_load_progress);
    if (!model) return model.status().with_context("loading " + source);
    impl->model = std::move(*model);
    impl->model->set_recorded_steps(options.step_graphs);
    const ModelConfig& c = impl->model->config();
    ModelInfo& i = impl->info;
    i.vocab_size = c.vocab_size;
    i.bos_token_id = c.bos_token_id;
    i.eos_token_id = c.eos_token_id;
    i.num_layers = c.num_layers;
    i.hidden_size = c.hidden_size;
    i.hc_mult = c.hc_mult;
    i.summary = c.summary();
    i.device = impl->backend->name();
    i.weight_bytes = impl->model->weights().bytes;
    i.cache_entry_type = "kv " + std::string(cache_type_name(layout.kv)) + ", indexer keys " +
                         std::string(cache_type_name(layout.index));
    i.max_seqs = layout.max_seqs;
    i.max_context = layout.max_context;
    i.cache_bytes_per_token = fp.bytes_per_token;
    i.cache_fixed_bytes = static_cast<size_t>(fp.fixed_bytes);
    i.cache_bytes = static_cast<size_t>(fp.per_sequence(context));
    i.cache_pool_bytes = impl->pool->bytes();
    i.step_tokens = impl->model->step_tokens();
    i.weight_formats = impl->model->weights().formats;
    i.has_mtp = impl->model->has_mtp();
    i.max_draft_tokens = layout.ring_extra + 1;
    i.snapshot_block = SnapshotStore::block(c);
    i.snapshots = options.snapshots;
    i.snapshot_bytes = static_cast<size_t>(
        cache_footprint(c, layout.kv, layout.index, layout.mtp, layout.ring_extra).snapshot_bytes);
    i.source = synthetic ? source + ", " + std::to_string(c.num_layers) + " layers" : source;
    i.rank = impl->backend->rank();
    i.ranks = impl->backend->ranks();
    i.experts_first = shard.first;
    i.experts_local = shard.count;
    i.experts_total = c.n_routed_experts;
    return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const ModelInfo& Engine::info() const {
    return impl_->info;
}

Expected<std::unique_ptr<Session>> Engine::new_session() {
    DSV4_ASSIGN_OR_RETURN(CacheSlot slot, impl_->pool->acquire());
    auto s = std::make_unique<Session::Impl>();
    s->engine = impl_.get();
    s->slot = std::move(slot);
    return std::unique_ptr<Session>(new Session(std::move(s)));
}

Status Engine::feed_batch(std::vector<BatchFeed>& feeds) {
    if (feeds.empty()) return error("feed_batch: no rows");
    std::vector<Impl::FeedRow> rows;
    for (BatchFeed& f : feeds) {
        if (f.session == nullptr) return error("feed_batch: a row has no session");
        for (const Impl::FeedRow& r : rows)
            if (r.s == f.session->impl_.get()) return error("feed_batch: a session appears twice");
        rows.push_back({f.session->impl_.get(), &f.ids, f.all_logits, f.logits});
    }
    return impl_->feed(rows, nullptr);
}

Expected<RequestId> Engine::submit(Request r) {
    Impl& e = *impl_;
    if (r.prompt.empty()) return error("the prompt has no tokens");
    if (r.max_tokens < 0) return error("max_tokens must be >= 0, got ", r.max_tokens);
    if (r.logprobs < -1 || r.logprobs > kMaxTopLogprobs)
        return error("logprobs must be -1 (none) or 0 to ", kMaxTopLogprobs, ", got ", r.logprobs);
    DSV4_RETURN_IF_ERROR(check_vocab(r.prompt, "token id", e.info.vocab_size));
    const int64_t start = r.session ? r.session->impl_->pos() : 0;
    if (start + static_cast<int64_t>(r.prompt.size()) > e.info.max_context)
        return error("the prompt (", r.prompt.size(), " tokens after ", start,
                     " already in the sequence) is longer than the context of ", e.info.max_context,
                     " tokens");
    if (r.session != nullptr && r.session->impl_->busy)
        return error("a request is already running on this session");
    DSV4_RETURN_IF_ERROR(check_speculation(r.speculative, r.draft_tokens));
    DSV4_RETURN_IF_ERROR(check_rules(r, e.info.vocab_size));
    if (r.snapshot_every != 0) {
        if (e.snapshots == nullptr)
            return error("snapshot_every: the engine keeps no prefix snapshots (snapshots = 0)");
        if (r.snapshot_every < 0 || r.snapshot_every % e.info.snapshot_block != 0)
            return error("snapshot_every must be a positive multiple of ", e.info.snapshot_block,
                         " (the model's compress rates), got ", r.snapshot_every);
        if (r.session == nullptr) return error("snapshot_every needs a request on a session");
    }

    if (e.waiting_count(false) >= static_cast<size_t>(e.options.max_queue))
        return error("the request queue is full (", e.options.max_queue, " waiting)");
    Running q;
    q.id = e.next_id++;
    q.r = std::move(r);
    if (q.r.speculative == Speculation::kNgram) {  // (a session's tokens come first)
        if (q.r.session != nullptr) q.history = q.r.session->impl_->tokens;
        q.history.insert(q.history.end(), q.r.prompt.begin(), q.r.prompt.end());
    }
    if (may_share_prompt(q.r)) {
        auto it = e.prompt_leaders.find(q.r.share_prompt);
        Running* l = it != e.prompt_leaders.end() ? e.find(it->second) : nullptr;
        if (l == nullptr || !l->leads) {
            q.leads = true;
            e.prompt_leaders[q.r.share_prompt] = q.id;
        } else if (l->r.prompt == q.r.prompt) {
            q.leader = l->id;
        }  // (else another prompt under the key: it runs alone)
    }
    if (q.r.session != nullptr) {
        Session::Impl& s = *q.r.session->impl_;
        s.busy = true;
        q.slot = s.slot.index();
        q.pos = s.pos();
    }
    const RequestId id = q.id;
    e.waiting.push_back(std::move(q));
    return id;
}

void Engine::cancel(RequestId id) {
    for (Running& w : impl_->waiting)
        if (w.id == id) w.cancelled = true;
    auto it = impl_->running.find(id);
    if (it != impl_->running.end()) it->second.cancelled = true;
}

Status Engine::step(std::vector<TokenEvent>* events) {
    return impl_->step(events);
}

Status Engine::Impl::step(std::vector<TokenEvent>* events) {
    // Cancelled requests end first (queued ones never take a slot).
    for (auto it = waiting.begin(); it != waiting.end();) {
        if (!it->cancelled) {
            ++it;
            continue;
        }
        finish(*it, FinishReason::kCancelled, events);
        it = waiting.erase(it);
    }
    for (auto it = running.begin(); it != running.end();) {
        if (!it->second.cancelled) {
            ++it;
            continue;
        }
        finish(it->second, FinishReason::kCancelled, events);
        it = running.erase(it);
    }
    admit();
    if (running.empty()) return Status::ok();

    // Decode rows first (one token each, more with speculative drafts), then prompt chunks in
    // admission order.
    const int64_t max_context = pool->layout().max_context;
    int budget = model->step_tokens();
    std::vector<StepRow> rows;
    std::vector<Running*> owners;
    std::vector<int32_t> starts;  // each row's first token in the step
    int32_t at = 0;
    // The step's room for drafts: what the decode rows' own tokens leave of it.
    int spare = budget;
    for (const auto& [id, q] : running) spare -= q.pending >= 0;
    for (auto& [id, q] : running) {
        if (q.pending < 0) continue;
        q.sampled = -1;
        q.fed_tokens = {q.pending};
        // Drafts: up to draft_limit n-gram tokens, or the MTP's. Each goes at the next
        // position while it fits the step, the context and max_tokens; one that completes a
        // block of a compressed layer is the last (so a rejected draft leaves nothing the
        // right token does not rewrite).
        std::vector<int32_t> want;
        if (q.r.speculative == Speculation::kNgram)
            want = ngram_drafts(q.history, draft_limit(q.r.speculative, q.r.draft_tokens));
        else if (q.r.speculative == Speculation::kMtp)
            want = std::move(q.mtp_drafts);
        q.mtp_drafts.clear();
        for (int32_t d : want) {
            const int64_t p = q.pos + static_cast<int64_t>(q.fed_tokens.size());
            if (spare <= 0 || p + 1 > max_context ||
                q.generated + static_cast<int64_t>(q.fed_tokens.size()) >= q.r.max_tokens)
                break;
            q.fed_tokens.push_back(d);
            --spare;
            if (completes_block(p)) break;
        }
        const int32_t len = static_cast<int32_t>(q.fed_tokens.size());
        StepRow& r = rows.emplace_back(row(q.slot, q.pos, q.fed_tokens.data(), len));
        r.sample = true;
        r.sampling = q.r.sampling;
        const bool spec = q.r.speculative != Speculation::kNone;
        r.sample_all = spec;
        q.spec_out.assign(len, -1);
        r.sampled_out = spec ? q.spec_out.data() : &q.sampled;
        q.logprobs.resize(q.r.logprobs >= 0 ? len : 0);
        r.logprobs_out = q.r.logprobs >= 0 ? q.logprobs.data() : nullptr;
        // The sample after each fed token verifies the draft that follows it (exact under
        // temperature too: each is kept with the model's probability given the drafts before).
        q.spec_drafts.assign(len, -1);
        for (int32_t t = 0; t + 1 < len; ++t) q.spec_drafts[t] = q.fed_tokens[t + 1];
        r.drafts = spec ? q.spec_drafts.data() : nullptr;
        r.rules = q.rules_on;
        owners.push_back(&q);
        starts.push_back(at);
        at += len;
        budget -= len;
    }
    for (auto& [id, q] : running) {
        if (q.pending >= 0 || budget <= 0 || waits_for_leader(q)) continue;
        // (a leader with followers stops one token short: its cache is copied to them there)
        const size_t end = q.r.prompt.size() - (q.leads && has_followers(q) ? 1 : 0);
        if (q.fed >= end) continue;  // (a leader whose copy is handed over next step)
        const int64_t left = static_cast<int64_t>(end - q.fed);
        int32_t c = static_cast<int32_t>(
            std::min<int64_t>({left, budget, static_cast<int64_t>(options.max_chunk)}));
        if (q.r.snapshot_every > 0) {  // (the chunk ends at the next snapshot position)
            const int64_t next = (q.pos / q.r.snapshot_every + 1) * q.r.snapshot_every;
            c = static_cast<int32_t>(std::min<int64_t>(c, next - q.pos));
        }
        const bool last = q.fed + c == q.r.prompt.size();
        q.sampled = -1;
        q.fed_tokens.assign(q.r.prompt.begin() + q.fed, q.r.prompt.begin() + q.fed + c);
        StepRow& r = rows.emplace_back(row(q.slot, q.pos, q.fed_tokens.data(), c));
        r.sample = last && q.r.max_tokens > 0;
        r.sampling = q.r.sampling;
        r.sampled_out = &q.sampled;
        q.logprobs.resize(q.r.logprobs >= 0 ? 1 : 0);
        r.logprobs_out = q.r.logprobs >= 0 ? q.logprobs.data() : nullptr;
        r.rules = q.rules_on;
        owners.push_back(&q);
        starts.push_back(at);
        at += c;
        budget -= c;
        prompt_tokens_fed += c;
    }
    if (rows.empty()) return Status::ok();  // (only requests waiting for a leader's prefix)
    Status st = run_step(rows);
    if (!st.is_ok()) {
        // Rows were checked at submit; a failure here ends the step's requests, not the engine.
        for (Running* q : owners) {
            const RequestId id = q->id;
            finish(*q, FinishReason::kError, events, -1, st.message());
            running.erase(id);
        }
        return Status::ok();
    }
    // Speculative requests: the MTP block on the positions that are now final, drafting the
    // token after the new pending one.
    std::vector<Model::MtpRow> mtp_rows;
    std::vector<std::vector<int32_t>> mtp_next;
    mtp_next.reserve(rows.size());
    std::vector<Running*> mtp_owner;
    std::vector<RequestId> prefix_done;  // leaders that have fed all but their last token
    // sessions whose prompt reached a snapshot position
    std::vector<Session::Impl*> snapshot_due;
    for (size_t i = 0; i < rows.size(); ++i) {
        Running& q = *owners[i];
        const bool decode_row = q.pending >= 0;
        const int64_t pos_before = q.pos;
        // The tokens this row produced, in order, and how many of its fed tokens are final.
        std::vector<int32_t> produced;
        int32_t final_len = rows[i].len;
        const bool mtp = q.r.speculative == Speculation::kMtp;
        if (decode_row && q.r.speculative != Speculation::kNone) {
            // The samples while they agree with the drafts, then the first that does not (or
            // the one after the last draft). Positions after it are rewritten by later steps.
            const int32_t len = rows[i].len;
            q.drafted += len - 1;
            int32_t kept = 0;
            for (int32_t t = 0; t < len; ++t) {
                produced.push_back(q.spec_out[t]);
                if (t + 1 == len || q.spec_out[t] != q.fed_tokens[t + 1]) break;
                ++kept;
            }
            q.accepted += kept;
            for (int32_t t = 0; t + 1 < len; ++t) {
                ++q.drafted_at[t];
                q.accepted_at[t] += t < kept;
            }
            final_len = 1 + kept;
        } else {
            produced = {q.sampled};
        }
        if (q.r.session != nullptr) {  // (its position: the tokens this row fed for good)
            std::vector<int32_t>& fed = q.r.session->impl_->tokens;
            fed.insert(fed.end(), q.fed_tokens.begin(), q.fed_tokens.begin() + final_len);
        }
        q.pos += final_len;
        if (!decode_row) {
            q.fed += rows[i].len;
            if (q.r.snapshot_every > 0 && q.pos % q.r.snapshot_every == 0)
                snapshot_due.push_back(q.r.session->impl_.get());
        }
        if (q.leads && q.fed + 1 == q.r.prompt.size()) prefix_done.push_back(q.id);
        q.pending = -1;
        const RequestId id = q.id;
        auto add_mtp = [&](int32_t last_next) {
            std::vector<int32_t>& next =
                mtp_next.emplace_back(q.fed_tokens.begin() + 1, q.fed_tokens.begin() + final_len);
            next.push_back(last_next);
            Model::MtpRow m;
            m.slot = q.slot;
            m.pos0 = pos_before;
            m.h_start = starts[i];
            m.len = final_len;
            m.next = next.data();
            mtp_rows.push_back(m);
            mtp_owner.push_back(&q);
        };
        if (q.fed < q.r.prompt.size()) {  // more prompt chunks to come
            if (mtp) add_mtp(q.r.prompt[q.fed]);
            continue;
        }
        if (q.r.max_tokens == 0) {
            finish(q, FinishReason::kLength, events);
            running.erase(id);
            continue;
        }
        bool done = false;
        for (size_t k = 0; k < produced.size() && !done; ++k) {
            const int32_t tok = produced[k];
            if (tok < 0) {
                finish(q, FinishReason::kError, events, -1,
                       str_cat("the model produced non-finite logits at position ", q.pos - 1,
                               " (generated token ", q.generated + 1,
                               "): the weights or the activations are not finite"));
                done = true;
                break;
            }
            ++q.generated;
            const bool fed = k + 1 < produced.size();  // an accepted draft is already fed
            FinishReason why = FinishReason::kNone;
            if (q.r.stop_at_eos && tok == info.eos_token_id)
                why = FinishReason::kEos;
            else if (q.generated >= q.r.max_tokens || (!fed && q.pos >= max_context))
                why = FinishReason::kLength;  // or no room to feed the token: the context is full
            // (produced[k] is the sample after fed token k: its log-probabilities' place)
            const TokenLogprobs* lp = k < q.logprobs.size() ? &q.logprobs[k] : nullptr;
            if (why != FinishReason::kNone) {
                finish(q, why, events, tok, {}, lp);
                done = true;
                break;
            }
            token_event(q, tok, lp, events);
            if (q.r.speculative == Speculation::kNgram) q.history.push_back(tok);
        }
        if (done) {
            running.erase(id);
            continue;
        }
        q.pending = produced.back();
        if (mtp) add_mtp(q.pending);
    }
    bool mtp_failed = false;
    if (!mtp_rows.empty()) {
        Status mst = run_mtp_drafts(mtp_rows, mtp_owner);
        mtp_failed = !mst.is_ok();
        if (!mst.is_ok()) {
            for (Running* q : mtp_owner) {
                if (!running.count(q->id)) continue;
                const RequestId id = q->id;
                finish(*q, FinishReason::kError, events, -1, mst.message());
                running.erase(id);
            }
        }
    }
    // (after the MTP block, which writes the prefix's last MTP cache rows; none free: the
    // request goes on without it)
    if (!mtp_failed)
        for (Session::Impl* s : snapshot_due) (void)save_snapshot(*s);
    for (RequestId l : prefix_done)
        if (auto it = running.find(l); it != running.end()) hand_prefix_to_followers(it->second);
    return Status::ok();
}

// The MTP block on the step's final positions (`rows`, owner by owner), drafting the token
// after each pending one; then, for requests that want more drafts, the block again on its
// own last output (Model::run_mtp chained) for the token after each new draft.
Status Engine::Impl::run_mtp_drafts(std::vector<Model::MtpRow>& rows,
                                    const std::vector<Running*>& owner) {
    std::vector<int32_t> out(rows.size(), -1);
    for (size_t k = 0; k < rows.size(); ++k)
        if (owner[k]->pending >= 0) rows[k].draft_out = &out[k];
    DSV4_RETURN_IF_ERROR(run_mtp(rows));
    // Each row's last token in the call just run: where a chained row takes its h from.
    std::vector<int32_t> last(rows.size());
    for (size_t k = 0, at = 0; k < rows.size(); ++k) {
        at += rows[k].len;
        last[k] = static_cast<int32_t>(at) - 1;
    }
    std::vector<Running*> who = owner;
    for (int j = 1;; ++j) {
        std::vector<Model::MtpRow> next_rows;
        std::vector<Running*> next_who;
        std::vector<int32_t> next_tok;
        for (size_t k = 0; k < who.size(); ++k) {
            if (out[k] < 0) continue;
            Running& q = *who[k];
            q.mtp_drafts.push_back(out[k]);
            if (j >= draft_limit(q.r.speculative, q.r.draft_tokens)) continue;
            Model::MtpRow m;
            m.slot = q.slot;
            m.pos0 = q.pos + j - 1;  // (the pending token's position, then each draft's)
            m.h_start = last[k];
            m.len = 1;
            next_rows.push_back(m);
            next_who.push_back(&q);
            next_tok.push_back(out[k]);
        }
        if (next_rows.empty()) return Status::ok();
        out.assign(next_rows.size(), -1);
        for (size_t k = 0; k < next_rows.size(); ++k) {
            next_rows[k].next = &next_tok[k];
            next_rows[k].draft_out = &out[k];
        }
        DSV4_RETURN_IF_ERROR(run_mtp(next_rows, /*chained=*/true));
        who = std::move(next_who);
        last.resize(who.size());
        std::iota(last.begin(), last.end(), 0);  // (chained rows are one token each)
    }
}

// Drafts a step may feed `q`: its request's count (0: the source's default), within what the
// rings allow.
int Engine::Impl::draft_limit(Speculation speculative, int draft_tokens) const {
    const int want = draft_tokens > 0                     ? draft_tokens
                     : speculative == Speculation::kNgram ? kMaxDraftTokens
                                                          : 1;
    return std::min(want, pool->layout().ring_extra + 1);
}

Status Engine::check_speculation(Speculation speculative, int draft_tokens) const {
    if (draft_tokens < 0 || draft_tokens > kMaxDraftTokens)
        return error("draft_tokens must be in [0, ", kMaxDraftTokens, "], got ", draft_tokens);
    if (draft_tokens > 0 && speculative == Speculation::kNone)
        return error("draft_tokens without speculative decoding");
    if (speculative == Speculation::kMtp) {
        if (!impl_->info.has_mtp)
            return error(
                "speculative decoding needs the checkpoint's MTP block (release-layout "
                "mtp.0.*); this model has none");
        if (impl_->model->config().mtp_spec.kind != LayerKind::kSliding)
            return error("speculative decoding with a compressed MTP block is not implemented");
    }
    return Status::ok();
}

int Engine::drafts_a_step(Speculation speculative, int draft_tokens) const {
    return speculative == Speculation::kNone ? 0 : impl_->draft_limit(speculative, draft_tokens);
}

// Whether feeding position p completes a block of some compressed layer: a speculative draft
// there is the last of its step, so a rejected draft leaves only what the right token at its
// position rewrites before anything reads it (its window ring row, its state row and the
// entry it pooled; a completion moves no state, ops/compressor.h), and no later draft writes a
// row of the next block over a row the re-pooling reads (docs/engine.md, "Speculative
// decoding").
bool Engine::Impl::completes_block(int64_t p) const {
    for (const LayerSpec& l : model->config().layers)
        if (l.kind != LayerKind::kSliding && (p + 1) % l.compress_rate == 0) return true;
    return false;
}

bool Engine::idle() const {
    return impl_->waiting.empty() && impl_->running.empty();
}
size_t Engine::queued() const {
    return impl_->waiting_count(true);
}
size_t Engine::running() const {
    return impl_->running.size();
}
int64_t Engine::prompt_tokens_fed() const {
    return impl_->prompt_tokens_fed;
}
int Engine::free_slots() const {
    return impl_->pool->free_slots();
}

int Engine::free_snapshots() const {
    return impl_->snapshots != nullptr ? impl_->snapshots->free() : 0;
}
size_t Engine::memory_in_use() const {
    return impl_->backend->memory_in_use();
}

StepBytes Engine::decode_step_bytes(int batch, int64_t context, double drafts,
                                    double mtp_runs) const {
    const Model& m = *impl_->model;
    const ModelConfig& c = m.config();
    const ModelWeights& w = m.weights();
    const CacheLayout& layout = impl_->pool->layout();
    const double E = c.n_routed_experts, k = c.num_experts_per_tok;
    auto experts = [&](double rows) { return rows == 1 ? k : E * (1 - std::pow(1 - k / E, rows)); };
    StepBytes out;
    out.experts_per_layer = experts(batch * (1 + drafts));
    const CacheRowFormat kv = kv_row_format(layout.kv, c.rope_dim);
    const CacheRowFormat keys = index_key_format(layout.index);
    const double kv_row = static_cast<double>(cache_row_bytes(kv, c.head_dim));
    for (int l = 0; l < c.num_layers; ++l) {
        const LayerWeights& lw = w.layers[l];
        out.weights += static_cast<double>(lw.bytes_dense) +
                       out.experts_per_layer * static_cast<double>(lw.bytes_expert);
        // Per row: the window, then the compressed entries attended (all of HCA's, CSA's top
        // K) and CSA's indexer keys, every one scored.
        const LayerSpec& spec = c.layers[l];
        double rows = static_cast<double>(std::min<int64_t>(context, c.sliding_window));
        if (spec.kind != LayerKind::kSliding) {
            const double entries = static_cast<double>(context / spec.compress_rate);
            rows +=
                spec.kind == LayerKind::kCsa ? std::min<double>(entries, c.index_topk) : entries;
            if (spec.kind == LayerKind::kCsa)
                out.cache +=
                    batch * entries * static_cast<double>(cache_row_bytes(keys, c.index_head_dim));
        }
        out.cache += batch * rows * kv_row;
    }
    out.weights += static_cast<double>(w.bytes_head);
    if (mtp_runs > 0 && !w.mtp.empty()) {
        const MtpWeights& mw = w.mtp[0];
        out.weights += mtp_runs * (static_cast<double>(mw.block.bytes_dense + mw.bytes_proj) +
                                   experts(batch) * static_cast<double>(mw.block.bytes_expert) +
                                   static_cast<double>(w.bytes_head));
    }
    return out;
}

Status Engine::count_expert_use(bool on) {
    return impl_->model->count_expert_use(on);
}

std::vector<int64_t> Engine::expert_use() {
    return impl_->model->expert_use();
}

void Engine::profile_ops(bool on) {
    impl_->model->set_recorded_steps(!on && impl_->options.step_graphs);
    impl_->backend->profile_ops(on);
}

std::string Engine::op_profile() {
    return impl_->backend->op_profile();
}

Expected<double> Engine::measure_read_bandwidth() {
    return impl_->backend->measure_read_bandwidth();
}

Expected<std::vector<int32_t>> Engine::generate(Session& session,
                                                const std::vector<int32_t>& prompt, int max_tokens,
                                                const SamplingParams& sampling, bool stop_at_eos,
                                                const std::function<bool(int32_t)>& on_token,
                                                Speculation speculative, GenerateStats* stats,
                                                int draft_tokens, const LogitsRules& rules) {
    if (!idle()) return error("generate: the engine is running other requests");
    DSV4_ASSIGN_OR_RETURN(RequestId id, submit({prompt, max_tokens, sampling, stop_at_eos, &session,
                                                speculative, draft_tokens, -1, rules}));
    std::vector<int32_t> out;
    std::vector<TokenEvent> events;
    for (bool done = false; !done;) {
        events.clear();
        DSV4_RETURN_IF_ERROR(step(&events));
        for (const TokenEvent& ev : events) {
            if (ev.id != id) continue;
            if (ev.token >= 0) {
                out.push_back(ev.token);
                if (on_token && !on_token(ev.token)) cancel(id);
            }
            if (ev.finish == FinishReason::kError) return error(ev.error);
            if (ev.finish != FinishReason::kNone) {
                done = true;
                if (stats) *stats = {ev.drafted, ev.accepted, ev.drafted_at, ev.accepted_at};
            }
        }
    }
    return out;
}

}  // namespace dsv4
