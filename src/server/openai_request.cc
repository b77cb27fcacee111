#include "server/openai_request.h"

#include <charconv>
#include <cmath>
#include <optional>

namespace dsv4::server {

namespace {

using chat::Json;

// Reads typed fields of one JSON object; the first problem is kept (later reads are no-ops).
// A field that is absent or null counts as not given, as OpenAI's API treats it.
class FieldReader {
  public:
    FieldReader(const Json& object, std::string prefix) : o_(object), prefix_(std::move(prefix)) {}

    const Json* get(const char* key) const {
        auto it = o_.find(key);
        return it == o_.end() || it->is_null() ? nullptr : &*it;
    }
    bool ok() const { return !error_.has_value(); }
    const ApiError& error() const { return *error_; }
    void fail(const char* key, const std::string& message) {
        if (!error_) error_ = invalid_request(name(key) + " " + message, name(key));
    }
    std::string name(const char* key) const { return prefix_ + key; }

    void number(const char* key, double lo, double hi, float& out) {
        const Json* v = get(key);
        if (v == nullptr || !ok()) return;
        if (!v->is_number() || !std::isfinite(v->get<double>()))
            return fail(key, "must be a number");
        const double x = v->get<double>();
        if (x < lo || x > hi) return fail(key, range_text(lo, hi));
        out = static_cast<float>(x);
    }
    void integer(const char* key, int64_t lo, int64_t hi, int64_t& out) {
        const Json* v = get(key);
        if (v == nullptr || !ok()) return;
        if (!v->is_number_integer()) return fail(key, "must be an integer");
        if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
            return fail(key, range_text(static_cast<double>(lo), static_cast<double>(hi)));
        const int64_t x = v->get<int64_t>();
        if (x < lo || x > hi)
            return fail(key, range_text(static_cast<double>(lo), static_cast<double>(hi)));
        out = x;
    }
    void boolean(const char* key, bool& out) {
        const Json* v = get(key);
        if (v == nullptr || !ok()) return;
        if (!v->is_boolean()) return fail(key, "must be a boolean");
        out = v->get<bool>();
    }
    void string(const char* key, std::string& out) {
        const Json* v = get(key);
        if (v == nullptr || !ok()) return;
        if (!v->is_string()) return fail(key, "must be a string");
        out = v->get<std::string>();
    }

  private:
    static std::string range_text(double lo, double hi) {
        auto fmt = [](double x) {
            std::string s = std::to_string(x);
            s.erase(s.find_last_not_of('0') + 1);
            if (s.back() == '.') s.pop_back();
            return s;
        };
        return "must be between " + fmt(lo) + " and " + fmt(hi);
    }

    const Json& o_;
    std::string prefix_;
    std::optional<ApiError> error_;
};

// OpenAI content: a string, or a list of {"type": "text", "text": ...} parts (joined).
std::optional<std::string> content_text(const Json& content, std::string& problem) {
    if (content.is_null()) return std::string();
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) {
        problem = "must be a string or a list of text parts";
        return std::nullopt;
    }
    std::string text;
    for (const Json& part : content) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
            !part.contains("text") || !part["text"].is_string()) {
            problem = "parts must be {\"type\": \"text\", \"text\": string} (no images or audio)";
            return std::nullopt;
        }
        text += part["text"].get<std::string>();
    }
    return text;
}

std::optional<ApiError> check_tool_calls(const Json& calls, const std::string& where) {
    if (!calls.is_array()) return invalid_request(where + " must be a list", where);
    for (size_t i = 0; i < calls.size(); ++i) {
        const Json& c = calls[i];
        const std::string at = where + "[" + std::to_string(i) + "]";
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
            return invalid_request(at + " must be {\"type\": \"function\", \"function\": {...}}",
                                   at);
        const Json& f = c["function"];
        if (!f.contains("name") || !f["name"].is_string())
            return invalid_request(at + ".function.name must be a string", at);
        if (!f.contains("arguments") || !f["arguments"].is_string())
            return invalid_request(at + ".function.arguments must be a JSON string", at);
        if (c.contains("id") && !c["id"].is_string() && !c["id"].is_null())
            return invalid_request(at + ".id must be a string", at);
    }
    return std::nullopt;
}

