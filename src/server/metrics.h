// Prometheus counters, gauges and histograms of the server (GET /metrics, text format 0.0.4).
// HTTP threads count requests by status; the engine thread counts tokens, latencies and the
// batch. Every method is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "dsv4/engine.h"

namespace dsv4::server {

class Histogram {
  public:
    explicit Histogram(std::vector<double> bounds);
    void observe(double x);
    // "name_bucket{le=...} n" lines, _sum and _count.
    void render(const std::string& name, std::string& out) const;

  private:
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;  // per bucket, not cumulative
    double sum_ = 0;
    uint64_t count_ = 0;
};

struct EngineGauges {
    size_t queued = 0;
    size_t running = 0;
    int slots_used = 0;  // by requests (not the prefix cache's idle sequences)
    int slots_total = 0;
    int prefix_cached = 0;          // sequences the prefix cache keeps (idle or continued)
    int prefix_snapshots = 0;       // their snapshots (Engine snapshot buffers held)
    int64_t prompt_tokens_fed = 0;  // Engine::prompt_tokens_fed (a shared prefix once)
};

class Metrics {
  public:
    Metrics();
    // A generation request answered with `status` (200 when accepted; a stream counts when it
    // starts).
    void count_request(const std::string& endpoint, int status);
    // A request the engine ended: stop, length, tool_calls, cancelled or error.
    void count_finish(const std::string& reason);
    void add_prompt_tokens(int64_t n);
    void add_generated_tokens(int64_t n);
    // Prompt tokens a request found already in a sequence of the prefix cache (not fed again).
    void add_prefix_hit_tokens(int64_t n);
    // A speculative request's drafts at its finish, by their place in the step
    // (TokenEvent::drafted_at / accepted_at).
    void add_drafts(const std::array<int, kMaxDraftTokens>& drafted,
                    const std::array<int, kMaxDraftTokens>& accepted);
    void observe_ttft(double seconds);
    void observe_inter_token(double seconds);
    void set_engine(const EngineGauges& g);
    std::string render() const;

  private:
    mutable std::mutex mu_;
    std::map<std::pair<std::string, int>, uint64_t> requests_;
    std::map<std::string, uint64_t> finishes_;
    uint64_t prompt_tokens_ = 0;
    uint64_t prefix_hit_tokens_ = 0;
    uint64_t generated_tokens_ = 0;
    std::array<uint64_t, kMaxDraftTokens> drafted_{}, accepted_{};
    Histogram ttft_;
    Histogram itl_;
    EngineGauges engine_;
};

}  // namespace dsv4::server
