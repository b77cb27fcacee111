// The fixed texts of DeepSeek-V4's prompt format (encoding_dsv4.py), already rendered where
// the reference fills a template with other constants.
#pragma once

#include <string_view>

namespace dsv4::chat {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";

inline constexpr std::string_view kToolCallsOpen = "<｜DSML｜tool_calls>";
// What the completion parser stops at: the block's opening without its ">" (as the reference).
inline constexpr std::string_view kToolCallsStart = "\n\n<｜DSML｜tool_calls";
inline constexpr std::string_view kToolCallsClose = "</｜DSML｜tool_calls>";
inline constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke";
inline constexpr std::string_view kInvokeClose = "</｜DSML｜invoke";
inline constexpr std::string_view kParameterOpen = "<｜DSML｜parameter";
inline constexpr std::string_view kParameterClose = "/｜DSML｜parameter";

inline constexpr std::string_view kResponseFormatIntro =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// The original V4 release: "max" (in thinking mode) adds this before the first message.
inline constexpr std::string_view kEffortAbsoluteMaximum =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n\n";

// Flash-0731: "high" adds kEffortAbsoluteMaximum, "max" this one, "low" nothing.
inline constexpr std::string_view kEffortBeyondMaximum =
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every "
    "causal chain to its root, and resolve the underlying cause rather than any surface "
    "symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple "
    "angles and are certain that no assumption remains unchecked and no error remains "
    "undiscovered.\n\n";

// The tools section; the tool schemas (one JSON line each) go between the two halves.
inline constexpr std::string_view kToolsBefore =
    "## Tools\n\n"
    "You have access to a set of tools to help answer the user's question. You can invoke "
    "tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other "
    "types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete "
    "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
inline constexpr std::string_view kToolsAfter =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
    "tool calls.\n";

}  // namespace dsv4::chat
