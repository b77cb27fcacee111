// Sampling parameters of one request (one type for the CLI, the engine, the server and the
// sampling op, which keeps an array of them in backend memory: plain data, no pointers).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace dsv4 {

struct SamplingParams {
    float temperature = 0.0f;  // 0 = greedy
    int top_k = 0;             // 0 = all
    float top_p = 1.0f;        // 1 = all
    uint64_t seed = 0;         // seeds the request's generator when it is admitted
};

// Log-probabilities reported with generated tokens (Request::logprobs): the log-softmax of the
// model's logits at temperature 1, before top-k and top-p (what the model thinks of each token,
// whatever the sampling settings; vLLM's default "raw" log-probabilities).
inline constexpr int kMaxTopLogprobs = 20;  // most likely alternatives a token at most (OpenAI's)
struct TokenLogprob {
    int32_t token = -1;
    float logprob = 0.0f;
};
// A generated token's: its own log-probability and the top_n most likely tokens, most likely
// first (ties to the lower id).
struct TokenLogprobs {
    float logprob = 0.0f;
    int top_n = 0;
    std::array<TokenLogprob, kMaxTopLogprobs> top{};
};

// Rules a request puts on its logits before they are sampled (Request::rules), in this order:
// the repetition penalty on every token of the request's prompt and output so far (a positive
// logit divided by it, a negative one multiplied: vLLM's), the frequency and presence penalties
// on its output tokens (logit -= frequency * count + presence * (count > 0): OpenAI's), each
// logit_bias entry added, and while fewer than min_tokens tokens have been generated, the
// min_tokens_stops ids (and EOS, for a request that stops at it) set to the lowest finite float
// (so they are never chosen and the row stays finite for the sampler's check). On a session
// the tokens it held before the request are part of the prompt (the repetition penalty sees
// them); the frequency and presence penalties count the request's own outputs. Log-probabilities
// (Request::logprobs) are those of the logits after these rules (vLLM's "processed" ones).
inline constexpr int kMaxLogitBias = 1024;     // logit_bias entries a request
inline constexpr int kMaxMinTokensStops = 64;  // stop ids banned until min_tokens
struct TokenBias {
    int32_t token = -1;
    float bias = 0.0f;  // [-100, 100]
};
struct LogitsRules {
    float repetition_penalty = 1.0f;        // (0, 100]; 1 = none
    float frequency_penalty = 0.0f;         // [-2, 2]
    float presence_penalty = 0.0f;          // [-2, 2]
    std::vector<TokenBias> logit_bias;      // distinct tokens, at most kMaxLogitBias
    int min_tokens = 0;                     // 0 .. the request's max_tokens
    std::vector<int32_t> min_tokens_stops;  // at most kMaxMinTokensStops
    bool penalties() const {
        return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
    }
    bool any() const { return penalties() || !logit_bias.empty() || min_tokens > 0; }
};

}  // namespace dsv4
