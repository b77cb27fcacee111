// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (the DeepSeek V3/V4 family).
//
// encode() reproduces HF `tokenizers` with add_special_tokens=False: added tokens are cut out
// of the text first, the rest goes through the Split regexes and the BPE merges. Nothing is
// ever added (no BOS): the chat encoding writes BOS into the prompt text itself.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dsv4/status.h"

namespace dsv4 {

// One entry of tokenizer.json's "added_tokens" (the flags mean what they mean in HF).
struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool special = true;       // not matched when encode() is called with parse_special=false
    bool normalized = false;   // matched after normalization (a second pass, as in HF)
    bool lstrip = false;       // the match swallows whitespace on its left
    bool rstrip = false;       // ... and on its right
    bool single_word = false;  // only matched when not glued to word characters
};

enum class AddedTokensMode {
    kReplace,  // the given table becomes the whole added-token table
    kOverlay,  // entries with the same id or the same content are replaced, others kept
};

class Tokenizer {
  public:
    // Reads and validates tokenizer.json. Anything this implementation does not handle
    // (another model type, normalizer, pre-tokenizer or decoder) is an error that names it.
    static Expected<Tokenizer> load(const std::filesystem::path& path);
    // Same, from the JSON text (`label` names it in errors).
    static Expected<Tokenizer> from_json(std::string_view json_text,
                                         const std::string& label = "tokenizer.json");

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // Text to ids. parse_special=true matches every added token in the text (what a chat
    // prompt needs). parse_special=false leaves tokens flagged `special` as plain text, like
    // HF's split_special_tokens (non-special added tokens still match). Never fails: bytes that
    // are not valid UTF-8 are encoded one byte-level token each, so decode_bytes() returns
    // them unchanged. Thread-safe.
    std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;

    // Ids to text as HF does it: added tokens verbatim, the rest byte-level decoded, and byte
    // sequences that are not UTF-8 replaced by U+FFFD. Ids that name no token are skipped.
    std::string decode(std::span<const int32_t> ids) const;
    // Ids to the exact bytes (no UTF-8 repair); for streaming and round-trip checks.
    std::string decode_bytes(std::span<const int32_t> ids) const;

    // The token string as stored in tokenizer.json (byte-level alphabet for vocab entries).
    std::optional<int32_t> token_to_id(std::string_view token) const;
    std::optional<std::string> id_to_token(int32_t id) const;
    // The bytes one id decodes to (empty for an unknown id).
    std::string_view token_bytes(int32_t id) const;
    // Largest id in the vocabulary or the added tokens, plus one.
    int32_t vocab_size() const;

    // Installs an added-token table, e.g. deepseek_v4_added_tokens() over DeepSeek's V3
    // tokenizer.json. Errors (table unchanged): empty content, negative id, two entries with
    // one id or one content.
    Status set_added_tokens(std::span<const AddedToken> tokens, AddedTokensMode mode);
    std::vector<AddedToken> added_tokens() const;

    struct Impl;

  private:
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// DeepSeek-V4's added-token table (FORMATS.md §4.1): BOS 0, EOS 1, pad 2, place holders
// 128000..128798, <｜System｜> 128799 ... <｜end_of_query｜> 128846 (<think> 128821,
// </think> 128822, ｜DSML｜ 128825, <｜latest_reminder｜> 128828, task tokens) and
// <｜image｜> 129279. Use with AddedTokensMode::kReplace on the V3 tokenizer.json.
std::vector<AddedToken> deepseek_v4_added_tokens();

// A model folder's tokenizer: `path`, or tokenizer.json in `model_dir` when `path` is empty.
// A tokenizer.json path, or the tokenizer.json inside a folder.
std::string tokenizer_json_path(const std::string& path_or_dir);

// `path` is a tokenizer.json or a folder holding one (empty: the model folder's).
// A file that lacks any of V4's chat markers (DeepSeek-V3's table: no <think>, no ｜DSML｜)
// gets deepseek_v4_added_tokens() installed, and `note` (when not null) says so. A file that
// has every marker keeps its own ids: a small test model puts them inside its vocabulary.
Expected<Tokenizer> load_model_tokenizer(const std::string& model_dir, const std::string& path,
                                         std::string* note);

// Turns a stream of ids into text pieces that are always whole UTF-8: bytes of a character
// split across tokens are held back until it is complete (or proven invalid: then U+FFFD,
// as decode() does).
class TokenStreamDecoder {
  public:
    explicit TokenStreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
    // The text that became complete with this id (often empty or one character).
    std::string push(int32_t id);
    // Whatever is still held back, repaired to U+FFFD; call at the end of the stream.
    std::string flush();

  private:
    const Tokenizer* tokenizer_;
    std::string pending_;
};

}  // namespace dsv4
