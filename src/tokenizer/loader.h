// Reads tokenizer.json into the tokenizer's parts. Only what DeepSeek's byte-level BPE needs
// is accepted; everything else is rejected with an error that names the component, so a
// tokenizer that would silently encode differently from HF never loads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dsv4/status.h"
#include "dsv4/tokenizer.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"

namespace dsv4::tok {

struct TokenizerParts {
    std::unique_ptr<Bpe> bpe;
    PreTokenizer pre_tokenizer;
    std::vector<AddedToken> added_tokens;
};

Expected<TokenizerParts> parse_tokenizer_json(std::string_view text, const std::string& label);

}  // namespace dsv4::tok
