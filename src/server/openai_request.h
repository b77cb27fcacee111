// The OpenAI request bodies (/v1/chat/completions, /v1/completions) read and validated into
// one GenerationSpec: every field checked for type and range, anything this server cannot honour
// (best_of, suffix, forced tool choice...) refused with a 400 that names the field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsv4/chat.h"
#include "dsv4/sampling.h"
#include "server/api_error.h"

namespace dsv4::server {

enum class Endpoint { kChat, kCompletions };

struct GenerationSpec {
    Endpoint endpoint = Endpoint::kChat;
    std::string model;
    // Chat: messages as the V4 encoder takes them (content as strings, tools on the first
    // system message), and the encoder's options (thinking mode, reasoning effort).
    chat::Json messages = chat::Json::array();
    chat::EncodeOptions encode;
    // Completions: the prompt as text, or as token ids when prompt_is_ids.
    std::string prompt_text;
    std::vector<int64_t> prompt_ids;
    bool prompt_is_ids = false;
    int max_tokens = 0;  // 0: as many as the context leaves
    SamplingParams sampling;
    std::vector<std::string> stop;
    bool include_stop_str_in_output = false;  // vLLM's: the matched stop string ends the text
    bool stream = false;
    bool include_usage = false;
    bool continuous_usage = false;  // vLLM's stream_options.continuous_usage_stats
    // Choices (`n`): each its own engine request, choice i sampled with seed + i.
    int n = 1;
    // Log-probabilities with each token (Request::logprobs): -1 none, else the number of most
    // likely alternatives (0 to kMaxTopLogprobs).
    int logprobs = -1;
    // vLLM's extensions: generate past EOS (to max_tokens; EOS tokens add no text), and token
    // ids that end the output like a stop string (the token's text left out).
    bool ignore_eos = false;
    std::vector<int64_t> stop_token_ids;
    // Completions: the prompt's text in front of the output (not with logprobs).
    bool echo = false;
    // presence_penalty, frequency_penalty, vLLM's repetition_penalty and min_tokens
    // (LogitsRules; its logit_bias and min_tokens_stops are filled from the two below when the
    // request is made), logit_bias as given (token id, bias; checked against the vocabulary
    // with the prompt).
    LogitsRules rules;
    std::vector<std::pair<int64_t, float>> logit_bias;
};

// The most stop_token_ids a request may give.
inline constexpr int kMaxStopTokenIds = 64;

// The most choices a request may ask for (`n`): each takes a slot of the batch or the queue.
inline constexpr int kMaxChoices = 16;

// A JSON list of token ids into `out` (ids above INT64_MAX become INT64_MAX, outside every
// vocabulary: the vocabulary check names them). False when `list` is not a list of integers.
bool read_token_ids(const chat::Json& list, std::vector<int64_t>& out);

// Parses and validates a request body. `encoding` is the chat encoding the server follows.
ApiResult<GenerationSpec> parse_generation_request(Endpoint endpoint, std::string_view body,
                                                   chat::EncodingVersion encoding);

}  // namespace dsv4::server
