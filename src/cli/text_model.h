// A model folder's tokenizer for the text commands (dsv4::load_model_tokenizer), with its note
// about the installed V4 table printed on stderr.
#pragma once

#include <string>

#include "dsv4/status.h"
#include "dsv4/tokenizer.h"

namespace dsv4::cli {

Expected<Tokenizer> load_model_tokenizer(const std::string& model_dir, const std::string& path);

}  // namespace dsv4::cli
