#include "server/dsml_stream.h"

#include <nlohmann/json.hpp>

#include "server/text_match.h"

namespace dsv4::server {

namespace {

// The markers of DeepSeek-V4's output format (encoding_dsv4.py; chat/templates.h has the
// encoder's copy). ｜DSML｜ and </think> are single tokens, but "<" and "</" around them are not.
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kToolCallsStart = "\n\n<｜DSML｜tool_calls";
constexpr std::string_view kToolCallsClose = "</｜DSML｜tool_calls>";
constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke";
constexpr std::string_view kInvokeClose = "</｜DSML｜invoke";
constexpr std::string_view kParameterOpen = "<｜DSML｜parameter";
constexpr std::string_view kParameterEnd = "</｜DSML｜parameter";

// A JSON string's text without its quotes: escaping is per character, so the escaped pieces
// of a value join to the escaped value.
std::string json_escape(std::string_view s) {
    const std::string quoted = nlohmann::json(std::string(s))
                                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return quoted.substr(1, quoted.size() - 2);
}

}  // namespace

DsmlStreamParser::DsmlStreamParser(bool thinking)
    : state_(thinking ? State::kReasoning : State::kContent) {}

void DsmlStreamParser::push(std::string_view text, StreamDelta& out) {
    buf_.append(text);
    while (step(false, out) == Step::kProgress) {
    }
}

void DsmlStreamParser::finish(StreamDelta& out) {
    while (step(true, out) == Step::kProgress) {
    }
    // A block cut off by the length limit is passed on as text.
    if (state_ != State::kReasoning && state_ != State::kContent && state_ != State::kDone &&
        state_ != State::kAfterCalls && state_ != State::kRaw) {
        fail(out);
    }
    buf_.clear();
}

void DsmlStreamParser::emit_reasoning(std::string_view s, StreamDelta& out) {
    out.reasoning.append(s);
    turn_.reasoning.append(s);
}

void DsmlStreamParser::emit_content(std::string_view s, StreamDelta& out) {
    out.content.append(s);
    turn_.content.append(s);
}

void DsmlStreamParser::emit_arguments(std::string_view s, StreamDelta& out) {
    const int index = static_cast<int>(turn_.tool_calls.size()) - 1;
    turn_.tool_calls.back().arguments.append(s);
    if (out.tool_calls.empty() || out.tool_calls.back().index != index)
        out.tool_calls.push_back({index, {}, {}});
    out.tool_calls.back().arguments.append(s);
}

void DsmlStreamParser::consume(size_t n) {
    if (state_ != State::kReasoning && state_ != State::kContent) block_.append(buf_, 0, n);
    buf_.erase(0, n);
}

DsmlStreamParser::Step DsmlStreamParser::fail(StreamDelta& out) {
    emit_content(block_, out);
    emit_content(buf_, out);
    block_.clear();
    buf_.clear();
    state_ = State::kRaw;
    return Step::kNeedMore;
}

// buf_ must be `literal` followed by one of `markers`: consumes both and names the marker.
DsmlStreamParser::Step DsmlStreamParser::expect_then(
    std::string_view literal, std::initializer_list<std::string_view> markers, bool at_end,
    std::string_view* matched, StreamDelta& out) {
    bool possible = false;
    for (std::string_view m : markers) {
        const std::string whole = std::string(literal) + std::string(m);
        if (buf_.starts_with(whole)) {
            consume(whole.size());
            *matched = m;
            return Step::kProgress;
        }
        possible = possible || std::string_view(whole).starts_with(buf_);
    }
    if (possible && !at_end) return Step::kNeedMore;
    return fail(out);
}

DsmlStreamParser::Step DsmlStreamParser::step(bool at_end, StreamDelta& out) {
    switch (state_) {
        case State::kReasoning: {
            const Found f = find_first(buf_, {kThinkEnd});
            if (f.pos != std::string_view::npos) {
                emit_reasoning(std::string_view(buf_).substr(0, f.pos), out);
                buf_.erase(0, f.pos + f.marker.size());
                state_ = State::kContent;
                return Step::kProgress;
            }
            const size_t n = buf_.size() - (at_end ? 0 : held_back(buf_, {kThinkEnd}));
            emit_reasoning(std::string_view(buf_).substr(0, n), out);
            buf_.erase(0, n);
            return Step::kNeedMore;
        }
        case State::kContent: {
            const Found f = find_first(buf_, {kEos, kToolCallsStart});
            if (f.pos != std::string_view::npos) {
                emit_content(std::string_view(buf_).substr(0, f.pos), out);
                buf_.erase(0, f.pos);
                if (f.marker == kEos) {
                    state_ = State::kDone;
                    return Step::kProgress;
                }
                state_ = State::kCallsOpen;
                consume(f.marker.size());
                return Step::kProgress;
            }
            const size_t n = buf_.size() - (at_end ? 0 : held_back(buf_, {kEos, kToolCallsStart}));
            emit_content(std::string_view(buf_).substr(0, n), out);
            buf_.erase(0, n);
            return Step::kNeedMore;
        }
        case State::kCallsOpen: {
            std::string_view m;
            if (expect_then(">\n", {kInvokeOpen, kToolCallsClose}, at_end, &m, out) !=
                Step::kProgress)
                return Step::kNeedMore;
            state_ = m == kInvokeOpen ? State::kInvokeHead : State::kAfterCalls;
            return Step::kProgress;
        }
        case State::kInvokeHead: {
            // ' name="NAME">\n' (re.findall(r'^\s*name="(.*?)">\n$'): the name runs to the last
            // '">\n' before the first parameter or the invoke's end.
            const Found f = find_first(buf_, {kParameterOpen, kInvokeClose});
            if (f.pos == std::string_view::npos) return at_end ? fail(out) : Step::kNeedMore;
            std::string_view head = std::string_view(buf_).substr(0, f.pos);
            head.remove_prefix(std::min(head.find_first_not_of(" \t\r\n"), head.size()));
            constexpr std::string_view kOpen = "name=\"";
            constexpr std::string_view kClose = "\">\n";
            if (!head.starts_with(kOpen) || !head.ends_with(kClose) ||
                head.size() < kOpen.size() + kClose.size())
                return fail(out);
            const std::string name(
                head.substr(kOpen.size(), head.size() - kOpen.size() - kClose.size()));
            turn_.tool_calls.push_back({name, {}});
            out.tool_calls.push_back({static_cast<int>(turn_.tool_calls.size()) - 1, name, {}});
            consume(f.pos + f.marker.size());
            first_param_ = true;
            if (f.marker == kInvokeClose) {
                emit_arguments("{}", out);
                state_ = State::kCallsOpen;
            } else {
                state_ = State::kParamHead;
            }
            return Step::kProgress;
        }
        case State::kParamHead: {
            constexpr std::string_view kOpen = " name=\"";
            if (!buf_.starts_with(kOpen.substr(0, std::min(buf_.size(), kOpen.size()))))
                return fail(out);
            const Found f = find_first(buf_, {"\" string=\"true\">", "\" string=\"false\">"});
            if (f.pos == std::string_view::npos || f.pos < kOpen.size()) {
                if (buf_.find(kParameterEnd) != std::string::npos) return fail(out);
                return at_end ? fail(out) : Step::kNeedMore;
            }
            string_param_ = f.marker == "\" string=\"true\">";
            const std::string name = buf_.substr(kOpen.size(), f.pos - kOpen.size());
            emit_arguments(std::string(first_param_ ? "{" : ", ") + "\"" + json_escape(name) +
                               "\": " + (string_param_ ? "\"" : ""),
                           out);
            first_param_ = false;
            consume(f.pos + f.marker.size());
            state_ = State::kParamValue;
            return Step::kProgress;
        }
        case State::kParamValue: {
            const Found f = find_first(buf_, {kParameterEnd});
            const size_t n = f.pos != std::string_view::npos
                                 ? f.pos
                                 : buf_.size() - (at_end ? 0 : held_back(buf_, {kParameterEnd}));
            const std::string_view value = std::string_view(buf_).substr(0, n);
            if (!value.empty())
                emit_arguments(string_param_ ? json_escape(value) : std::string(value), out);
            consume(n);
            if (f.pos == std::string_view::npos) return at_end ? fail(out) : Step::kNeedMore;
            if (string_param_) emit_arguments("\"", out);
            consume(kParameterEnd.size());
            state_ = State::kParamEnd;
            return Step::kProgress;
        }
        case State::kParamEnd: {
            std::string_view m;
            if (expect_then(">\n", {kParameterOpen, kInvokeClose}, at_end, &m, out) !=
                Step::kProgress)
                return Step::kNeedMore;
            if (m == kInvokeClose) {
                emit_arguments("}", out);
                state_ = State::kCallsOpen;
            } else {
                state_ = State::kParamHead;
            }
            return Step::kProgress;
        }
        case State::kAfterCalls: {
            if (buf_.empty()) return Step::kNeedMore;
            if (buf_.starts_with(kEos)) {
                state_ = State::kDone;
                buf_.clear();
                return Step::kNeedMore;
            }
            if (kEos.starts_with(buf_) && !at_end) return Step::kNeedMore;
            // Text after the block: the reference rejects the turn; pass it on as content.
            state_ = State::kRaw;
            return Step::kProgress;
        }
        case State::kRaw:
            emit_content(buf_, out);
            buf_.clear();
            return Step::kNeedMore;
        case State::kDone:
            buf_.clear();
            return Step::kNeedMore;
    }
    return Step::kNeedMore;
}

}  // namespace dsv4::server
