// A model folder's tokenizer for the text commands: tokenizer.json from the folder (or
// --tokenizer), with DeepSeek-V4's special-token table installed when the file carries the
// older V3 table (the BPE is the same; only <think> and friends moved).
#pragma once

#include <string>

#include "dsv4/status.h"
#include "dsv4/tokenizer.h"

namespace dsv4::cli {

Expected<Tokenizer> load_model_tokenizer(const std::string& model_dir, const std::string& path);

}  // namespace dsv4::cli
