// One accepted request seen from its HTTP thread: a Generation a choice reads its channel, turns
// tokens into the choice (whole, or SSE chunks as they come), ends its engine request early when
// a stop string matched or the client went away, and counts how it ended; Choices makes the
// response of a request's choices (one or more).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/channel.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/openai_response.h"
#include "server/output_stream.h"

namespace dsv4::server {

class Generation {
  public:
    // prompt: the engine's prompt ids (echo's text when the request gave ids).
    Generation(const GenerationSpec& spec, ResponseMeta meta, std::span<const int32_t> prompt,
               int32_t eos_token, const Tokenizer& tokenizer, std::shared_ptr<Channel> channel,
               EngineLoop& loop, Metrics& metrics);
    // Not streaming: waits for the end. The response with this choice alone, or an error (the
    // engine failed, or the server is shutting down).
    ApiResult<chat::Json> collect();
    // Streaming: appends this choice's chunks for the events that came (waiting up to `wait`
    // for some): the role chunk first, the deltas, and the finish chunk when it ends well (a
    // failure is failure()'s). True when it appended something or ended.
    bool stream_part(std::string& out, std::chrono::milliseconds wait);
    // The client went away (or the response was dropped): cancels the request if still going.
    void abandon();
    bool done() const { return done_; }
    // Why it ended badly (the engine failed, or the server is shutting down), once done.
    std::optional<ApiError> failure() const;
    int64_t completion_tokens() const { return completion_tokens_; }
    const ResponseMeta& meta() const { return meta_; }

  private:
    // Applies channel events; true once the output is complete.
    bool apply(const std::vector<ChannelEvent>& events, StreamDelta& delta);
    // The log-probabilities of the output tokens not yet sent (null when none).
    chat::Json unsent_logprobs();
    // A chunk's usage: the counts so far with continuous_usage_stats, else null.
    chat::Json chunk_usage() const;
    void end(const char* reason);
    void cancel_engine_request();

    ResponseMeta meta_;
    int64_t prompt_tokens_;
    int64_t completion_tokens_ = 0;
    int32_t eos_;
    std::vector<int32_t> stop_ids_;  // GenerationSpec::stop_token_ids
    std::string echo_;               // the prompt's text in front of a completion (echo)
    const Tokenizer& tokenizer_;
    OutputStream output_;
    // With logprobs asked for: every output token's, in order (the stream sends each once).
    bool want_logprobs_;
    bool continuous_usage_;  // every chunk with the usage so far
    std::vector<LoggedToken> logged_;
    size_t logged_sent_ = 0;
    // The output's characters so far (text offsets: Unicode code points, each counted at the
    // token that holds its first byte, as OpenAI's offsets into the text).
    int64_t logged_chars_ = 0;
    std::shared_ptr<Channel> channel_;
    EngineLoop& loop_;
    Metrics& metrics_;
    bool first_chunk_ = true;
    bool done_ = false;
    const char* finish_reason_ = nullptr;
    std::string error_;  // set when the request ended with an error
    bool shutdown_ = false;
};

// A request's choices (GenerationSpec::n), each a Generation: the whole response with every
// choice, or the SSE stream of their chunks as they come, then one usage chunk and [DONE]. A
// choice that fails fails the response (the others are cancelled).
class Choices {
  public:
    Choices(std::vector<std::shared_ptr<Generation>> choices, std::shared_ptr<Notifier> notifier,
            const GenerationSpec& spec, int64_t prompt_tokens);
    ApiResult<chat::Json> collect();
    // Appends the next SSE events to `out` (waiting up to `wait` for some; an SSE comment when
    // none came, so a gone client is noticed). False once the stream is complete.
    bool pump(std::string& out, std::chrono::milliseconds wait);
    void abandon();

  private:
    std::vector<std::shared_ptr<Generation>> choices_;
    std::shared_ptr<Notifier> notifier_;
    bool include_usage_;
    int64_t prompt_tokens_;
    bool ended_ = false;
};

}  // namespace dsv4::server
