// DSML, V4's tool-call markup, and the tools section of the system prompt.
#pragma once

#include <string>
#include <vector>

#include "dsv4/chat.h"

namespace dsv4::chat {

struct ToolCall {
    Json name;
    Json arguments;
};

// tools_from_openai_format: [{"type": "function", "function": {...}}] -> the function values.
Expected<std::vector<Json>> tools_from_openai_format(const Json& tools);

// tool_calls_from_openai_format: [{"function": {"name", "arguments"}}] -> name + arguments.
Expected<std::vector<ToolCall>> tool_calls_from_openai_format(const Json& tool_calls);

// The tools section: template + one json.dumps line per function.
std::string render_tools(const std::vector<Json>& functions);

// encode_arguments_to_dsml: one <｜DSML｜parameter ...> line per argument. Arguments that are
// a JSON string are decoded and their values re-encoded (strings raw, string="true"; others
// as JSON, string="false"); undecodable ones become one string parameter "arguments", and a
// non-string arguments value one non-string parameter "arguments". Decoding to anything but
// an object is an error, as in the reference.
Expected<std::string> encode_arguments_to_dsml(const ToolCall& call);

// The whole block after an assistant's content: "\n\n<｜DSML｜tool_calls>\n...".
Expected<std::string> render_tool_calls(const std::vector<ToolCall>& calls);

}  // namespace dsv4::chat
