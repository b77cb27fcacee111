// Tokenizer: added-token split -> Split regexes -> byte-level BPE, and the way back.
#include "dsv4/tokenizer.h"

#include <fstream>
#include <sstream>

#include "base/utf8.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/loader.h"

namespace dsv4 {

struct Tokenizer::Impl {
    std::unique_ptr<tok::Bpe> bpe;
    tok::PreTokenizer pre_tokenizer;
    tok::AddedTokenTable added;
    // What each id decodes to, precomputed so decode is a concatenation.
    std::vector<std::string> bytes;
    std::vector<bool> known;

    void rebuild_decode_table();
    void encode_text(std::string_view text, std::vector<int32_t>& out) const;
};

void Tokenizer::Impl::rebuild_decode_table() {
    int32_t max_id = bpe->max_id();
    for (const AddedToken& t : added.tokens()) max_id = std::max(max_id, t.id);
    bytes.assign(static_cast<size_t>(max_id + 1), std::string());
    known.assign(static_cast<size_t>(max_id + 1), false);
    const tok::ByteLevel& byte_level = tok::ByteLevel::get();
    for (int32_t id = 0; id <= bpe->max_id(); ++id) {
        if (const std::string* token = bpe->token_of(id)) {
            // HF's ByteLevel decoder keeps a token with characters outside the alphabet as is.
            bytes[id] = byte_level.token_bytes(*token).value_or(*token);
            known[id] = true;
        }
    }
    // Added tokens decode to their content (HF decodes them outside the ByteLevel decoder).
    for (const AddedToken& t : added.tokens()) {
        bytes[t.id] = t.content;
        known[t.id] = true;
    }
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out) const {
    auto encode_valid = [&](std::string_view run) {
        pre_tokenizer.for_each_piece(
            run, [&](std::string_view piece) { bpe->encode_piece(piece, out); });
    };
    size_t run_start = 0;
    size_t pos = 0;
    while (pos < text.size()) {
        if (static_cast<uint8_t>(text[pos]) < 0x80) {
            ++pos;
            continue;
        }
        const size_t len = utf8_sequence_length(text, pos);
        if (len > 0) {
            pos += len;
            continue;
        }
        // Not UTF-8 (HF cannot be given such text): the valid text around it is encoded on
        // its own, and each bad byte becomes its byte-level token.
        encode_valid(text.substr(run_start, pos - run_start));
        const size_t bad = utf8_invalid_subpart(text, pos);
        for (size_t i = 0; i < bad; ++i)
            out.push_back(bpe->byte_id(static_cast<uint8_t>(text[pos + i])));
        pos += bad;
        run_start = pos;
    }
    encode_valid(text.substr(run_start));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Expected<Tokenizer> Tokenizer::load(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return error("cannot open tokenizer file ", path.string());
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) return error("cannot read tokenizer file ", path.string());
    return from_json(text.str(), path.string());
}

Expected<Tokenizer> Tokenizer::from_json(std::string_view json_text, const std::string& label) {
    DSV4_ASSIGN_OR_RETURN(tok::TokenizerParts parts, tok::parse_tokenizer_json(json_text, label));
    auto impl = std::make_unique<Impl>();
    impl->bpe = std::move(parts.bpe);
    impl->pre_tokenizer = std::move(parts.pre_tokenizer);
    if (Status s = impl->added.set(std::move(parts.added_tokens)); !s) return s.with_context(label);
    impl->rebuild_decode_table();
    return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 1);
    impl_->added.split(text, parse_special, [&](std::string_view segment, int32_t id) {
        if (id >= 0) {
            out.push_back(id);
        } else {
            impl_->encode_text(segment, out);
        }
    });
    return out;
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids) const {
    std::string out;
    for (int32_t id : ids) out += token_bytes(id);
    return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
    return utf8_lossy(decode_bytes(ids));
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    if (auto id = impl_->added.id_of(token)) return id;
    return impl_->bpe->id_of(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
    if (const AddedToken* t = impl_->added.by_id(id)) return t->content;
    if (const std::string* token = impl_->bpe->token_of(id)) return *token;
    return std::nullopt;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= impl_->bytes.size() || !impl_->known[id]) return {};
    return impl_->bytes[id];
}

int32_t Tokenizer::vocab_size() const {
    return static_cast<int32_t>(impl_->bytes.size());
}

Status Tokenizer::set_added_tokens(std::span<const AddedToken> tokens, AddedTokensMode mode) {
    std::vector<AddedToken> table;
    if (mode == AddedTokensMode::kOverlay) {
        for (const AddedToken& old : impl_->added.tokens()) {
            bool replaced = false;
            for (const AddedToken& t : tokens)
                replaced |= t.id == old.id || t.content == old.content;
            if (!replaced) table.push_back(old);
        }
    }
    table.insert(table.end(), tokens.begin(), tokens.end());
    DSV4_RETURN_IF_ERROR(impl_->added.set(std::move(table)));
    impl_->rebuild_decode_table();
    return Status::ok();
}

std::vector<AddedToken> Tokenizer::added_tokens() const {
    return impl_->added.tokens();
}

std::string TokenStreamDecoder::push(int32_t id) {
    pending_ += tokenizer_->token_bytes(id);
    const size_t ready = utf8_complete_prefix(pending_);
    std::string text = utf8_lossy(std::string_view(pending_).substr(0, ready));
    pending_.erase(0, ready);
    return text;
}

std::string TokenStreamDecoder::flush() {
    std::string text = utf8_lossy(pending_);
    pending_.clear();
    return text;
}

}  // namespace dsv4
