// DeepSeek-V4 chat encoding: messages -> prompt text, and a generated assistant turn -> message.
//
// A port of DeepSeek's reference encoder (encoding/encoding_dsv4.py in the model repo) that
// reproduces its output byte for byte, quirks included, and rejects what it rejects (see
// docs/tokenizer.md). The prompt is plain text: tokenize it with parse_special=true so the
// role / think / DSML markers become their added tokens.
//
// Messages are nlohmann::ordered_json because key order is visible in the prompt (tool schemas
// and arguments are rendered as JSON in the order given). parse_json() reads JSON the way
// Python's json.loads does (exact integers of any size, NaN/Infinity, first position / last
// value for repeated keys); json from other parsers works too, within what it can represent.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "dsv4/status.h"

namespace dsv4::chat {

using Json = nlohmann::ordered_json;

// Which release's encoder to follow. Only the reasoning-effort handling differs.
enum class EncodingVersion {
    kV4,           // the original V4 release: effort null / "high" (same text) / "max"
    kV4Flash0731,  // DeepSeek-V4-Flash-0731: "low" (= null) / "high" / "max", new texts
};

// "v4" and "v4-flash-0731" (also "0731"), for a command-line flag or a checkpoint setting.
std::optional<EncodingVersion> parse_encoding_version(std::string_view name);
std::string_view encoding_version_name(EncodingVersion version);

enum class ThinkingMode { kChat, kThinking };

enum class ReasoningEffort {
    kDefault,  // null: no extra paragraph (also "low" in 0731)
    kLow,      // 0731 only; rejected by kV4, as by its reference
    kHigh,     // kV4: same as kDefault; 0731: the "Absolute maximum" paragraph
    kMax,      // kV4: the "Absolute maximum" paragraph; 0731: the "Beyond maximum" one
};

struct EncodeOptions {
    ThinkingMode thinking_mode = ThinkingMode::kThinking;
    ReasoningEffort reasoning_effort = ReasoningEffort::kDefault;
    // In thinking mode without tools: drop the reasoning of turns before the last user turn.
    bool drop_thinking = true;
    bool add_default_bos_token = true;  // BOS only when there is no context
    // Earlier messages already in the KV cache: they steer the rendering, are not emitted.
    Json context = Json::array();
    EncodingVersion version = EncodingVersion::kV4;
};

// encode_messages(messages, ...) of the reference. `messages` is a list of message objects
// (roles system, developer, user, assistant, tool, latest_reminder; tools in OpenAI format on
// system/developer messages). Errors where the reference raises.
Expected<std::string> encode_messages(const Json& messages, const EncodeOptions& options);

// The same call with the reference's keyword arguments as a JSON object: thinking_mode
// (required), context, drop_thinking, add_default_bos_token, reasoning_effort. Values keep
// Python's meaning: truthiness for the flags, and thinking_mode / reasoning_effort are only
// validated when a message is rendered. This is what `dsv4 chat-encode` reads.
Expected<std::string> encode_messages_kwargs(const Json& messages, const Json& kwargs,
                                             EncodingVersion version = EncodingVersion::kV4);

// parse_message_from_completion_text(text, thinking_mode) of the reference: everything the
// model generated after the prompt (EOS included) -> {"role": "assistant", "content",
// "reasoning_content", "tool_calls": [{"type": "function", "function": {"name",
// "arguments"}}]} where arguments is a JSON string. Errors where the reference raises.
Expected<Json> parse_completion(std::string_view text, ThinkingMode thinking_mode);

// JSON text -> value, as Python's json.loads: integers beyond 64 bits are kept exactly (as a
// binary value of subtype kBigIntSubtype holding the decimal digits), NaN / Infinity /
// -Infinity are accepted, repeated keys keep the first position and the last value.
Expected<Json> parse_json(std::string_view text);
// Value -> JSON text, as Python's json.dumps(value, ensure_ascii=False): separators ", " and
// ": ", floats as Python's repr (1e-07, 100000.0, -0.0, Infinity), non-ASCII kept raw.
std::string dump_json(const Json& value);
inline constexpr std::uint64_t kBigIntSubtype = 0x49;

}  // namespace dsv4::chat