// One message, rebuilt with only the keys the encoder should see (the encoder also reads
// DeepSeek-internal keys such as "task" or "mask", which a client must not set).
ApiResult<Json> read_message(const Json& m, size_t index) {
    const std::string at = "messages[" + std::to_string(index) + "]";
    if (!m.is_object()) return invalid_request(at + " must be an object", at);
    if (!m.contains("role") || !m["role"].is_string())
        return invalid_request(at + ".role must be a string", at + ".role");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" &&
        role != "tool") {
        return invalid_request(
            at + ".role '" + role + "' is not one of system, developer, user, assistant, tool",
            at + ".role");
    }
    Json out = Json::object();
    out["role"] = role;
    std::string problem;
    const Json content = m.contains("content") ? m["content"] : Json();
    const auto text = content_text(content, problem);
    if (!text) return invalid_request(at + ".content " + problem, at + ".content");
    if (content.is_null() && role != "assistant")
        return invalid_request(at + ".content is required for role " + role, at + ".content");
    out["content"] = *text;
    if (role == "assistant") {
        if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
            if (auto e = check_tool_calls(m["tool_calls"], at + ".tool_calls")) return *e;
            out["tool_calls"] = m["tool_calls"];
        }
        if (m.contains("reasoning_content") && !m["reasoning_content"].is_null()) {
            if (!m["reasoning_content"].is_string())
                return invalid_request(at + ".reasoning_content must be a string",
                                       at + ".reasoning_content");
            out["reasoning_content"] = m["reasoning_content"];
        }
    }
    if (role == "tool") {
        if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
            return invalid_request(at + ".tool_call_id must be a string", at + ".tool_call_id");
        out["tool_call_id"] = m["tool_call_id"];
    }
    return out;
}

std::optional<ApiError> check_tools(const Json& tools) {
    if (!tools.is_array()) return invalid_request("tools must be a list", "tools");
    for (size_t i = 0; i < tools.size(); ++i) {
        const Json& t = tools[i];
        const std::string at = "tools[" + std::to_string(i) + "]";
        if (!t.is_object() || t.value("type", Json("function")) != "function" ||
            !t.contains("function") || !t["function"].is_object())
            return invalid_request(at + " must be {\"type\": \"function\", \"function\": {...}}",
                                   at);
        const Json& f = t["function"];
        if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
            return invalid_request(at + ".function.name must be a non-empty string", at);
        if (f.contains("parameters") && !f["parameters"].is_object() && !f["parameters"].is_null())
            return invalid_request(at + ".function.parameters must be an object", at);
    }
    return std::nullopt;
}

// Thinking mode: chat_template_kwargs {"thinking" | "enable_thinking": bool}, or DeepSeek's
// {"thinking": {"type": "enabled" | "disabled"}}; a reasoning_effort other than "none" turns it
// on unless it was turned off explicitly.
std::optional<ApiError> read_thinking(const Json& body, chat::EncodeOptions& encode) {
    std::optional<bool> thinking;
    if (const auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
        if (!it->is_object())
            return invalid_request("chat_template_kwargs must be an object",
                                   "chat_template_kwargs");
        for (const char* key : {"thinking", "enable_thinking"}) {
            if (!it->contains(key) || (*it)[key].is_null()) continue;
            if (!(*it)[key].is_boolean())
                return invalid_request(
                    std::string("chat_template_kwargs.") + key + " must be a boolean",
                    "chat_template_kwargs");
            thinking = (*it)[key].get<bool>();
        }
    }
    if (const auto it = body.find("thinking"); it != body.end() && !it->is_null()) {
        const Json type = it->is_object() ? it->value("type", Json()) : Json();
        if (type != "enabled" && type != "disabled")
            return invalid_request("thinking must be {\"type\": \"enabled\" | \"disabled\"}",
                                   "thinking");
        thinking = type == "enabled";
    }
    std::string effort;
    FieldReader r(body, "");
    r.string("reasoning_effort", effort);
    if (!r.ok()) return r.error();
    if (!effort.empty()) {
        if (effort == "high") {
            encode.reasoning_effort = chat::ReasoningEffort::kHigh;
        } else if (effort == "max" || effort == "xhigh") {
            encode.reasoning_effort = chat::ReasoningEffort::kMax;
        } else if (effort != "none" && effort != "minimal" && effort != "low" &&
                   effort != "medium") {
            return invalid_request(
                "reasoning_effort must be one of none, minimal, low, medium, high, max",
                "reasoning_effort");
        }
        if (!thinking) thinking = effort != "none";
    }
    encode.thinking_mode =
        thinking.value_or(false) ? chat::ThinkingMode::kThinking : chat::ThinkingMode::kChat;
    return std::nullopt;
}

