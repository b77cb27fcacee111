#include "tokenizer/added_tokens.h"

#include "base/utf8.h"
#include "tokenizer/regex.h"

namespace dsv4::tok {

namespace {

// Rust's char::is_whitespace (Unicode White_Space), what HF strips for lstrip/rstrip.
bool is_white_space(char32_t c) {
    return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

// Rust regex's Unicode \w (HF's single_word test): alphabetic, marks, decimal digits,
// connector punctuation, joiners.
bool is_word_char(std::string_view text, size_t pos, size_t len) {
    static const Expected<Regex> word =
        Regex::compile("[\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200c}\\x{200d}]");
    return word.has_value() && word->full_match(text.substr(pos, len));
}

// Start of the last character of text[0, end) (end > 0), or of the byte when it is invalid.
size_t previous_char(std::string_view text, size_t end) {
    for (size_t back = 1; back <= 4 && back <= end; ++back) {
        if (utf8_sequence_length(text, end - back) == back) return end - back;
    }
    return end - 1;
}

bool ends_with_word(std::string_view text, size_t end) {
    if (end == 0) return false;
    const size_t start = previous_char(text, end);
    return end - start == utf8_sequence_length(text, start) &&
           is_word_char(text, start, end - start);
}

bool starts_with_word(std::string_view text, size_t pos) {
    if (pos >= text.size()) return false;
    const size_t len = utf8_sequence_length(text, pos);
    return len > 0 && is_word_char(text, pos, len);
}

}  // namespace

void AddedTokenTable::Trie::clear() {
    nodes.assign(1, Node{});
    first.fill(false);
}

void AddedTokenTable::Trie::add(std::string_view content, int32_t token) {
    int32_t node = 0;
    first[static_cast<uint8_t>(content[0])] = true;
    for (char ch : content) {
        const auto c = static_cast<uint8_t>(ch);
        int32_t next = -1;
        for (const auto& [byte, child] : nodes[node].children) {
            if (byte == c) next = child;
        }
        if (next < 0) {
            next = static_cast<int32_t>(nodes.size());
            nodes[node].children.emplace_back(c, next);
            nodes.emplace_back();
        }
        node = next;
    }
    nodes[node].token = token;
}

std::pair<int32_t, size_t> AddedTokenTable::Trie::longest_at(std::string_view text,
                                                             size_t pos) const {
    std::pair<int32_t, size_t> best{-1, 0};
    if (!first[static_cast<uint8_t>(text[pos])]) return best;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
        const auto c = static_cast<uint8_t>(text[i]);
        int32_t next = -1;
        for (const auto& [byte, child] : nodes[node].children) {
            if (byte == c) {
                next = child;
                break;
            }
        }
        if (next < 0) break;
        node = next;
        if (nodes[node].token >= 0) best = {nodes[node].token, i + 1 - pos};
    }
    return best;
}

Status AddedTokenTable::set(std::vector<AddedToken> tokens) {
    std::unordered_map<int32_t, size_t> by_id;
    std::unordered_map<std::string, size_t> by_content;
    for (size_t i = 0; i < tokens.size(); ++i) {
        const AddedToken& t = tokens[i];
        if (t.id < 0) return error("added token \"", t.content, "\" has negative id ", t.id);
        if (t.content.empty()) return error("added token ", t.id, " has empty content");
        if (!by_id.emplace(t.id, i).second) {
            return error("added token id ", t.id, " appears twice (\"", tokens[by_id[t.id]].content,
                         "\" and \"", t.content, "\")");
        }
        if (!by_content.emplace(t.content, i).second) {
            return error("added token \"", t.content, "\" appears twice (ids ",
                         tokens[by_content[t.content]].id, " and ", t.id, ")");
        }
    }
    tokens_ = std::move(tokens);
    by_id_ = std::move(by_id);
    by_content_ = std::move(by_content);
    raw_.clear();
    normalized_.clear();
    for (size_t i = 0; i < tokens_.size(); ++i) {
        (tokens_[i].normalized ? normalized_ : raw_)
            .add(tokens_[i].content, static_cast<int32_t>(i));
    }
    return Status::ok();
}

const AddedToken* AddedTokenTable::by_id(int32_t id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedTokenTable::id_of(std::string_view content) const {
    auto it = by_content_.find(std::string(content));
    if (it == by_content_.end()) return std::nullopt;
    return tokens_[it->second].id;
}

std::vector<AddedTokenTable::Span> AddedTokenTable::find_matches(const Trie& trie,
                                                                 std::string_view text,
                                                                 bool parse_special) const {
    std::vector<Span> spans;
    size_t done = 0;  // end of the last token taken (its stripped whitespace included)
    size_t pos = 0;
    while (pos < text.size()) {
        const auto [token, len] = trie.longest_at(text, pos);
        if (token < 0) {
            ++pos;
            continue;
        }
        size_t begin = pos;
        size_t end = pos + len;
        pos = end;  // like HF's matcher, a rejected match is not searched again for others
        const AddedToken& t = tokens_[token];
        if (begin < done) continue;  // inside whitespace an rstrip token already took
        if (!parse_special && t.special) continue;
        if (t.single_word && (ends_with_word(text, begin) || starts_with_word(text, end))) {
            continue;
        }
        if (t.lstrip) {
            while (begin > done) {
                const size_t prev = previous_char(text, begin);
                const size_t n = utf8_sequence_length(text, prev);
                if (n != begin - prev || !is_white_space(utf8_decode(text, prev, n))) break;
                begin = prev;
            }
        }
        if (t.rstrip) {
            while (end < text.size()) {
                const size_t n = utf8_sequence_length(text, end);
                if (n == 0 || !is_white_space(utf8_decode(text, end, n))) break;
                end += n;
            }
            pos = end;
        }
        spans.push_back(Span{begin, end, token});
        done = end;
    }
    return spans;
}

}  // namespace dsv4::tok
