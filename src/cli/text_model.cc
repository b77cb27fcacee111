#include "cli/text_model.h"

#include <cstdio>
#include <filesystem>

namespace dsv4::cli {

Expected<Tokenizer> load_model_tokenizer(const std::string& model_dir, const std::string& path) {
    const std::string file =
        path.empty() ? (std::filesystem::path(model_dir) / "tokenizer.json").string() : path;
    if (!std::filesystem::exists(file))
        return error(file, ": no tokenizer.json (pass --tokenizer PATH)");
    auto tok = Tokenizer::load(file);
    if (!tok) return tok.status();
    // V4 has <think> at 128821; DeepSeek-V3's table has it elsewhere or not at all.
    if (tok->token_to_id("<think>") != 128821) {
        const auto table = deepseek_v4_added_tokens();
        DSV4_RETURN_IF_ERROR(tok->set_added_tokens(table, AddedTokensMode::kReplace));
        std::fprintf(stderr, "note: %s lacks DeepSeek-V4's special tokens; installing V4's table\n",
                     file.c_str());
    }
    return tok;
}

}  // namespace dsv4::cli
