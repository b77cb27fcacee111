// encode_messages: a line-by-line port of encoding_dsv4.py's render_message / encode_messages.
// Values stay JSON so that odd inputs (null content, numbers where text is expected, ...)
// render, or fail, exactly as they do in Python.
#include <string>

#include "chat/dsml.h"
#include "chat/preprocess.h"
#include "chat/py_value.h"
#include "chat/templates.h"

namespace dsv4::chat {

namespace {

struct Render {
    Json thinking_mode;  // validated per rendered message, as in the reference
    Json reasoning_effort;
    bool drop_thinking = true;
    EncodingVersion version = EncodingVersion::kV4;
};

const Json& member(const Json& msg, std::string_view key) {
    static const Json kNull;
    const Json* v = py_get(msg, key);
    return v != nullptr ? *v : kNull;
}

// `value or ""` then str.format: falsy values render empty, others as str().
std::string text_or_empty(const Json& value) {
    return py_truthy(value) ? py_str(value) : "";
}

// The effort paragraph for message 0, or an error for an effort this version rejects.
Expected<std::string> effort_prefix(const Render& r, long index) {
    const bool first_thinking = index == 0 && py_is(r.thinking_mode, "thinking");
    const Json& effort = r.reasoning_effort;
    if (r.version == EncodingVersion::kV4) {
        if (!effort.is_null() && !py_is(effort, "max") && !py_is(effort, "high")) {
            return error("Invalid reasoning effort: ", py_str(effort));
        }
        return std::string(first_thinking && py_is(effort, "max") ? kEffortAbsoluteMaximum : "");
    }
    // 0731: `reasoning_effort or "low"`, then one of low / high / max.
    const Json level = py_truthy(effort) ? effort : Json("low");
    if (!py_is(level, "low") && !py_is(level, "high") && !py_is(level, "max")) {
        return error("Invalid reasoning effort: ", py_str(level), " (low, high or max)");
    }
    if (!first_thinking || py_is(level, "low")) return std::string();
    return std::string(py_is(level, "high") ? kEffortAbsoluteMaximum : kEffortBeyondMaximum);
}

// A tool_result block: a list content joins its text parts with a blank line (other parts
// become "[Unsupported <type>]"); anything else renders as str().
Expected<std::string> render_tool_result(const Json* content) {
    std::string out = "<tool_result>";
    if (content != nullptr && content->is_array()) {
        bool first = true;
        for (const Json& part : *content) {
            if (!part.is_object()) return error("a tool result part is not an object");
            if (!first) out += "\n\n";
            first = false;
            const Json& type = member(part, "type");
            if (!py_is(type, "text")) {
                out += "[Unsupported " + py_str(type) + "]";
                continue;
            }
            const Json* text = py_get(part, "text");
            if (text != nullptr && !text->is_string()) {
                return error("tool result text must be a string");
            }
            if (text != nullptr) out += text->get<std::string>();
        }
    } else if (content != nullptr) {
        out += py_str(*content);
    }
    return out + "</tool_result>";
}

// A user turn's blocks (text and tool results), joined by blank lines.
Expected<std::string> render_user_blocks(const Json& blocks) {
    if (!blocks.is_array()) return error("content_blocks is not a list");
    std::string out;
    bool first = true;
    for (const Json& block : blocks) {
        if (!block.is_object()) return error("a content block is not an object");
        if (!first) out += "\n\n";
        first = false;
        const Json& type = member(block, "type");
        if (py_is(type, "text")) {
            const Json* text = py_get(block, "text");
            if (text != nullptr && !text->is_string()) {
                // "\n\n".join(parts) takes strings only.
                return error("user content must be a string, not ", text->type_name());
            }
            if (text != nullptr) out += text->get<std::string>();
        } else if (py_is(type, "tool_result")) {
            DSV4_ASSIGN_OR_RETURN(std::string result, render_tool_result(py_get(block, "content")));
            out += result;
        } else {
            out += "[Unsupported " + py_str(type) + "]";
        }
    }
    return out;
}

// What follows a message depends on the next one: before an assistant or latest_reminder
// (or at the end) comes the assistant prefix with the think token, or the message's task
// token; before any other role, nothing.
Expected<std::string> render_transition(long index, const Messages& messages, const Render& r,
                                        long last_user) {
    if (index + 1 < static_cast<long>(messages.size())) {
        const Json& next_role = member(messages[index + 1], "role");
        if (!py_is(next_role, "assistant") && !py_is(next_role, "latest_reminder")) {
            return std::string();
        }
    }
    const Json& msg = messages[index];
    const Json& role = member(msg, "role");
    const bool thinking = py_is(r.thinking_mode, "thinking");
    const Json& task = member(msg, "task");
    if (!task.is_null()) {
        static constexpr std::pair<std::string_view, std::string_view> kTasks[] = {
            {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
            {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"},
        };
        std::string_view token;
        for (const auto& [name, sp] : kTasks) {
            if (py_is(task, name)) token = sp;
        }
        if (token.empty()) {
            return error("Invalid task: '", py_str(task),
                         "' (action, query, authority, domain, title or read_url)");
        }
        if (!py_is(task, "action")) return std::string(token);
        return std::string(kAssistant) + std::string(thinking ? kThinkStart : kThinkEnd) +
               std::string(token);
    }
    if (py_is(role, "user") || py_is(role, "developer")) {
        const bool open_thinking = thinking && (!r.drop_thinking || index >= last_user);
        return std::string(kAssistant) + std::string(open_thinking ? kThinkStart : kThinkEnd);
    }
    return std::string();
}

Expected<std::string> render_message(long index, const Messages& messages, const Render& r) {
    if (!py_is(r.thinking_mode, "chat") && !py_is(r.thinking_mode, "thinking")) {
        return error("Invalid thinking_mode `", py_str(r.thinking_mode), "`");
    }
    const Json& msg = messages[index];
    const long last_user = find_last_user_index(messages);
    const Json& role = member(msg, "role");
    const Json& content = member(msg, "content");
    const Json& response_format = member(msg, "response_format");
    const bool thinking = py_is(r.thinking_mode, "thinking");

    std::vector<Json> tools;
    if (py_truthy(member(msg, "tools"))) {
        DSV4_ASSIGN_OR_RETURN(tools, tools_from_openai_format(member(msg, "tools")));
    }
    std::vector<ToolCall> tool_calls;
    if (py_truthy(member(msg, "tool_calls"))) {
        DSV4_ASSIGN_OR_RETURN(tool_calls, tool_calls_from_openai_format(member(msg, "tool_calls")));
    }
    DSV4_ASSIGN_OR_RETURN(std::string prompt, effort_prefix(r, index));

    auto tools_and_format = [&]() {
        std::string out;
        if (!tools.empty()) out += "\n\n" + render_tools(tools);
        if (py_truthy(response_format)) {
            out += "\n\n" + std::string(kResponseFormatIntro) + py_json_dumps(response_format);
        }
        return out;
    };

    if (py_is(role, "system")) {
        prompt += text_or_empty(content);
        prompt += tools_and_format();
    } else if (py_is(role, "developer")) {
        if (!py_truthy(content)) {
            return error("Invalid message for role `developer`: ", py_repr(msg));
        }
        if (!content.is_string()) return error("developer content must be a string");
        prompt += std::string(kUser) + content.get<std::string>() + tools_and_format();
    } else if (py_is(role, "user")) {
        prompt += kUser;
        const Json& blocks = member(msg, "content_blocks");
        if (py_truthy(blocks)) {
            DSV4_ASSIGN_OR_RETURN(std::string text, render_user_blocks(blocks));
            prompt += text;
        } else if (py_truthy(content)) {
            if (!content.is_string()) return error("user content must be a string");
            prompt += content.get<std::string>();
        }
    } else if (py_is(role, "latest_reminder")) {
        prompt += std::string(kLatestReminder) + py_str(content);
    } else if (py_is(role, "assistant")) {
        std::string calls;
        if (!tool_calls.empty()) {
            DSV4_ASSIGN_OR_RETURN(calls, render_tool_calls(tool_calls));
        }
        const bool previous_has_task = index >= 1 && !member(messages[index - 1], "task").is_null();
        std::string reasoning;
        if (thinking && !previous_has_task && (!r.drop_thinking || index > last_user)) {
            reasoning = text_or_empty(member(msg, "reasoning_content")) + std::string(kThinkEnd);
        }
        prompt += reasoning + text_or_empty(content) + calls;
        if (!py_truthy(member(msg, "wo_eos"))) prompt += kEos;
    } else if (py_is(role, "tool")) {
        return error("tool messages must be merged into user messages first");
    } else {
        return error("Unknown role: ", py_str(role));
    }

    DSV4_ASSIGN_OR_RETURN(std::string next, render_transition(index, messages, r, last_user));
    return prompt + next;
}

Expected<std::string> encode(const Json& messages_value, const Json& context_value,
                             bool drop_thinking, bool add_bos, const Render& base) {
    DSV4_ASSIGN_OR_RETURN(Messages raw_messages, as_message_list(messages_value, "messages"));
    Messages raw_context;
    if (py_truthy(context_value)) {
        if (!context_value.is_array()) return error("context must be a list of messages");
        raw_context.assign(context_value.begin(), context_value.end());
    }
    DSV4_ASSIGN_OR_RETURN(Messages messages, merge_tool_messages(raw_messages));
    // The new messages are sorted against the call order of the raw context (as given).
    std::vector<Json*> order;
    for (Json& m : raw_context) order.push_back(&m);
    for (Json& m : messages) order.push_back(&m);
    DSV4_RETURN_IF_ERROR(sort_tool_results_by_call_order(order));
    Messages context;
    if (!raw_context.empty()) {
        DSV4_ASSIGN_OR_RETURN(context, merge_tool_messages(raw_context));
        order.clear();
        for (Json& m : context) order.push_back(&m);
        DSV4_RETURN_IF_ERROR(sort_tool_results_by_call_order(order));
    }
    Messages full = context;
    full.insert(full.end(), messages.begin(), messages.end());

    std::string prompt = add_bos && context.empty() ? std::string(kBos) : std::string();
    Render r = base;
    r.drop_thinking = drop_thinking;
    for (const Json& m : full) {
        if (py_truthy(member(m, "tools"))) r.drop_thinking = false;
    }
    long to_render = static_cast<long>(messages.size());
    long context_len = static_cast<long>(context.size());
    if (py_is(r.thinking_mode, "thinking") && r.drop_thinking) {
        DSV4_ASSIGN_OR_RETURN(full, drop_thinking_messages(full));
        DSV4_ASSIGN_OR_RETURN(Messages dropped_context, drop_thinking_messages(context));
        // The reference's arithmetic, kept as is: the dropped context's own length decides
        // where rendering starts.
        to_render = static_cast<long>(full.size()) - static_cast<long>(dropped_context.size());
        context_len = static_cast<long>(full.size()) - to_render;
    }
    for (long i = 0; i < to_render; ++i) {
        DSV4_ASSIGN_OR_RETURN(std::string text, render_message(i + context_len, full, r));
        prompt += text;
    }
    return prompt;
}

}  // namespace

std::optional<EncodingVersion> parse_encoding_version(std::string_view name) {
    if (name == "v4") return EncodingVersion::kV4;
    if (name == "v4-flash-0731" || name == "0731") return EncodingVersion::kV4Flash0731;
    return std::nullopt;
}

std::string_view encoding_version_name(EncodingVersion version) {
    return version == EncodingVersion::kV4 ? "v4" : "v4-flash-0731";
}

Expected<std::string> encode_messages(const Json& messages, const EncodeOptions& options) {
    Render r;
    r.thinking_mode = options.thinking_mode == ThinkingMode::kThinking ? "thinking" : "chat";
    switch (options.reasoning_effort) {
        case ReasoningEffort::kDefault:
            r.reasoning_effort = nullptr;
            break;
        case ReasoningEffort::kLow:
            r.reasoning_effort = "low";
            break;
        case ReasoningEffort::kHigh:
            r.reasoning_effort = "high";
            break;
        case ReasoningEffort::kMax:
            r.reasoning_effort = "max";
            break;
    }
    r.version = options.version;
    return encode(messages, options.context, options.drop_thinking, options.add_default_bos_token,
                  r);
}

Expected<std::string> encode_messages_kwargs(const Json& messages, const Json& kwargs,
                                             EncodingVersion version) {
    if (!kwargs.is_object()) return error("kwargs must be an object");
    Render r;
    r.version = version;
    Json context;
    bool drop_thinking = true;
    bool add_bos = true;
    bool has_mode = false;
    for (const auto& [key, value] : kwargs.items()) {
        if (key == "thinking_mode") {
            r.thinking_mode = value;
            has_mode = true;
        } else if (key == "reasoning_effort") {
            r.reasoning_effort = value;
        } else if (key == "drop_thinking") {
            drop_thinking = py_truthy(value);
        } else if (key == "add_default_bos_token") {
            add_bos = py_truthy(value);
        } else if (key == "context") {
            context = value;
        } else {
            return error("encode_messages() got an unexpected keyword argument '", key, "'");
        }
    }
    if (!has_mode) return error("encode_messages() missing required argument: 'thinking_mode'");
    return encode(messages, context, drop_thinking, add_bos, r);
}

}  // namespace dsv4::chat
