#include "server/output_stream.h"

#include "server/text_match.h"

namespace dsv4::server {

OutputStream::OutputStream(const Tokenizer& tokenizer, const GenerationSpec& spec)
    : decoder_(tokenizer),
      chat_(spec.endpoint == Endpoint::kChat),
      thinking_(chat_ && spec.encode.thinking_mode == chat::ThinkingMode::kThinking),
      stop_(spec.stop),
      include_stop_(spec.include_stop_str_in_output),
      min_tokens_(spec.rules.min_tokens),
      parser_(thinking_) {}

StreamDelta OutputStream::release(std::string_view text) {
    StreamDelta d;
    text_.append(text);
    if (chat_) {
        parser_.push(text, d);
    } else {
        d.content.append(text);
    }
    return d;
}

StreamDelta OutputStream::push(int32_t token) {
    if (stopped_) return {};
    const size_t searched = held_.size();
    held_ += decoder_.push(token);
    // A stop string counts where it ends in this token's text, after the first min_tokens.
    const Found f = ++pushed_ > min_tokens_ ? find_first(held_, stop_, searched) : Found{};
    if (f.found()) {
        stopped_ = true;
        const size_t end = f.pos + (include_stop_ ? f.marker.size() : 0);
        StreamDelta d = release(std::string_view(held_).substr(0, end));
        held_.clear();
        return d;
    }
    const size_t n = held_.size() - held_back(held_, stop_);
    StreamDelta d = release(std::string_view(held_).substr(0, n));
    held_.erase(0, n);
    return d;
}

StreamDelta OutputStream::finish() {
    StreamDelta d;
    if (!stopped_) {
        held_ += decoder_.flush();
        d = release(held_);
        held_.clear();
    }
    if (chat_) parser_.finish(d);
    return d;
}

chat::Json OutputStream::message(const std::string& id_prefix) const {
    // parse_completion reads a whole turn, which ends with EOS.
    auto parsed =
        chat::parse_completion(text_ + std::string(kEos), thinking_ ? chat::ThinkingMode::kThinking
                                                                    : chat::ThinkingMode::kChat);
    chat::Json m = chat::Json::object();
    m["role"] = "assistant";
    chat::Json calls = chat::Json::array();
    std::string content;
    std::string reasoning;
    if (parsed) {
        content = (*parsed)["content"].get<std::string>();
        reasoning = (*parsed)["reasoning_content"].get<std::string>();
        calls = (*parsed)["tool_calls"];
    } else {
        const ParsedTurn& t = parser_.turn();
        content = t.content;
        reasoning = t.reasoning;
        for (const auto& c : t.tool_calls)
            calls.push_back({{"type", "function"},
                             {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    for (size_t i = 0; i < calls.size(); ++i) {
        chat::Json call = chat::Json::object();
        call["id"] = id_prefix + std::to_string(i);
        call["type"] = "function";
        call["function"] = calls[i]["function"];
        calls[i] = std::move(call);
    }
    m["content"] = content.empty() && !calls.empty() ? chat::Json() : chat::Json(content);
    if (thinking_) m["reasoning_content"] = reasoning;
    if (!calls.empty()) m["tool_calls"] = std::move(calls);
    return m;
}

}  // namespace dsv4::server
