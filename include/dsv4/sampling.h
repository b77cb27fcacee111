// Sampling parameters of one request (one type for the CLI, the engine, the server and the
// sampling op, which keeps an array of them in backend memory: plain data, no pointers).
#pragma once

#include <array>
#include <cstdint>

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

}  // namespace dsv4
