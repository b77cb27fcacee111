#include "server/engine_loop.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace dsv4::server {

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

ChannelEvent rejected(ApiError e) {
    ChannelEvent ev;
    ev.kind = ChannelEvent::Kind::kRejected;
    ev.rejection = std::move(e);
    return ev;
}

}  // namespace

EngineLoop::EngineLoop(Engine& engine, Metrics& metrics, size_t max_queue,
                       std::vector<Engine*> others, std::shared_ptr<RankGroup> group,
                       int prefix_cache, int64_t prefix_block)
    : engine_(engine),
      others_(std::move(others)),
      group_(std::move(group)),
      metrics_(metrics),
      max_queue_(max_queue),
      followers_(others_.empty() && group_ != nullptr && group_->size() > 1),
      // (with ranks every rank would need the same sequences: not done)
      prefix_cache_(others_.empty() && !followers_ ? static_cast<size_t>(prefix_cache) : 0),
      prefix_block_(prefix_cache_ > 0 ? prefix_block : 0) {
    DSV4_ASSERT(others_.empty() || group_ != nullptr,
                "an engine loop over ranks needs their group");
}

EngineLoop::~EngineLoop() {
    stop();
}

void EngineLoop::start() {
    DSV4_ASSERT(!thread_.joinable(), "the engine loop is already running");
    publish_gauges();
    thread_ = std::thread([this] { run(); });
}

void EngineLoop::post(std::vector<Job> jobs) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (!stopped_) {
            for (Job& job : jobs) inbox_.push_back(std::move(job));
            cv_.notify_one();
            return;
        }
    }
    for (Job& job : jobs)
        job.channel->push(
            rejected(server_error(503, "the server is shutting down", "shutting_down")));
}

void EngineLoop::wake() {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
    cv_.notify_one();
}

void EngineLoop::stop() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
        cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
    // (The engine thread is gone: this thread may speak for rank 0 now.)
    if (followers_ && !stopped_followers_) {
        stopped_followers_ = true;
        tell_followers(RankCommand::stop());
        group_->leave(0);
    }
}

void EngineLoop::tell_followers(const RankCommand& c) {
    if (!followers_) return;
    // A failure (a rank went away) fails the group: the next step fails with its error, which
    // ends every request in flight.
    (void)group_->broadcast(0, encode_rank_command(c));
}

int EngineLoop::idle_kept() const {
    int n = 0;
    for (const Kept& k : kept_) n += !k.busy;
    return n;
}

bool EngineLoop::evict_kept(const Kept* spare) {
    auto lru = kept_.end();
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
        if (!it->busy && &*it != spare && (lru == kept_.end() || it->used < lru->used)) lru = it;
    if (lru == kept_.end()) return false;
    kept_.erase(lru);  // (its slot and snapshots are free again)
    return true;
}

bool EngineLoop::drop_snapshots(const Kept* spare) {
    Kept* lru = nullptr;
    for (Kept& k : kept_)
        if (!k.busy && &k != spare && !k.session->snapshot_positions().empty() &&
            (lru == nullptr || k.used < lru->used))
            lru = &k;
    if (lru == nullptr) return false;
    lru->session->drop_snapshots();
    return true;
}

void EngineLoop::make_snapshot_room(const Kept* k, int64_t from, int64_t to) {
    const int64_t want = to / prefix_block_ - from / prefix_block_;
    while (engine_.free_snapshots() < want && drop_snapshots(k)) {
    }
}

EngineLoop::Kept* EngineLoop::take_kept(const std::vector<int32_t>& prompt, int64_t* hit) {
    *hit = 0;
    // Only while no request waits for a slot: one on a session queued behind such a request
    // would hold its slot idle until that one gets another.
    if (engine_.queued() > 0) return nullptr;
    Kept* whole = nullptr;  // continued in place
    Kept* from = nullptr;   // copied from a snapshot
    for (Kept& k : kept_) {
        const std::vector<int32_t>& t = k.session->tokens();
        const size_t shared = static_cast<size_t>(
            std::mismatch(t.begin(), t.end(), prompt.begin(), prompt.end()).first - t.begin());
        // (a prompt always keeps a token to feed)
        if (!k.busy && shared == t.size() && shared > 0 && shared < prompt.size() &&
            static_cast<int64_t>(shared) > *hit) {
            whole = &k;
            from = nullptr;
            *hit = static_cast<int64_t>(shared);
        }
        for (const int64_t p : k.session->snapshot_positions()) {
            if (p > *hit && p <= static_cast<int64_t>(shared) &&
                p < static_cast<int64_t>(prompt.size())) {
                from = &k;
                whole = nullptr;
                *hit = p;
            }
        }
    }
    Kept* best = whole;
    if (best == nullptr) {
        std::unique_ptr<Session> fresh;
        if (kept_.size() < prefix_cache_ || evict_kept(from)) {
            auto s = engine_.new_session();
            if (!s && evict_kept(from)) s = engine_.new_session();
            if (s) fresh = std::move(*s);
        }
        // (a copy of a kept sequence's snapshot, or a rewind to it, cannot fail: same engine,
        // a session no request runs on)
        if (fresh == nullptr && from != nullptr && !from->busy) {
            // No other sequence to be had: the snapshot's own sequence goes back to it.
            const Status back = from->session->copy_prefix_from(*from->session, *hit);
            DSV4_ASSERT(back.is_ok(), back.message());
            best = from;
        } else if (fresh == nullptr) {  // every slot held by requests, or N kept and busy
            *hit = 0;
            return nullptr;
        } else {
            best = &kept_.emplace_back();
            best->session = std::move(fresh);
            if (from != nullptr) {
                const Status copied = best->session->copy_prefix_from(*from->session, *hit);
                DSV4_ASSERT(copied.is_ok(), copied.message());
                from->used = ++kept_clock_;
            }
        }
    }
    best->busy = true;
    best->used = ++kept_clock_;
    if (prefix_block_ > 0) make_snapshot_room(best, *hit, static_cast<int64_t>(prompt.size()));
    return best;
}

