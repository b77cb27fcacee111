// parse_completion: a port of parse_message_from_completion_text and parse_tool_calls, with
// the two regular expressions they use spelled out (Python's lazy groups and `$`, which also
// matches before a final newline).
#include <array>
#include <string>
#include <vector>

#include "chat/py_value.h"
#include "chat/templates.h"
#include "base/utf8.h"
#include "chat/unicode.h"

namespace dsv4::chat {

namespace {

struct ReadResult {
    size_t next;               // index after the stop string (or the text's end)
    std::string_view content;  // text before it
    std::string_view stop;     // the stop found, empty when none
};

// _read_until_stop: the earliest of the stops (the first listed wins a tie).
ReadResult read_until_stop(size_t index, std::string_view text,
                           std::initializer_list<std::string_view> stops) {
    size_t best = std::string_view::npos;
    std::string_view matched;
    for (std::string_view stop : stops) {
        const size_t pos = text.find(stop, index);
        if (pos != std::string_view::npos && (best == std::string_view::npos || pos < best)) {
            best = pos;
            matched = stop;
        }
    }
    if (matched.empty()) return {text.size(), text.substr(std::min(index, text.size())), {}};
    return {best + matched.size(), text.substr(index, best - index), matched};
}

// Length of the Python-whitespace prefix of s.
size_t whitespace_prefix(std::string_view s) {
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t len = utf8_sequence_length(s, pos);
        if (len == 0 || !py_isspace(utf8_decode(s, pos, len))) break;  // invalid: not space
        pos += len;
    }
    return pos;
}

// Python's `X$` (no MULTILINE): the position where `$` may match after a literal suffix X,
// i.e. s ends with X, or with X + "\n". Returns the start of X, or npos.
size_t suffix_before_end(std::string_view s, std::string_view x) {
    if (s.size() >= x.size() && s.substr(s.size() - x.size()) == x) return s.size() - x.size();
    if (s.size() >= x.size() + 1 && s.back() == '\n' &&
        s.substr(s.size() - 1 - x.size(), x.size()) == x) {
        return s.size() - 1 - x.size();
    }
    return std::string_view::npos;
}

// re.findall(r'^\s*name="(.*?)">\n$', s, DOTALL) with exactly one result.
bool match_tool_name(std::string_view s, std::string& name) {
    const size_t start = whitespace_prefix(s);
    constexpr std::string_view kOpen = "name=\"";
    if (s.substr(start, kOpen.size()) != kOpen) return false;
    const size_t value = start + kOpen.size();
    const size_t end = suffix_before_end(s, "\">\n");
    if (end == std::string_view::npos || end < value) return false;
    name = std::string(s.substr(value, end - value));
    return true;
}

// re.findall(r'^ name="(.*?)" string="(true|false)">(.*?)<$', s, DOTALL) with one result.
bool match_parameter(std::string_view s, std::string& name, std::string& is_string,
                     std::string& value) {
    constexpr std::string_view kOpen = " name=\"";
    if (s.substr(0, kOpen.size()) != kOpen) return false;
    const size_t last = suffix_before_end(s, "<");  // where the final '<' sits
    if (last == std::string_view::npos) return false;
    // The lazy name ends at the first `" string="true|false">` that leaves room before '<'.
    for (size_t pos = s.find("\" string=\"", kOpen.size()); pos != std::string_view::npos;
         pos = s.find("\" string=\"", pos + 1)) {
        for (std::string_view flag : {"true", "false"}) {
            const std::string marker = "\" string=\"" + std::string(flag) + "\">";
            if (s.substr(pos, marker.size()) != marker) continue;
            const size_t value_start = pos + marker.size();
            if (value_start > last) continue;
            name = std::string(s.substr(kOpen.size(), pos - kOpen.size()));
            is_string = std::string(flag);
            value = std::string(s.substr(value_start, last - value_start));
            return true;
        }
    }
    return false;
}

struct ParsedCall {
    std::string name;
    std::string arguments;
};

// decode_dsml_to_arguments: the arguments JSON text, assembled without validation.
std::string assemble_arguments(const std::vector<std::array<std::string, 3>>& params) {
    std::string out = "{";
    for (size_t i = 0; i < params.size(); ++i) {
        const auto& [name, is_string, value] = params[i];
        if (i > 0) out += ", ";
        out += py_json_dumps(Json(name)) + ": " +
               (is_string == "true" ? py_json_dumps(Json(value)) : value);
    }
    return out + "}";
}

Expected<std::vector<ParsedCall>> parse_tool_calls(size_t& index, std::string_view text,
                                                   std::string_view& stop) {
    std::vector<ParsedCall> calls;
    stop = {};
    while (index < text.size()) {
        ReadResult r = read_until_stop(index, text, {kInvokeOpen, kToolCallsClose});
        index = r.next;
        stop = r.stop;
        if (r.content != ">\n") {
            return error("Tool call format error: expected '>\\n' but got '", r.content, "'");
        }
        if (stop == kToolCallsClose) break;
        if (stop.empty()) return error("Missing special token in tool calls");

        r = read_until_stop(index, text, {kParameterOpen, kInvokeClose});
        index = r.next;
        stop = r.stop;
        ParsedCall call;
        if (!match_tool_name(r.content, call.name)) {
            return error("Tool name format error: '", r.content, "'");
        }
        std::vector<std::array<std::string, 3>> params;
        while (stop == kParameterOpen) {
            r = read_until_stop(index, text, {kParameterClose});
            index = r.next;
            stop = r.stop;
            std::array<std::string, 3> param;
            if (!match_parameter(r.content, param[0], param[1], param[2])) {
                return error("Parameter format error: '", r.content, "'");
            }
            for (const auto& existing : params) {
                if (existing[0] == param[0]) {
                    return error("Duplicate parameter name: '", param[0], "'");
                }
            }
            params.push_back(std::move(param));
            r = read_until_stop(index, text, {kParameterOpen, kInvokeClose});
            index = r.next;
            stop = r.stop;
            if (r.content != ">\n") {
                return error("Parameter format error: expected '>\\n' but got '", r.content, "'");
            }
        }
        call.arguments = assemble_arguments(params);
        calls.push_back(std::move(call));
    }
    return calls;
}

}  // namespace

