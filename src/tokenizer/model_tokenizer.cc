// load_model_tokenizer: a model folder's tokenizer.json with DeepSeek-V4's chat markers.
#include <filesystem>

#include "dsv4/tokenizer.h"

namespace dsv4 {

namespace {

// Whether the file's own table already has every V4 marker and control token (by content;
// the place holders are never produced by the chat encoding, so they may be absent).
bool has_v4_markers(const Tokenizer& tok) {
    for (const AddedToken& t : deepseek_v4_added_tokens()) {
        if (t.content.starts_with("<｜place▁holder▁no▁")) continue;
        if (!tok.token_to_id(t.content)) return false;
    }
    return true;
}

}  // namespace

std::string tokenizer_json_path(const std::string& path_or_dir) {
    std::filesystem::path p(path_or_dir);
    if (std::filesystem::is_directory(p)) p /= "tokenizer.json";
    return p.string();
}

Expected<Tokenizer> load_model_tokenizer(const std::string& model_dir, const std::string& path,
                                         std::string* note) {
    // `path` may be the file or a folder holding it; empty: the model folder's.
    if (path.empty() && model_dir.empty())  // a synthetic model has no folder
        return error("no tokenizer.json for a model without a folder: pass --tokenizer PATH");
    const std::string file = tokenizer_json_path(path.empty() ? model_dir : path);
    if (!std::filesystem::exists(file))
        return error(file, ": no tokenizer.json (pass --tokenizer PATH)");
    auto tok = Tokenizer::load(file);
    if (!tok) return tok.status();
    if (!has_v4_markers(*tok)) {
        const auto table = deepseek_v4_added_tokens();
        DSV4_RETURN_IF_ERROR(tok->set_added_tokens(table, AddedTokensMode::kReplace));
        if (note != nullptr)
            *note = file + " lacks DeepSeek-V4's special tokens; installing V4's table";
    }
    return tok;
}

}  // namespace dsv4