void EngineLoop::release_kept(Session* s, bool keep) {
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->session.get() != s) continue;
        it->busy = false;
        it->used = ++kept_clock_;
        if (!keep || s->position() == 0) kept_.erase(it);
        return;
    }
    DSV4_ASSERT(false, "a request ran on a sequence the prefix cache does not hold");
}

void EngineLoop::admit(std::deque<Job>& jobs, bool stopping) {
    for (Job& job : jobs) {
        if (stopping) {
            job.channel->push(
                rejected(server_error(503, "the server is shutting down", "shutting_down")));
            continue;
        }
        // The engine's own queue limit gives a plain error; checking first makes it a 429.
        if (engine_.queued() >= max_queue_) {
            job.channel->push(rejected(
                server_error(429, "the request queue is full; retry later", "queue_full")));
            continue;
        }
        const int64_t prompt_tokens = static_cast<int64_t>(job.request.prompt.size());
        const Request copy = others_.empty() && !followers_ ? Request{} : job.request;
        // The prefix cache: requests of one sequence each (not the shared-prompt choices, whose
        // copies the engine makes).
        int64_t hit = 0;
        Kept* kept =
            prefix_cache_ > 0 && job.request.session == nullptr && job.request.share_prompt == 0
                ? take_kept(job.request.prompt, &hit)
                : nullptr;
        Expected<RequestId> id = error("no request");
        if (kept != nullptr) {
            Request rest = job.request;
            rest.prompt.erase(rest.prompt.begin(), rest.prompt.begin() + hit);
            rest.session = kept->session.get();
            rest.snapshot_every = prefix_block_;
            id = engine_.submit(std::move(rest));
            if (!id) {  // (the request as a whole gives the error the client should see)
                release_kept(kept->session.get(), true);
                kept = nullptr;
                hit = 0;
            }
        }
        if (kept == nullptr) id = engine_.submit(std::move(job.request));
        if (!id) {
            // Requests are validated before they get here; what remains is the engine's view
            // of the input (vocabulary, context), so it is the client's error.
            job.channel->push(rejected(invalid_request(id.status().message())));
            continue;
        }
        // The other ranks hold the same model and requests: they take it under the same id.
        for (size_t r = 0; r < others_.size(); ++r) {
            auto other = others_[r]->submit(copy);
            DSV4_ASSERT(other && *other == *id, "rank ", r + 1, " did not take request ", *id,
                        " as rank 0 did");
        }
        tell_followers(RankCommand::submit(*id, copy));
        metrics_.add_prompt_tokens(prompt_tokens);
        metrics_.add_prefix_hit_tokens(hit);
        ChannelEvent ev;
        ev.kind = ChannelEvent::Kind::kAccepted;
        if (prefix_cache_ > 0) ev.cached_tokens = hit;
        job.channel->push(std::move(ev));
        Active& a = active_[*id];
        a.channel = std::move(job.channel);
        a.arrived = job.arrived;
        a.kept = kept != nullptr ? kept->session.get() : nullptr;
    }
}

void EngineLoop::deliver(const TokenEvent& ev) {
    auto it = active_.find(ev.id);
    DSV4_ASSERT(it != active_.end(), "an event for unknown request ", ev.id);
    Active& a = it->second;
    ChannelEvent out;
    out.token = ev.token;
    out.logprobs = ev.logprobs;
    if (ev.token >= 0) {
        const Clock::time_point now = Clock::now();
        metrics_.add_generated_tokens(1);
        if (a.has_token) {
            metrics_.observe_inter_token(seconds(now - a.last_token));
        } else {
            metrics_.observe_ttft(seconds(now - a.arrived));
        }
        a.has_token = true;
        a.last_token = now;
    }
    if (ev.finish == FinishReason::kNone) {
        a.channel->push(std::move(out));
        return;
    }
    metrics_.add_drafts(ev.drafted_at, ev.accepted_at);
    out.kind = ChannelEvent::Kind::kFinished;
    out.finish = a.failure.empty() ? ev.finish : FinishReason::kError;
    out.error = a.failure.empty() ? ev.error : a.failure;
    a.channel->push(std::move(out));
    // (after a failed step the sequence's cache may not hold what its tokens say)
    if (a.kept != nullptr)
        release_kept(a.kept, a.failure.empty() && ev.finish != FinishReason::kError);
    active_.erase(it);
}

