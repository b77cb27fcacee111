#include "chat/dsml.h"

#include "chat/py_value.h"
#include "chat/templates.h"

namespace dsv4::chat {

Expected<std::vector<Json>> tools_from_openai_format(const Json& tools) {
    if (!tools.is_array()) return error("tools must be a list, not ", tools.type_name());
    std::vector<Json> functions;
    for (const Json& tool : tools) {
        const Json* function = py_get(tool, "function");
        if (function == nullptr) return error("a tool has no \"function\": ", py_repr(tool));
        functions.push_back(*function);
    }
    return functions;
}

Expected<std::vector<ToolCall>> tool_calls_from_openai_format(const Json& tool_calls) {
    if (!tool_calls.is_array()) {
        return error("tool_calls must be a list, not ", tool_calls.type_name());
    }
    std::vector<ToolCall> calls;
    for (const Json& call : tool_calls) {
        const Json* function = py_get(call, "function");
        if (function == nullptr) return error("a tool call has no \"function\": ", py_repr(call));
        const Json* name = py_get(*function, "name");
        const Json* arguments = py_get(*function, "arguments");
        if (name == nullptr || arguments == nullptr) {
            return error("a tool call function lacks \"name\" or \"arguments\": ",
                         py_repr(*function));
        }
        calls.push_back(ToolCall{*name, *arguments});
    }
    return calls;
}

std::string render_tools(const std::vector<Json>& functions) {
    std::string out(kToolsBefore);
    for (size_t i = 0; i < functions.size(); ++i) {
        if (i > 0) out += '\n';
        out += py_json_dumps(functions[i]);
    }
    out += kToolsAfter;
    return out;
}

Expected<std::string> encode_arguments_to_dsml(const ToolCall& call) {
    Json arguments;
    bool decoded = false;
    if (call.arguments.is_string()) {
        auto parsed = parse_json(call.arguments.get_ref<const std::string&>());
        if (parsed) {
            arguments = std::move(parsed).value();
            decoded = true;
        }
    }
    if (!decoded) {
        arguments = Json::object();
        arguments["arguments"] = call.arguments;
    }
    if (!arguments.is_object()) {
        return error("tool call arguments decode to ", py_repr(arguments), ", not an object");
    }
    std::string out;
    bool first = true;
    for (const auto& [key, value] : arguments.items()) {
        if (!first) out += '\n';
        first = false;
        const bool is_string = value.is_string();
        out += std::string(kParameterOpen) + " name=\"" + key + "\" string=\"" +
               (is_string ? "true" : "false") + "\">";
        out += is_string ? value.get<std::string>() : py_json_dumps(value);
        out += "<" + std::string(kParameterClose) + ">";
    }
    return out;
}

Expected<std::string> render_tool_calls(const std::vector<ToolCall>& calls) {
    std::string out = "\n\n" + std::string(kToolCallsOpen) + "\n";
    for (size_t i = 0; i < calls.size(); ++i) {
        if (i > 0) out += '\n';
        DSV4_ASSIGN_OR_RETURN(std::string parameters, encode_arguments_to_dsml(calls[i]));
        out += std::string(kInvokeOpen) + " name=\"" + py_str(calls[i].name) + "\">\n" +
               parameters + "\n" + std::string(kInvokeClose) + ">";
    }
    out += "\n" + std::string(kToolCallsClose);
    return out;
}

}  // namespace dsv4::chat