std::optional<ApiError> read_chat(const Json& body, GenerationSpec& spec) {
    const auto mit = body.find("messages");
    if (mit == body.end() || mit->is_null())
        return invalid_request("messages is required", "messages");
    if (!mit->is_array() || mit->empty())
        return invalid_request("messages must be a non-empty list", "messages");
    for (size_t i = 0; i < mit->size(); ++i) {
        auto m = read_message((*mit)[i], i);
        if (!m) return m.error();
        spec.messages.push_back(std::move(*m));
    }
    const auto tools = body.find("tools");
    const bool has_tools = tools != body.end() && !tools->is_null();
    if (has_tools) {
        if (auto e = check_tools(*tools)) return *e;
    }
    bool use_tools = has_tools && !tools->empty();
    if (const auto tc = body.find("tool_choice"); tc != body.end() && !tc->is_null()) {
        if (*tc == "none") {
            use_tools = false;
        } else if (*tc != "auto") {
            return invalid_request(
                "tool_choice must be \"auto\" or \"none\" (the output is not constrained, so a "
                "required or named tool cannot be guaranteed)",
                "tool_choice");
        }
    }
    if (use_tools) {
        // The V4 encoding lists tools in the system prompt.
        size_t s = 0;
        while (s < spec.messages.size() && spec.messages[s]["role"] != "system") ++s;
        if (s == spec.messages.size()) {
            spec.messages.insert(spec.messages.begin(), Json{{"role", "system"}, {"content", ""}});
            s = 0;
        }
        spec.messages[s]["tools"] = *tools;
    }
    if (const auto rf = body.find("response_format"); rf != body.end() && !rf->is_null()) {
        if (!rf->is_object() || rf->value("type", Json()) != "text")
            return invalid_request(
                "response_format other than {\"type\": \"text\"} is not supported",
                "response_format");
    }
    return read_thinking(body, spec.encode);
}

std::optional<ApiError> read_completion_prompt(const Json& body, GenerationSpec& spec) {
    const auto it = body.find("prompt");
    if (it == body.end() || it->is_null()) return invalid_request("prompt is required", "prompt");
    Json p = *it;
    // A list holding one prompt (text or ids) is that prompt; several are refused (n = 1).
    if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = Json(p[0]);
    if (p.is_string()) {
        spec.prompt_text = p.get<std::string>();
        return std::nullopt;
    }
    if (p.is_array() && !p.empty()) {
        if (!read_token_ids(p, spec.prompt_ids))
            return invalid_request(
                "prompt must be a string, a list of token ids, or a list with one of these "
                "(one prompt per request)",
                "prompt");
        spec.prompt_is_ids = true;
        return std::nullopt;
    }
    return invalid_request("prompt must be a string or a non-empty list of token ids", "prompt");
}

