#include "chat/preprocess.h"

#include <algorithm>
#include <map>

#include "chat/py_value.h"

namespace dsv4::chat {

namespace {

const Json& get_or(const Json& object, std::string_view key, const Json& fallback) {
    const Json* v = py_get(object, key);
    return v != nullptr ? *v : fallback;
}

bool role_is(const Json& message, std::string_view role) {
    const Json* r = py_get(message, "role");
    return r != nullptr && py_is(*r, role);
}

}  // namespace

Expected<Messages> as_message_list(const Json& value, const char* what) {
    if (value.is_array()) return Messages(value.begin(), value.end());
    // Iterating an empty dict or string yields nothing (so no error either).
    if ((value.is_object() || value.is_string()) && !py_truthy(value)) return Messages();
    return error(what, " must be a list of messages, not ", value.type_name());
}

Expected<Messages> merge_tool_messages(const Messages& messages) {
    static const Json kEmpty = "";
    Messages merged;
    for (const Json& msg : messages) {
        if (!msg.is_object()) return error("a message is not an object: ", py_repr(msg));
        const bool previous_is_user = !merged.empty() && role_is(merged.back(), "user") &&
                                      merged.back().contains("content_blocks");
        if (role_is(msg, "tool")) {
            Json block = Json::object();
            block["type"] = "tool_result";
            block["tool_use_id"] = get_or(msg, "tool_call_id", kEmpty);
            block["content"] = get_or(msg, "content", kEmpty);
            if (previous_is_user) {
                merged.back()["content_blocks"].push_back(std::move(block));
            } else {
                Json user = Json::object();
                user["role"] = "user";
                user["content_blocks"] = Json::array({std::move(block)});
                merged.push_back(std::move(user));
            }
        } else if (role_is(msg, "user")) {
            Json text_block = Json::object();
            text_block["type"] = "text";
            text_block["text"] = get_or(msg, "content", kEmpty);
            const Json* task = previous_is_user ? py_get(merged.back(), "task") : nullptr;
            if (previous_is_user && (task == nullptr || task->is_null())) {
                merged.back()["content_blocks"].push_back(std::move(text_block));
            } else {
                Json user = Json::object();
                user["role"] = "user";
                user["content"] = get_or(msg, "content", kEmpty);
                user["content_blocks"] = Json::array({std::move(text_block)});
                for (const char* key : {"task", "wo_eos", "mask"}) {
                    if (const Json* v = py_get(msg, key)) user[key] = *v;
                }
                merged.push_back(std::move(user));
            }
        } else {
            merged.push_back(msg);
        }
    }
    return merged;
}

Status sort_tool_results_by_call_order(std::vector<Json*>& messages) {
    std::map<std::string, long> call_order;
    for (Json* msg_ptr : messages) {
        Json& msg = *msg_ptr;
        if (!msg.is_object()) return error("a message is not an object: ", py_repr(msg));
        const Json* tool_calls = py_get(msg, "tool_calls");
        const Json* blocks = py_get(msg, "content_blocks");
        if (role_is(msg, "assistant") && tool_calls != nullptr && py_truthy(*tool_calls)) {
            if (!tool_calls->is_array()) return error("tool_calls is not a list");
            call_order.clear();
            long index = 0;
            for (const Json& call : *tool_calls) {
                if (!call.is_object()) return error("a tool call is not an object");
                const Json* id = py_get(call, "id");
                Json fallback_id = "";
                if (id == nullptr || !py_truthy(*id)) {
                    // tc.get("function", {}).get("id", "")
                    const Json* function = py_get(call, "function");
                    if (function != nullptr && !function->is_object()) {
                        return error("a tool call's function is not an object");
                    }
                    const Json* function_id =
                        function != nullptr ? py_get(*function, "id") : nullptr;
                    id = function_id != nullptr ? function_id : &fallback_id;
                }
                if (py_truthy(*id)) {
                    const auto key = py_key(*id);
                    if (!key) return error("unhashable tool call id: ", py_repr(*id));
                    call_order[*key] = index;
                }
                ++index;
            }
        } else if (role_is(msg, "user") && blocks != nullptr && py_truthy(*blocks)) {
            if (!blocks->is_array()) return error("content_blocks is not a list");
            std::vector<Json> results;
            for (const Json& block : *blocks) {
                if (!block.is_object()) return error("a content block is not an object");
                if (const Json* type = py_get(block, "type"); type && py_is(*type, "tool_result")) {
                    results.push_back(block);
                }
            }
            if (results.size() > 1 && !call_order.empty()) {
                std::vector<std::pair<long, size_t>> keys;
                for (size_t i = 0; i < results.size(); ++i) {
                    static const Json kEmpty = "";
                    const auto key = py_key(get_or(results[i], "tool_use_id", kEmpty));
                    if (!key) return error("unhashable tool_call_id");
                    auto it = call_order.find(*key);
                    keys.emplace_back(it == call_order.end() ? 0 : it->second, i);
                }
                std::stable_sort(keys.begin(), keys.end(),
                                 [](const auto& a, const auto& b) { return a.first < b.first; });
                size_t next = 0;
                Json& mutable_blocks = msg["content_blocks"];
                for (Json& block : mutable_blocks) {
                    const Json* type = py_get(block, "type");
                    if (type != nullptr && py_is(*type, "tool_result")) {
                        block = results[keys[next++].second];
                    }
                }
            }
        }
    }
    return Status::ok();
}

long find_last_user_index(const Messages& messages) {
    for (long i = static_cast<long>(messages.size()) - 1; i >= 0; --i) {
        if (role_is(messages[i], "user") || role_is(messages[i], "developer")) return i;
    }
    return -1;
}

Expected<Messages> drop_thinking_messages(const Messages& messages) {
    const long last_user = find_last_user_index(messages);
    Messages result;
    for (long i = 0; i < static_cast<long>(messages.size()); ++i) {
        const Json& msg = messages[i];
        static const Json kNull;
        const Json& role = get_or(msg, "role", kNull);
        // `role in keep_roles` hashes the role: a list or dict role raises there.
        if (!py_key(role)) return error("unhashable role: ", py_repr(role));
        const bool keep = py_is(role, "user") || py_is(role, "system") || py_is(role, "tool") ||
                          py_is(role, "latest_reminder") || py_is(role, "direct_search_results");
        if (keep || i >= last_user) {
            result.push_back(msg);
        } else if (py_is(role, "assistant")) {
            Json copy = msg;
            copy.erase("reasoning_content");
            result.push_back(std::move(copy));
        }
    }
    return result;
}

}  // namespace dsv4::chat
