#include "server/metrics.h"

#include <cstdio>

namespace dsv4::server {

namespace {

std::string number(double x) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", x);
    return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double x) {
    size_t b = 0;
    while (b < bounds_.size() && x > bounds_[b]) ++b;
    ++counts_[b];
    sum_ += x;
    ++count_;
}

void Histogram::render(const std::string& name, std::string& out) const {
    uint64_t cumulative = 0;
    for (size_t b = 0; b < bounds_.size(); ++b) {
        cumulative += counts_[b];
        out += name + "_bucket{le=\"" + number(bounds_[b]) + "\"} " + std::to_string(cumulative) +
               "\n";
    }
    out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
    out += name + "_sum " + number(sum_) + "\n";
    out += name + "_count " + std::to_string(count_) + "\n";
}

// Latency buckets from 1 ms (a GPU decode step) to a minute (a long CPU prefill).
Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
    std::lock_guard<std::mutex> lock(mu_);
    ++requests_[{endpoint, status}];
}

void Metrics::count_finish(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    ++finishes_[reason];
}

void Metrics::add_prompt_tokens(int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    prompt_tokens_ += static_cast<uint64_t>(n);
}

void Metrics::add_prefix_hit_tokens(int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    prefix_hit_tokens_ += static_cast<uint64_t>(n);
}

void Metrics::add_generated_tokens(int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    generated_tokens_ += static_cast<uint64_t>(n);
}

void Metrics::add_drafts(const std::array<int, kMaxDraftTokens>& drafted,
                         const std::array<int, kMaxDraftTokens>& accepted) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int j = 0; j < kMaxDraftTokens; ++j) {
        drafted_[j] += static_cast<uint64_t>(drafted[j]);
        accepted_[j] += static_cast<uint64_t>(accepted[j]);
    }
}

void Metrics::observe_ttft(double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    ttft_.observe(seconds);
}

void Metrics::observe_inter_token(double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    itl_.observe(seconds);
}

void Metrics::set_engine(const EngineGauges& g) {
    std::lock_guard<std::mutex> lock(mu_);
    engine_ = g;
}

std::string Metrics::render() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    header(out, "dsv4_requests_total", "counter",
           "Generation requests by endpoint and HTTP status.");
    for (const auto& [key, n] : requests_)
        out += "dsv4_requests_total{endpoint=\"" + key.first + "\",status=\"" +
               std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
    header(out, "dsv4_requests_finished_total", "counter",
           "Accepted requests by how they ended (stop, length, tool_calls, cancelled, error).");
    for (const auto& [reason, n] : finishes_)
        out +=
            "dsv4_requests_finished_total{reason=\"" + reason + "\"} " + std::to_string(n) + "\n";
    header(out, "dsv4_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.");
    out += "dsv4_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
    header(out, "dsv4_prompt_tokens_computed_total", "counter",
           "Prompt tokens fed through the model (the choices of a request share their prompt).");
    out += "dsv4_prompt_tokens_computed_total " + std::to_string(engine_.prompt_tokens_fed) + "\n";
    header(out, "dsv4_prefix_cache_hit_tokens_total", "counter",
           "Prompt tokens found in a sequence the prefix cache kept (not fed again).");
    out += "dsv4_prefix_cache_hit_tokens_total " + std::to_string(prefix_hit_tokens_) + "\n";
    header(out, "dsv4_generated_tokens_total", "counter", "Tokens sampled by the engine.");
    out += "dsv4_generated_tokens_total " + std::to_string(generated_tokens_) + "\n";
    header(out, "dsv4_speculative_drafts_total", "counter",
           "Speculative drafts fed, by place in the step (0: the first after the fed token).");
    for (int j = 0; j < kMaxDraftTokens; ++j)
        out += "dsv4_speculative_drafts_total{position=\"" + std::to_string(j) + "\"} " +
               std::to_string(drafted_[j]) + "\n";
    header(out, "dsv4_speculative_accepted_total", "counter",
           "Speculative drafts kept, by place in the step.");
    for (int j = 0; j < kMaxDraftTokens; ++j)
        out += "dsv4_speculative_accepted_total{position=\"" + std::to_string(j) + "\"} " +
               std::to_string(accepted_[j]) + "\n";
    header(out, "dsv4_queue_depth", "gauge", "Requests waiting for a cache slot.");
    out += "dsv4_queue_depth " + std::to_string(engine_.queued) + "\n";
    header(out, "dsv4_running_requests", "gauge", "Requests in the running batch.");
    out += "dsv4_running_requests " + std::to_string(engine_.running) + "\n";
    header(out, "dsv4_cache_slots_used", "gauge",
           "KV-cache sequence slots in use by requests (the prefix cache's idle sequences not "
           "counted).");
    out += "dsv4_cache_slots_used " + std::to_string(engine_.slots_used) + "\n";
    header(out, "dsv4_prefix_cache_sequences", "gauge",
           "Sequences the prefix cache keeps for continuations (each holds a slot).");
    out += "dsv4_prefix_cache_sequences " + std::to_string(engine_.prefix_cached) + "\n";
    header(out, "dsv4_prefix_cache_snapshots", "gauge",
           "Snapshots of the kept sequences at block boundaries (a prompt sharing only the start "
           "of one continues from the last snapshot within the shared part).");
    out += "dsv4_prefix_cache_snapshots " + std::to_string(engine_.prefix_snapshots) + "\n";
    header(out, "dsv4_cache_slots_total", "gauge", "KV-cache sequence slots.");
    out += "dsv4_cache_slots_total " + std::to_string(engine_.slots_total) + "\n";
    header(out, "dsv4_time_to_first_token_seconds", "histogram",
           "From a request's arrival to its first generated token.");
    ttft_.render("dsv4_time_to_first_token_seconds", out);
    header(out, "dsv4_inter_token_latency_seconds", "histogram",
           "Between consecutive tokens of one request.");
    itl_.render("dsv4_inter_token_latency_seconds", out);
    return out;
}

}  // namespace dsv4::server
