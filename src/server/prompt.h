// A validated request's prompt as token ids: chat messages through the V4 encoding and the
// tokenizer, completion text after BOS, or the ids given; checked against the vocabulary (the
// stop_token_ids too) and the context (prompt + max_tokens must fit, as OpenAI's
// context_length_exceeded).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "dsv4/engine.h"
#include "dsv4/tokenizer.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace dsv4::server {

struct Prompt {
    std::vector<int32_t> ids;
    int max_tokens = 0;  // resolved: the request's, or what the context leaves
};

ApiResult<Prompt> build_prompt(const GenerationSpec& spec, const Tokenizer& tokenizer,
                               const ModelInfo& info);

// A 400 naming `param`[i] for the first id outside [0, vocab), if any.
std::optional<ApiError> check_vocab(std::span<const int64_t> ids, const char* param, int64_t vocab);

// The prompt's ids alone, checked against the vocabulary but not the context (/tokenize).
// add_bos: a completion text prompt gets BOS in front (false: the text's tokens only).
ApiResult<std::vector<int32_t>> prompt_ids(const GenerationSpec& spec, const Tokenizer& tokenizer,
                                           const ModelInfo& info, bool add_bos = true);

}  // namespace dsv4::server