Expected<Json> parse_completion(std::string_view text, ThinkingMode thinking_mode) {
    std::string_view reasoning;
    size_t index = 0;
    if (thinking_mode == ThinkingMode::kThinking) {
        const ReadResult r = read_until_stop(index, text, {kThinkEnd, kToolCallsStart});
        index = r.next;
        reasoning = r.content;
        if (r.stop != kThinkEnd) return error("Invalid thinking format: missing </think>");
    }
    ReadResult r = read_until_stop(index, text, {kEos, kToolCallsStart});
    index = r.next;
    const std::string_view content = r.content;
    std::string_view stop = r.stop;
    std::vector<ParsedCall> calls;
    if (stop == kToolCallsStart) {
        DSV4_ASSIGN_OR_RETURN(calls, parse_tool_calls(index, text, stop));
        r = read_until_stop(index, text, {kEos});
        index = r.next;
        stop = r.stop;
        if (!r.content.empty()) return error("Unexpected content after tool calls");
    } else if (stop != kEos) {
        return error("Invalid format: missing EOS token");
    }
    if (index != text.size() || !(stop == kEos || stop.empty())) {
        return error("Unexpected content at end");
    }
    for (std::string_view special : {kBos, kEos, kThinkStart, kThinkEnd, kDsml}) {
        if (content.find(special) != std::string_view::npos ||
            reasoning.find(special) != std::string_view::npos) {
            return error("Unexpected special token '", special, "' in content");
        }
    }
    Json result = Json::object();
    result["role"] = "assistant";
    result["content"] = std::string(content);
    result["reasoning_content"] = std::string(reasoning);
    result["tool_calls"] = Json::array();
    for (const ParsedCall& call : calls) {
        Json function = Json::object();
        function["name"] = call.name;
        function["arguments"] = call.arguments;
        Json entry = Json::object();
        entry["type"] = "function";
        entry["function"] = std::move(function);
        result["tool_calls"].push_back(std::move(entry));
    }
    return result;
}

}  // namespace dsv4::chat
