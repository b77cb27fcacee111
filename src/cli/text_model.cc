#include "cli/text_model.h"

#include "cli/commands.h"

#include <cstdio>
#include <filesystem>

namespace dsv4::cli {

Expected<Tokenizer> load_model_tokenizer(const std::string& model_dir, const std::string& path) {
    const std::string file = tokenizer_file(path.empty() ? model_dir : path);
    if (!std::filesystem::exists(file))
        return error(file, ": no tokenizer.json (pass --tokenizer PATH)");
    auto tok = Tokenizer::load(file);
    if (!tok) return tok.status();
    // A file that carries every V4 marker (at whatever ids: a small model renumbers them) is
    // used as it is; DeepSeek-V3's file lacks them, and gets V4's table (the BPE is the same).
    const auto table = deepseek_v4_added_tokens();
    int missing = 0;
    for (const AddedToken& t : table)
        if (t.content.find("place▁holder▁no▁") == std::string::npos && !tok->token_to_id(t.content))
            ++missing;
    if (missing > 0) {
        DSV4_RETURN_IF_ERROR(tok->set_added_tokens(table, AddedTokensMode::kReplace));
        std::fprintf(stderr,
                     "note: %s lacks %d of DeepSeek-V4's special tokens; installing V4's table\n",
                     file.c_str(), missing);
    }
    return tok;
}

}  // namespace dsv4::cli
