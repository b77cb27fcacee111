// dsv4 public API: an OpenAI-compatible HTTP server over one Engine, or one a rank (POST
// /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, GET /metrics). One
// engine thread runs the batched steps; HTTP threads parse, queue and stream. See docs/server.md.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "dsv4/engine.h"
#include "dsv4/status.h"

namespace dsv4 {

struct ServerOptions {
    EngineOptions engine;              // engine.max_seqs is the running batch (--max-batch)
    std::string tokenizer;             // default: the model folder's tokenizer.json
    std::string model_name;            // the id clients name; default: the model folder's name
    std::string host = "127.0.0.1";    // loopback unless asked otherwise
    int port = 8000;                   // 0: any free port (see Server::port)
    std::string api_key;               // non-empty: /v1/* needs "Authorization: Bearer <key>"
    size_t max_body_bytes = 4u << 20;  // larger bodies get 413
    int http_threads = 0;              // 0: enough for max_seqs + max_queue streaming clients
    std::string encoding = "v4";       // chat encoding: v4 or v4-flash-0731
    // Speculative decoding for every request (Request::speculative / draft_tokens): the same
    // outputs (greedy: the same tokens), fewer steps when drafts are kept; /metrics counts the
    // drafts fed and accepted by their place in the step.
    Speculation speculative = Speculation::kNone;
    int draft_tokens = 0;
    // > 1: the routed experts split over this many in-process ranks (CPU backend;
    // docs/parallel.md), every request and step run on all of them, rank 0's tokens served.
    // Ranks as processes instead: engine.rank_group from RankGroup::connect and engine.rank;
    // rank 0 serves (Server::create), every other rank runs Server::follow.
    int ranks = 1;
    // The prefix cache: up to this many finished requests' sequences stay in their cache slots
    // (while no request waits for a slot), and a request whose prompt begins with one of them
    // (the next turn of a conversation) feeds only the rest. 0: off. Not with ranks, and not
    // for several choices (docs/server.md).
    int prefix_cache = 0;
    // With the prefix cache: snapshots of the kept sequences every `prefix_block` prompt tokens
    // (0: the model's ModelInfo::snapshot_block; else a multiple of it), in buffers for this
    // many (-1: 8 for each kept sequence; 0: none, only whole sequences are continued). A
    // request sharing only the start of a kept sequence continues from the last snapshot in it.
    int prefix_snapshots = -1;
    int64_t prefix_block = 0;
};

class Server {
  public:
    // Loads the model and tokenizer and binds the socket (nothing is served until run()).
    static Expected<std::unique_ptr<Server>> create(const ServerOptions& options);
    ~Server();
    int port() const;  // the bound port
    const std::string& model_name() const;
    // Serves until shutdown(); returns once every request has ended and the threads are gone.
    void run();
    // Thread-safe, returns at once: new requests get 503, requests in flight are cancelled
    // (streams end with an error event), then the listener closes and run() returns.
    void shutdown();
    // Rank options.engine.rank >= 1 of a server whose ranks are processes: loads its engine,
    // then takes rank 0's requests, cancellations and steps until rank 0 stops (ok) or the
    // group fails (rank 0 went away: the error). Serves nothing itself.
    static Status follow(const ServerOptions& options);

    struct Impl;

  private:
    explicit Server(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