// The logits rules (LogitsRules): OpenAI's presence_penalty, frequency_penalty and logit_bias
// ({"token id": bias}), vLLM's repetition_penalty and min_tokens.
std::optional<ApiError> read_rules(const Json& body, GenerationSpec& spec) {
    FieldReader r(body, "");
    LogitsRules& u = spec.rules;
    r.number("presence_penalty", -2, 2, u.presence_penalty);
    r.number("frequency_penalty", -2, 2, u.frequency_penalty);
    r.number("repetition_penalty", 0, 100, u.repetition_penalty);
    if (r.ok() && u.repetition_penalty <= 0) r.fail("repetition_penalty", "must be greater than 0");
    int64_t min_tokens = 0;
    r.integer("min_tokens", 0, INT32_MAX, min_tokens);
    u.min_tokens = static_cast<int>(min_tokens);
    if (!r.ok()) return r.error();
    const Json* bias = r.get("logit_bias");
    if (bias == nullptr || bias->is_null()) return std::nullopt;
    if (!bias->is_object() || bias->size() > static_cast<size_t>(kMaxLogitBias))
        return invalid_request("logit_bias must be an object of at most " +
                                   std::to_string(kMaxLogitBias) + " token ids and biases",
                               "logit_bias");
    for (const auto& [key, value] : bias->items()) {
        int64_t id = 0;
        const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
        if (ec != std::errc() || end != key.data() + key.size())
            return invalid_request("logit_bias keys must be token ids, got \"" + key + "\"",
                                   "logit_bias");
        if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100))
            return invalid_request("logit_bias values must be numbers in [-100, 100]",
                                   "logit_bias");
        spec.logit_bias.emplace_back(id, value.get<float>());
    }
    return std::nullopt;
}

// Fields that would change the output in ways this server does not implement.
std::optional<ApiError> refuse_unsupported(const Json& body) {
    FieldReader r(body, "");
    int64_t best_of = 1;
    r.integer("best_of", 1, 1, best_of);
    if (!r.ok()) return invalid_request("best_of must be 1", "best_of");
    if (const Json* v = r.get("suffix"); v != nullptr && !(v->is_string() && v->empty()))
        return invalid_request("suffix is not supported", "suffix");
    return std::nullopt;
}

std::optional<ApiError> read_common(const Json& body, GenerationSpec& spec) {
    FieldReader r(body, "");
    const Json* model = r.get("model");
    if (model == nullptr) return invalid_request("model is required", "model");
    r.string("model", spec.model);
    int64_t n = 1;
    r.integer("n", 1, kMaxChoices, n);
    spec.n = static_cast<int>(n);
    int64_t max_tokens = 0;
    r.integer("max_tokens", 1, INT32_MAX, max_tokens);
    r.integer("max_completion_tokens", 1, INT32_MAX, max_tokens);
    spec.max_tokens = static_cast<int>(max_tokens);
    r.number("temperature", 0, 2, spec.sampling.temperature);
    r.number("top_p", 0, 1, spec.sampling.top_p);
    if (r.ok() && r.get("top_p") != nullptr && spec.sampling.top_p <= 0)
        r.fail("top_p", "must be greater than 0");
    int64_t top_k = 0;
    r.integer("top_k", -1, INT32_MAX, top_k);  // -1: off, as in vLLM
    spec.sampling.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
    int64_t seed = 0;
    r.integer("seed", INT64_MIN, INT64_MAX, seed);
    spec.sampling.seed = static_cast<uint64_t>(seed);
    r.boolean("stream", spec.stream);
    if (!r.ok()) return r.error();
    if (const Json* so = r.get("stream_options")) {
        if (!so->is_object())
            return invalid_request("stream_options must be an object", "stream_options");
        FieldReader sr(*so, "stream_options.");
        sr.boolean("include_usage", spec.include_usage);
        sr.boolean("continuous_usage_stats", spec.continuous_usage);
        if (!sr.ok()) return sr.error();
    }
    if (const Json* stop = r.get("stop")) {
        const Json list = stop->is_string() ? Json::array({*stop}) : *stop;
        if (!list.is_array() || list.size() > 4)
            return invalid_request("stop must be a string or a list of at most 4 strings", "stop");
        for (const Json& s : list) {
            if (!s.is_string() || s.get<std::string>().empty())
                return invalid_request("stop must hold non-empty strings", "stop");
            spec.stop.push_back(s.get<std::string>());
        }
    }
    r.boolean("include_stop_str_in_output", spec.include_stop_str_in_output);
    r.boolean("ignore_eos", spec.ignore_eos);
    if (!r.ok()) return r.error();
    if (const Json* ids = r.get("stop_token_ids"); ids != nullptr && !ids->is_null()) {
        if (!ids->is_array() || ids->size() > static_cast<size_t>(kMaxStopTokenIds) ||
            !read_token_ids(*ids, spec.stop_token_ids))
            return invalid_request("stop_token_ids must be a list of at most " +
                                       std::to_string(kMaxStopTokenIds) + " token ids",
                                   "stop_token_ids");
    }
    if (auto e = read_rules(body, spec)) return e;
    return refuse_unsupported(body);
}

