#include "server/prompt.h"

#include <string>

namespace dsv4::server {

std::optional<ApiError> check_vocab(std::span<const int64_t> ids, const char* param,
                                    int64_t vocab) {
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= vocab)
            return invalid_request(
                std::string(param) + "[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                    " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
                param);
    return std::nullopt;
}

ApiResult<std::vector<int32_t>> prompt_ids(const GenerationSpec& spec, const Tokenizer& tokenizer,
                                           const ModelInfo& info, bool add_bos) {
    std::vector<int32_t> ids;
    const char* param = spec.endpoint == Endpoint::kChat ? "messages" : "prompt";
    if (spec.endpoint == Endpoint::kChat) {
        auto text = chat::encode_messages(spec.messages, spec.encode);
        if (!text) return invalid_request("messages: " + text.status().message(), "messages");
        // The encoding writes BOS and the role / think / DSML markers as text.
        ids = tokenizer.encode(*text, /*parse_special=*/true);
    } else if (spec.prompt_is_ids) {
        if (auto e = check_vocab(spec.prompt_ids, "prompt", info.vocab_size)) return *e;
        ids.assign(spec.prompt_ids.begin(), spec.prompt_ids.end());
    } else {
        // Text prompts start with BOS, as DeepSeek's tokenizer adds it.
        if (add_bos) ids.push_back(info.bos_token_id);
        const auto rest = tokenizer.encode(spec.prompt_text, /*parse_special=*/true);
        ids.insert(ids.end(), rest.begin(), rest.end());
    }
    for (int32_t id : ids) {
        // Only a tokenizer larger than the model gets here (the server checks at start-up).
        if (id < 0 || id >= info.vocab_size)
            return invalid_request("the prompt has token id " + std::to_string(id) +
                                       ", outside the model's vocabulary",
                                   param);
    }
    return ids;
}

ApiResult<Prompt> build_prompt(const GenerationSpec& spec, const Tokenizer& tokenizer,
                               const ModelInfo& info) {
    Prompt p;
    const char* param = spec.endpoint == Endpoint::kChat ? "messages" : "prompt";
    auto ids = prompt_ids(spec, tokenizer, info);
    if (!ids) return ids.error();
    p.ids = std::move(*ids);
    if (auto e = check_vocab(spec.stop_token_ids, "stop_token_ids", info.vocab_size)) return *e;
    std::vector<int64_t> biased;
    for (const auto& [id, bias] : spec.logit_bias) biased.push_back(id);
    if (auto e = check_vocab(biased, "logit_bias", info.vocab_size)) return *e;
    const int64_t n = static_cast<int64_t>(p.ids.size());
    ApiError too_long = invalid_request("", param);
    too_long.code = "context_length_exceeded";
    if (n >= info.max_context) {
        too_long.message = "the prompt is " + std::to_string(n) + " tokens; the context holds " +
                           std::to_string(info.max_context) + " (prompt and completion together)";
        return too_long;
    }
    p.max_tokens = spec.max_tokens > 0 ? spec.max_tokens : static_cast<int>(info.max_context - n);
    if (n + p.max_tokens > info.max_context) {
        too_long.message = "the prompt (" + std::to_string(n) + " tokens) plus max_tokens (" +
                           std::to_string(p.max_tokens) + ") exceeds the context of " +
                           std::to_string(info.max_context) + " tokens";
        too_long.param = "max_tokens";
        return too_long;
    }
    if (spec.rules.min_tokens > p.max_tokens)
        return invalid_request("min_tokens (" + std::to_string(spec.rules.min_tokens) +
                                   ") exceeds max_tokens (" + std::to_string(p.max_tokens) + ")",
                               "min_tokens");
    return p;
}

}  // namespace dsv4::server
