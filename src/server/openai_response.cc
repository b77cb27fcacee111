#include "server/openai_response.h"

namespace dsv4::server {

namespace {

using chat::Json;

Json envelope(const ResponseMeta& meta, bool chunk) {
    Json r = Json::object();
    r["id"] = meta.id;
    const bool chat = meta.endpoint == Endpoint::kChat;
    r["object"] = chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    r["created"] = meta.created;
    r["model"] = meta.model;
    return r;
}

Json reason_or_null(const char* finish_reason) {
    return finish_reason != nullptr ? Json(finish_reason) : Json();
}

}  // namespace

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens,
                std::optional<int64_t> cached_tokens) {
    Json u = Json::object();
    u["prompt_tokens"] = prompt_tokens;
    u["completion_tokens"] = completion_tokens;
    u["total_tokens"] = prompt_tokens + completion_tokens;
    if (cached_tokens) u["prompt_tokens_details"] = Json{{"cached_tokens", *cached_tokens}};
    return u;
}

Json logprobs_json(Endpoint endpoint, const Tokenizer& tokenizer,
                   std::span<const LoggedToken> tokens) {
    auto text = [&](int32_t id) { return tokenizer.decode(std::span<const int32_t>(&id, 1)); };
    auto bytes = [&](int32_t id) {
        Json b = Json::array();
        for (const char c : tokenizer.token_bytes(id)) b.push_back(static_cast<uint8_t>(c));
        return b;
    };
    Json r = Json::object();
    if (endpoint == Endpoint::kChat) {
        Json content = Json::array();
        for (const LoggedToken& t : tokens) {
            Json top = Json::array();
            for (int j = 0; j < t.logprobs.top_n; ++j) {
                const TokenLogprob& a = t.logprobs.top[j];
                top.push_back(
                    {{"token", text(a.token)}, {"logprob", a.logprob}, {"bytes", bytes(a.token)}});
            }
            content.push_back({{"token", text(t.token)},
                               {"logprob", t.logprobs.logprob},
                               {"bytes", bytes(t.token)},
                               {"top_logprobs", std::move(top)}});
        }
        r["content"] = std::move(content);
        return r;
    }
    Json toks = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
    for (const LoggedToken& t : tokens) {
        toks.push_back(text(t.token));
        lps.push_back(t.logprobs.logprob);
        Json top = Json::object();
        for (int j = 0; j < t.logprobs.top_n; ++j)
            top.emplace(text(t.logprobs.top[j].token), t.logprobs.top[j].logprob);
        top.emplace(text(t.token), t.logprobs.logprob);  // (no-op when already among them)
        tops.push_back(std::move(top));
        offsets.push_back(t.text_offset);
    }
    r["tokens"] = std::move(toks);
    r["token_logprobs"] = std::move(lps);
    r["top_logprobs"] = std::move(tops);
    r["text_offset"] = std::move(offsets);
    return r;
}

Json full_response(const ResponseMeta& meta, const Json& message, const std::string& text,
                   const char* finish_reason, const Json& usage, const Json& logprobs) {
    Json r = envelope(meta, false);
    Json choice = Json::object();
    choice["index"] = meta.choice;
    if (meta.endpoint == Endpoint::kChat) {
        choice["message"] = message;
    } else {
        choice["text"] = text;
    }
    choice["logprobs"] = logprobs;
    choice["finish_reason"] = reason_or_null(finish_reason);
    r["choices"] = Json::array({std::move(choice)});
    r["usage"] = usage;
    return r;
}

Json stream_chunk(const ResponseMeta& meta, const StreamDelta& d, bool first,
                  const char* finish_reason, const Json& logprobs, const Json& usage) {
    Json r = envelope(meta, true);
    Json choice = Json::object();
    choice["index"] = meta.choice;
    if (meta.endpoint == Endpoint::kChat) {
        Json delta = Json::object();
        if (first) delta["role"] = "assistant";
        if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
        if (!d.content.empty() || (first && d.reasoning.empty() && d.tool_calls.empty()))
            delta["content"] = d.content;
        if (!d.tool_calls.empty()) {
            Json calls = Json::array();
            for (const ToolCallDelta& t : d.tool_calls) {
                Json c = Json::object();
                c["index"] = t.index;
                Json f = Json::object();
                if (!t.name.empty()) {
                    c["id"] = meta.tool_call_prefix() + std::to_string(t.index);
                    c["type"] = "function";
                    f["name"] = t.name;
                }
                f["arguments"] = t.arguments;
                c["function"] = std::move(f);
                calls.push_back(std::move(c));
            }
            delta["tool_calls"] = std::move(calls);
        }
        choice["delta"] = std::move(delta);
    } else {
        choice["text"] = d.content;
    }
    choice["logprobs"] = logprobs;
    choice["finish_reason"] = reason_or_null(finish_reason);
    r["choices"] = Json::array({std::move(choice)});
    if (!usage.is_null()) r["usage"] = usage;
    return r;
}

Json usage_chunk(const ResponseMeta& meta, const Json& usage) {
    Json r = envelope(meta, true);
    r["choices"] = Json::array();
    r["usage"] = usage;
    return r;
}

std::string dump(const Json& value) {
    return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string sse_event(const Json& value) {
    return "data: " + dump(value) + "\n\n";
}

}  // namespace dsv4::server
