#include "server/generation.h"

namespace dsv4::server {

Generation::Generation(const GenerationSpec& spec, ResponseMeta meta, int64_t prompt_tokens,
                       int32_t eos_token, const Tokenizer& tokenizer,
                       std::shared_ptr<Channel> channel, EngineLoop& loop, Metrics& metrics)
    : spec_(spec),
      meta_(std::move(meta)),
      prompt_tokens_(prompt_tokens),
      eos_(eos_token),
      output_(tokenizer, spec),
      channel_(std::move(channel)),
      loop_(loop),
      metrics_(metrics) {}

void Generation::cancel_engine_request() {
    channel_->cancel();
    loop_.wake();
}

void Generation::end(const char* reason) {
    done_ = true;
    finish_reason_ = reason;
    metrics_.count_finish(reason);
}

bool Generation::apply(const std::vector<ChannelEvent>& events, StreamDelta& delta) {
    auto append = [&](StreamDelta d) {
        delta.reasoning += d.reasoning;
        delta.content += d.content;
        for (auto& t : d.tool_calls) {
            if (!delta.tool_calls.empty() && delta.tool_calls.back().index == t.index &&
                t.name.empty()) {
                delta.tool_calls.back().arguments += t.arguments;
            } else {
                delta.tool_calls.push_back(std::move(t));
            }
        }
    };
    for (const ChannelEvent& ev : events) {
        if (done_) break;
        DSV4_ASSERT(ev.kind == ChannelEvent::Kind::kToken || ev.kind == ChannelEvent::Kind::kFinished,
                    "a second acceptance on one channel");
        if (ev.token >= 0) {
            ++completion_tokens_;
            // EOS ends the turn; its text is not output.
            if (!(ev.finish == FinishReason::kEos && ev.token == eos_)) append(output_.push(ev.token));
            if (output_.stopped()) {
                cancel_engine_request();
                append(output_.finish());
                end("stop");
                break;
            }
        }
        if (ev.kind != ChannelEvent::Kind::kFinished) continue;
        switch (ev.finish) {
            case FinishReason::kEos:
            case FinishReason::kLength:
                append(output_.finish());
                end(output_.has_tool_calls() ? "tool_calls"
                    : ev.finish == FinishReason::kEos ? "stop"
                                                      : "length");
                break;
            case FinishReason::kCancelled:
                // Only the server cancels a request whose client is still here: shutdown.
                shutdown_ = true;
                error_ = "the server is shutting down";
                end("cancelled");
                break;
            default:
                error_ = ev.error.empty() ? "the request failed" : ev.error;
                end("error");
                break;
        }
    }
    return done_;
}

ApiResult<chat::Json> Generation::collect() {
    std::vector<ChannelEvent> events;
    StreamDelta ignored;  // the whole message is made from the whole turn at the end
    while (!done_) {
        events.clear();
        if (channel_->wait(events, std::chrono::milliseconds(1000))) apply(events, ignored);
    }
    if (!error_.empty())
        return server_error(shutdown_ ? 503 : 500, error_, shutdown_ ? "shutting_down" : "engine_error");
    const auto usage = usage_json(prompt_tokens_, completion_tokens_);
    chat::Json message;
    const char* reason = finish_reason_;
    if (meta_.endpoint == Endpoint::kChat) {
        message = output_.message(meta_.tool_call_prefix());
        if (message.contains("tool_calls") && reason != std::string("length")) reason = "tool_calls";
    }
    return full_response(meta_, message, output_.text(), reason, usage);
}

bool Generation::pump(std::string& out, std::chrono::milliseconds wait) {
    if (first_chunk_) {
        // The role first, as OpenAI does, so a client sees the stream start at once.
        out += sse_event(stream_chunk(meta_, {}, true, nullptr));
        first_chunk_ = false;
        return true;
    }
    if (done_) return false;
    std::vector<ChannelEvent> events;
    if (!channel_->wait(events, wait)) {
        out += ": keep-alive\n\n";
        return true;
    }
    StreamDelta delta;
    apply(events, delta);
    if (!delta.empty()) out += sse_event(stream_chunk(meta_, delta, false, nullptr));
    if (!done_) return true;
    if (!error_.empty()) {
        ApiError e = server_error(shutdown_ ? 503 : 500, error_,
                                  shutdown_ ? "shutting_down" : "engine_error");
        out += sse_event(error_json(e));
    } else {
        out += sse_event(stream_chunk(meta_, {}, false, finish_reason_));
        if (spec_.include_usage)
            out += sse_event(usage_chunk(meta_, usage_json(prompt_tokens_, completion_tokens_)));
    }
    out += kSseDone;
    return true;  // the next call reports the end
}

void Generation::abandon() {
    if (done_) return;
    cancel_engine_request();
    end("cancelled");
}

}  // namespace dsv4::server
