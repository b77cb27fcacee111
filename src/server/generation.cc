#include "server/generation.h"

#include <algorithm>

namespace dsv4::server {

Generation::Generation(const GenerationSpec& spec, ResponseMeta meta,
                       std::span<const int32_t> prompt, int32_t eos_token,
                       const Tokenizer& tokenizer, std::shared_ptr<Channel> channel,
                       EngineLoop& loop, Metrics& metrics)
    : meta_(std::move(meta)),
      prompt_tokens_(static_cast<int64_t>(prompt.size())),
      eos_(eos_token),
      stop_ids_(spec.stop_token_ids.begin(), spec.stop_token_ids.end()),
      // (A text prompt as given, without the BOS the server put in front.)
      echo_(!spec.echo           ? std::string()
            : spec.prompt_is_ids ? tokenizer.decode(prompt)
                                 : spec.prompt_text),
      tokenizer_(tokenizer),
      output_(tokenizer, spec),
      want_logprobs_(spec.logprobs >= 0),
      continuous_usage_(spec.stream && spec.continuous_usage),
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
        DSV4_ASSERT(
            ev.kind == ChannelEvent::Kind::kToken || ev.kind == ChannelEvent::Kind::kFinished,
            "a second acceptance on one channel");
        if (ev.token >= 0) {
            ++completion_tokens_;
            // A stop token id ends the output like a stop string, its text left out. EOS ends
            // the turn (or, ignore_eos, is generated past): its text is not output either. Nor
            // are their log-probabilities.
            const bool stop_id =
                std::find(stop_ids_.begin(), stop_ids_.end(), ev.token) != stop_ids_.end();
            if (!stop_id && ev.token != eos_) {
                if (ev.logprobs) {
                    logged_.push_back({ev.token, *ev.logprobs, logged_chars_});
                    for (const char b : tokenizer_.token_bytes(ev.token))
                        logged_chars_ += (static_cast<unsigned char>(b) & 0xC0) != 0x80;
                }
                append(output_.push(ev.token));
            }
            if (stop_id || output_.stopped()) {
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
                end(output_.has_tool_calls()          ? "tool_calls"
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

chat::Json Generation::unsent_logprobs() {
    if (logged_sent_ == logged_.size()) return chat::Json();
    const auto unsent = std::span<const LoggedToken>(logged_).subspan(logged_sent_);
    logged_sent_ = logged_.size();
    return logprobs_json(meta_.endpoint, tokenizer_, unsent);
}

chat::Json Generation::chunk_usage() const {
    return continuous_usage_ ? usage_json(prompt_tokens_, completion_tokens_, meta_.cached_tokens)
                             : chat::Json();
}

std::optional<ApiError> Generation::failure() const {
    if (error_.empty()) return std::nullopt;
    return server_error(shutdown_ ? 503 : 500, error_,
                        shutdown_ ? "shutting_down" : "engine_error");
}

ApiResult<chat::Json> Generation::collect() {
    std::vector<ChannelEvent> events;
    StreamDelta ignored;  // the whole message is made from the whole turn at the end
    while (!done_) {
        events.clear();
        if (channel_->wait(events, std::chrono::milliseconds(1000))) apply(events, ignored);
    }
    if (auto f = failure()) return *f;
    const auto usage = usage_json(prompt_tokens_, completion_tokens_, meta_.cached_tokens);
    chat::Json message;
    const char* reason = finish_reason_;
    if (meta_.endpoint == Endpoint::kChat) {
        message = output_.message(meta_.tool_call_prefix());
        if (message.contains("tool_calls") && reason != std::string("length"))
            reason = "tool_calls";
    }
    const chat::Json logprobs =
        want_logprobs_ ? logprobs_json(meta_.endpoint, tokenizer_, logged_) : chat::Json();
    return full_response(meta_, message, echo_ + output_.text(), reason, usage, logprobs);
}

bool Generation::stream_part(std::string& out, std::chrono::milliseconds wait) {
    if (first_chunk_) {
        // The role first, as OpenAI does, so a client sees the stream start at once (and a
        // completion's echoed prompt).
        StreamDelta echo;
        echo.content = echo_;
        out += sse_event(stream_chunk(meta_, echo, true, nullptr, chat::Json(), chunk_usage()));
        first_chunk_ = false;
        return true;
    }
    if (done_) return false;
    std::vector<ChannelEvent> events;
    if (!channel_->wait(events, wait)) return false;
    StreamDelta delta;
    apply(events, delta);
    // A token's log-probabilities go with the first chunk after it (its text may be held back
    // while a stop string could begin there), the finish chunk at the latest.
    if (!delta.empty())
        out +=
            sse_event(stream_chunk(meta_, delta, false, nullptr, unsent_logprobs(), chunk_usage()));
    if (done_ && error_.empty())
        out += sse_event(
            stream_chunk(meta_, {}, false, finish_reason_, unsent_logprobs(), chunk_usage()));
    return !delta.empty() || done_;
}

void Generation::abandon() {
    if (done_) return;
    cancel_engine_request();
    end("cancelled");
}

Choices::Choices(std::vector<std::shared_ptr<Generation>> choices,
                 std::shared_ptr<Notifier> notifier, const GenerationSpec& spec,
                 int64_t prompt_tokens)
    : choices_(std::move(choices)),
      notifier_(std::move(notifier)),
      include_usage_(spec.include_usage),
      prompt_tokens_(prompt_tokens) {
    DSV4_ASSERT(!choices_.empty(), "a response without choices");
}

ApiResult<chat::Json> Choices::collect() {
    chat::Json all;
    int64_t completion_tokens = 0;
    for (auto& c : choices_) {
        auto one = c->collect();
        if (!one) {
            abandon();
            return one.error();
        }
        completion_tokens += c->completion_tokens();
        if (all.is_null()) {
            all = std::move(*one);
        } else {
            all["choices"].push_back(std::move((*one)["choices"][0]));
        }
    }
    all["usage"] =
        usage_json(prompt_tokens_, completion_tokens, choices_.front()->meta().cached_tokens);
    return all;
}

bool Choices::pump(std::string& out, std::chrono::milliseconds wait) {
    if (ended_) return false;
    const uint64_t seen = notifier_->count();
    bool any = false;
    for (auto& c : choices_) any = c->stream_part(out, std::chrono::milliseconds(0)) || any;
    bool all_done = true;
    int64_t completion_tokens = 0;
    for (auto& c : choices_) {
        if (auto f = c->failure()) {
            abandon();
            out += sse_event(error_json(*f));
            out += kSseDone;
            ended_ = true;
            return true;  // the next call reports the end
        }
        all_done = all_done && c->done();
        completion_tokens += c->completion_tokens();
    }
    if (all_done) {
        if (include_usage_) {
            const ResponseMeta& meta = choices_.front()->meta();
            out += sse_event(usage_chunk(
                meta, usage_json(prompt_tokens_, completion_tokens, meta.cached_tokens)));
        }
        out += kSseDone;
        ended_ = true;
        return true;
    }
    if (!any && !notifier_->wait_after(seen, wait)) out += ": keep-alive\n\n";
    return true;
}

void Choices::abandon() {
    for (auto& c : choices_) c->abandon();
}

}  // namespace dsv4::server
