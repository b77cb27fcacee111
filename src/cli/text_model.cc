#include "cli/text_model.h"

#include <cstdio>

namespace dsv4::cli {

Expected<Tokenizer> load_model_tokenizer(const std::string& model_dir, const std::string& path) {
    std::string note;
    auto tok = dsv4::load_model_tokenizer(model_dir, path, &note);
    if (tok && !note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
    return tok;
}

}  // namespace dsv4::cli
