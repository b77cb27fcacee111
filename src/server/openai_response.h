// The OpenAI response bodies: chat.completion, chat.completion.chunk, text_completion (whole
// and streamed), usage, and the SSE framing of each.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "dsv4/chat.h"
#include "dsv4/sampling.h"
#include "dsv4/tokenizer.h"
#include "server/dsml_stream.h"
#include "server/openai_request.h"

namespace dsv4::server {

struct ResponseMeta {
    Endpoint endpoint = Endpoint::kChat;
    std::string id;  // chatcmpl-N / cmpl-N
    int64_t created = 0;
    std::string model;
    int choice = 0;   // this choice's index
    int choices = 1;  // the request's `n`
    // With the prefix cache on: the prompt tokens found in it (usage.prompt_tokens_details).
    std::optional<int64_t> cached_tokens;
    // Tool call ids: call_<N>_<i>, and call_<N>_<choice>_<i> when a request has several choices.
    std::string tool_call_prefix() const {
        std::string p = "call_" + id.substr(id.find('-') + 1) + "_";
        return choices > 1 ? p + std::to_string(choice) + "_" : p;
    }
};

// cached_tokens: usage.prompt_tokens_details.cached_tokens (left out when not given).
chat::Json usage_json(int64_t prompt_tokens, int64_t completion_tokens,
                      std::optional<int64_t> cached_tokens);

// An output token with its log-probabilities, and where it starts in the output text (in
// characters: Generation::logged_chars_).
struct LoggedToken {
    int32_t token = -1;
    TokenLogprobs logprobs;
    int64_t text_offset = 0;
};
// A choice's (or a chunk's) `logprobs` for `tokens`. Chat: {"content": [{token, logprob, bytes,
// top_logprobs: [{token, logprob, bytes}]}]}. Completions (OpenAI's legacy form): {tokens,
// token_logprobs, top_logprobs: [{token: logprob} with the token itself among them, as vLLM
// gives], text_offset (characters)}. A token's text is its decoded string (U+FFFD where it holds
// part of a UTF-8 character; `bytes` has the exact bytes).
chat::Json logprobs_json(Endpoint endpoint, const Tokenizer& tokenizer,
                         std::span<const LoggedToken> tokens);

// A whole response. Chat: `message` from OutputStream::message; completions: `text`.
// `logprobs`: logprobs_json's, or null.
chat::Json full_response(const ResponseMeta& meta, const chat::Json& message,
                         const std::string& text, const char* finish_reason,
                         const chat::Json& usage, const chat::Json& logprobs = chat::Json());

// One streamed chunk: `delta` (role "assistant" on the first), the finish reason on the last
// (null otherwise), the log-probabilities of the tokens it brings (null: none), and `usage`
// when given (continuous_usage_stats: the counts so far).
chat::Json stream_chunk(const ResponseMeta& meta, const StreamDelta& delta, bool first,
                        const char* finish_reason, const chat::Json& logprobs = chat::Json(),
                        const chat::Json& usage = chat::Json());
// The last chunk with stream_options.include_usage: no choices, the usage.
chat::Json usage_chunk(const ResponseMeta& meta, const chat::Json& usage);

// "data: <json>\n\n"
std::string sse_event(const chat::Json& value);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
// Compact JSON; invalid UTF-8 (never expected) is replaced instead of throwing.
std::string dump(const chat::Json& value);

}  // namespace dsv4::server