// echo: completions only, and not with logprobs (the prompt's own log-probabilities, which
// OpenAI's echo returns with them, are not computed).
std::optional<ApiError> read_echo(const Json& body, GenerationSpec& spec) {
    FieldReader r(body, "");
    r.boolean("echo", spec.echo);
    if (!r.ok()) return r.error();
    if (!spec.echo) return std::nullopt;
    if (spec.endpoint == Endpoint::kChat)
        return invalid_request("echo is not supported on chat completions", "echo");
    if (spec.logprobs >= 0)
        return invalid_request(
            "echo with logprobs is not supported (the prompt's log-probabilities are not "
            "computed)",
            "echo");
    return std::nullopt;
}

// Log-probabilities (GenerationSpec::logprobs). Chat: `logprobs` true, with `top_logprobs`
// alternatives (0-20; only with logprobs true, as OpenAI requires). Completions: `logprobs`
// the number of alternatives (0-20; OpenAI's legacy API allows 5, vLLM 20).
std::optional<ApiError> read_logprobs(const Json& body, Endpoint endpoint, GenerationSpec& spec) {
    FieldReader r(body, "");
    if (endpoint == Endpoint::kChat) {
        bool on = false;
        int64_t top = 0;
        r.boolean("logprobs", on);
        r.integer("top_logprobs", 0, kMaxTopLogprobs, top);
        if (!r.ok()) return r.error();
        if (!on && r.get("top_logprobs") != nullptr)
            return invalid_request("top_logprobs needs logprobs set to true", "top_logprobs");
        spec.logprobs = on ? static_cast<int>(top) : -1;
    } else {
        int64_t top = -1;
        r.integer("logprobs", 0, kMaxTopLogprobs, top);
        if (!r.ok()) return r.error();
        spec.logprobs = static_cast<int>(top);
    }
    return std::nullopt;
}

}  // namespace

bool read_token_ids(const Json& list, std::vector<int64_t>& out) {
    if (!list.is_array()) return false;
    for (const Json& id : list) {
        if (!id.is_number_integer()) return false;
        out.push_back(id.is_number_unsigned() && id.get<uint64_t>() > INT64_MAX
                          ? INT64_MAX
                          : id.get<int64_t>());
    }
    return true;
}

ApiResult<GenerationSpec> parse_generation_request(Endpoint endpoint, std::string_view body,
                                                   chat::EncodingVersion encoding) {
    auto parsed = chat::parse_json(body);
    if (!parsed) return invalid_request("the body is not valid JSON: " + parsed.status().message());
    if (!parsed->is_object()) return invalid_request("the body must be a JSON object");
    GenerationSpec spec;
    spec.endpoint = endpoint;
    spec.encode.version = encoding;
    if (auto e = read_common(*parsed, spec)) return *e;
    if (auto e = read_logprobs(*parsed, endpoint, spec)) return *e;
    if (auto e = read_echo(*parsed, spec)) return *e;
    if (endpoint == Endpoint::kChat) {
        if (auto e = read_chat(*parsed, spec)) return *e;
    } else {
        if (auto e = read_completion_prompt(*parsed, spec)) return *e;
    }
    return spec;
}

}  // namespace dsv4::server