void EngineLoop::cancel(RequestId id) {
    engine_.cancel(id);
    for (Engine* e : others_) e->cancel(id);
    tell_followers(RankCommand::cancel(id));
}

Status EngineLoop::step(std::vector<TokenEvent>* events) {
    if (followers_) {
        tell_followers(RankCommand::step());
        Status s = engine_.step(events);
        if (!s.is_ok()) group_->leave(0);
        return s;
    }
    if (others_.empty()) return engine_.step(events);
    // A rank whose step fails leaves the group at once: a rank waiting in a sum for it then
    // fails too instead of waiting (and the group stays failed: every later step fails).
    std::vector<Status> st(others_.size(), Status::ok());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < others_.size(); ++r)
        threads.emplace_back([&, r] {
            std::vector<TokenEvent> same;  // (rank 0's are delivered)
            st[r] = others_[r]->step(&same);
            if (!st[r].is_ok()) group_->leave(static_cast<int>(r) + 1);
        });
    Status s = engine_.step(events);
    if (!s.is_ok()) group_->leave(0);
    for (std::thread& t : threads) t.join();
    for (size_t r = 0; r < st.size() && s.is_ok(); ++r) s = st[r];
    return s;
}

void EngineLoop::publish_gauges() {
    EngineGauges g;
    g.queued = engine_.queued();
    g.running = engine_.running();
    g.slots_total = engine_.info().max_seqs;
    g.slots_used = g.slots_total - engine_.free_slots() - idle_kept();
    g.prefix_cached = static_cast<int>(kept_.size());
    // (only the kept sequences hold snapshots)
    g.prefix_snapshots = engine_.info().snapshots - engine_.free_snapshots();
    g.prompt_tokens_fed = engine_.prompt_tokens_fed();
    metrics_.set_engine(g);
}

void EngineLoop::run() {
    std::vector<TokenEvent> events;
    while (true) {
        std::deque<Job> jobs;
        bool stopping = false;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock,
                     [&] { return stopping_ || woken_ || !inbox_.empty() || !engine_.idle(); });
            jobs.swap(inbox_);
            stopping = stopping_;
            if (stopping) stopped_ = true;  // post() refuses from now on
            woken_ = false;
        }
        // Cancellations first: a cancelled request gives up its place in the queue before the
        // new jobs are judged against it (a request of several choices refused as a whole
        // cancels the ones already accepted, and the client may retry at once).
        for (auto& [id, a] : active_)
            if (stopping || a.channel->cancelled()) cancel(id);
        admit(jobs, stopping);
        // Requests waiting for a slot take the idle kept sequences' (least recently used first).
        while (engine_.queued() > static_cast<size_t>(engine_.free_slots()) && evict_kept()) {
        }
        if (engine_.idle()) {
            if (stopping) kept_.clear();  // (the sessions must go before the engine)
            publish_gauges();
            if (stopping) return;
            continue;
        }
        events.clear();
        const Status st = step(&events);
        for (const TokenEvent& ev : events) deliver(ev);
        if (!st.is_ok()) {
            // The step itself failed (not one request): end everything in flight with it.
            for (auto& [id, a] : active_) {
                a.failure = st.message();
                cancel(id);
            }
        }
        publish_gauges();
    }
}

Status follow_rank0(Engine& engine, RankGroup& group, int rank) {
    std::vector<TokenEvent> events;  // (rank 0's are delivered)
    while (true) {
        DSV4_ASSIGN_OR_RETURN(const std::string text, group.broadcast(rank, {}));
        DSV4_ASSIGN_OR_RETURN(const RankCommand c, decode_rank_command(text));
        switch (c.op) {
            case RankCommand::Op::kStop:
                return Status::ok();
            case RankCommand::Op::kStep:
                events.clear();
                DSV4_RETURN_IF_ERROR(engine.step(&events));
                break;
            case RankCommand::Op::kCancel:
                engine.cancel(c.id);
                break;
            case RankCommand::Op::kSubmit: {
                auto id = engine.submit(c.request);
                if (!id || *id != c.id)
                    return error("rank ", rank, " did not take request ", c.id, " as rank 0 did",
                                 id ? "" : ": ", id ? "" : id.status().message());
                break;
            }
        }
    }
}

}  // namespace dsv4::server
