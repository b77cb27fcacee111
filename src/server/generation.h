// One accepted request seen from its HTTP thread: reads the channel, turns tokens into the
// response (whole, or SSE events as they come), ends the engine request early when a stop
// string matched or the client went away, and counts how it ended.
#pragma once

#include <chrono>
#include <memory>
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
    Generation(const GenerationSpec& spec, ResponseMeta meta, int64_t prompt_tokens,
               int32_t eos_token, const Tokenizer& tokenizer, std::shared_ptr<Channel> channel,
               EngineLoop& loop, Metrics& metrics);
    // Not streaming: waits for the end. The response, or an error (the engine failed, or the
    // server is shutting down).
    ApiResult<chat::Json> collect();
    // Streaming: appends the next SSE events to `out` (waiting up to `wait` for some; an SSE
    // comment when none came, so a gone client is noticed). False once the stream is complete.
    bool pump(std::string& out, std::chrono::milliseconds wait);
    // The client went away (or the response was dropped): cancels the request if still going.
    void abandon();

  private:
    // Applies channel events; true once the output is complete.
    bool apply(const std::vector<ChannelEvent>& events, StreamDelta& delta);
    void end(const char* reason);
    void cancel_engine_request();

    GenerationSpec spec_;
    ResponseMeta meta_;
    int64_t prompt_tokens_;
    int64_t completion_tokens_ = 0;
    int32_t eos_;
    OutputStream output_;
    std::shared_ptr<Channel> channel_;
    EngineLoop& loop_;
    Metrics& metrics_;
    bool first_chunk_ = true;
    bool done_ = false;
    const char* finish_reason_ = nullptr;
    std::string error_;  // set when the request ended with an error
    bool shutdown_ = false;
};

}  // namespace dsv4::server
