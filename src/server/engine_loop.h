// The engine thread: the only thread that touches the Engine (it is not thread-safe). HTTP
// threads post jobs into its inbox; between steps it submits them (refusing with 429 when
// the queue is full), cancels the requests whose channel was cancelled, runs one batched step,
// and hands each token and end to the request's channel. With ranks (ServerOptions::ranks)
// every rank's engine gets the same submissions, cancellations and steps in the same order
// (their collectives meet), the other ranks' steps on threads beside rank 0's; rank 0's events
// are delivered. With ranks as processes (a group over processes and no `others`: this is rank
// 0) the same submissions, cancellations and steps go to the other processes as commands
// (server/rank_commands.h) before rank 0 does them, and a stop when the loop stops.
//
// The prefix cache (without ranks): a request's sequence is kept in its cache slot after it
// ends, so that a later request whose prompt begins with all of that sequence (the next turn of
// a conversation: the earlier prompt, the answer but its last token, then the new messages)
// feeds only the rest. With prefix snapshots (prefix_block > 0) the requests on kept sequences
// also snapshot them every prefix_block prompt tokens, and a request whose prompt shares only
// the start of a kept sequence (a system prompt, an earlier turn before its reasoning) starts
// from a copy of the last snapshot within the shared part, in a sequence of its own. The kept
// sequences hold slots only while nothing waits for one: a request waiting for a slot takes the
// least recently used idle one's; a request that would take snapshots takes the least recently
// used idle sequences' snapshot buffers when none are free.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dsv4/engine.h"
#include "dsv4/parallel.h"
#include "server/channel.h"
#include "server/metrics.h"
#include "server/rank_commands.h"

namespace dsv4::server {

struct Job {
    Request request;
    std::shared_ptr<Channel> channel;
    std::chrono::steady_clock::time_point arrived;
};

class EngineLoop {
  public:
    // `max_queue`: requests that may wait for a slot before new ones get 429. `others`: the
    // other ranks' engines (rank 1, 2, ...) of `group`, rank 0's being `engine`; none without
    // ranks, or with ranks as processes (then `group` is theirs and `engine` is rank 0's).
    // `prefix_cache`: sequences kept for continuations at most (0: none; ignored with ranks);
    // `prefix_block`: their requests' Request::snapshot_every (0: no snapshots; the engine must
    // have snapshot buffers).
    EngineLoop(Engine& engine, Metrics& metrics, size_t max_queue, std::vector<Engine*> others = {},
               std::shared_ptr<RankGroup> group = nullptr, int prefix_cache = 0,
               int64_t prefix_block = 0);
    ~EngineLoop();
    void start();
    // Thread-safe. Each job's channel receives kAccepted or kRejected, then tokens and the end.
    // The jobs reach the engine together (the choices of one request: Request::share_prompt
    // needs them submitted before the first one's prompt runs).
    void post(std::vector<Job> jobs);
    // Thread-safe: wakes the loop so a cancelled channel is seen promptly.
    void wake();
    // Refuses new jobs (503), cancels every request in flight, and returns once each has been
    // told its end and the thread is gone.
    void stop();

  private:
    struct Active {
        std::shared_ptr<Channel> channel;
        std::chrono::steady_clock::time_point arrived;
        std::chrono::steady_clock::time_point last_token;
        bool has_token = false;
        std::string failure;      // a failed step's message: the cancellation it caused is an error
        Session* kept = nullptr;  // the prefix cache's sequence it runs on
    };
    // A sequence of the prefix cache: its session, when it was last used, and whether a request
    // runs on it.
    struct Kept {
        std::unique_ptr<Session> session;
        uint64_t used = 0;
        bool busy = false;
    };
    // While no request waits for a slot: the kept sequence a request with `prompt` runs on, and
    // in *hit the prompt tokens it already holds. The most tokens win: an idle sequence that is
    // a proper prefix of the prompt (continued in place), or a kept sequence's snapshot within
    // the part it shares with the prompt (copied into a fresh sequence; when none can be had,
    // the idle sequence itself goes back to it); else a fresh one (a free slot, or the least
    // recently used idle sequence's). nullptr: none (the request takes a slot of its own when
    // one is free).
    Kept* take_kept(const std::vector<int32_t>& prompt, int64_t* hit);
    void release_kept(Session* s, bool keep);  // its request ended (keep: the sequence is sound)
    // The least recently used idle one but `spare`; false: none.
    bool evict_kept(const Kept* spare = nullptr);
    // Drops the snapshots of the least recently used idle sequence that has some, but `spare`'s;
    // false: none.
    bool drop_snapshots(const Kept* spare);
    // Snapshot buffers a request on `k` fills feeding prompt tokens [from, to): freed from idle
    // sequences' as far as they go.
    void make_snapshot_room(const Kept* k, int64_t from, int64_t to);
    int idle_kept() const;
    void run();
    void admit(std::deque<Job>& jobs, bool stopping);
    void deliver(const TokenEvent& ev);
    void publish_gauges();
    void cancel(RequestId id);                     // on every rank
    Status step(std::vector<TokenEvent>* events);  // every rank's; rank 0's events
    void tell_followers(const RankCommand& c);     // ranks as processes: the command to them

    Engine& engine_;
    std::vector<Engine*> others_;
    std::shared_ptr<RankGroup> group_;
    Metrics& metrics_;
    size_t max_queue_;
    const bool followers_;            // ranks as processes
    bool stopped_followers_ = false;  // told to stop
    std::thread thread_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Job> inbox_;
    bool stopping_ = false;
    bool stopped_ = false;
    bool woken_ = false;
    std::map<RequestId, Active> active_;  // engine thread only
    const size_t prefix_cache_;
    const int64_t prefix_block_;
    std::list<Kept> kept_;  // engine thread only
    uint64_t kept_clock_ = 0;
};

// The engine loop of rank `rank` >= 1 when a server's ranks are processes: rank 0's commands
// (RankGroup::broadcast) done on `engine` in their order until a stop (ok), a failed step or a
// failed group (its error).
Status follow_rank0(Engine& engine, RankGroup& group, int rank);

}  // namespace dsv4::server
