// Added tokens (specials such as <｜User｜>): cut out of the text before pre-tokenization,
// the way HF's AddedVocabulary does it: leftmost-longest matching, tokens not flagged
// `normalized` first on the raw text, then the `normalized` ones on the remaining gaps.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dsv4/status.h"
#include "dsv4/tokenizer.h"

namespace dsv4::tok {

class AddedTokenTable {
  public:
    // Validates and installs the table: ids >= 0, non-empty contents, no id or content twice.
    Status set(std::vector<AddedToken> tokens);

    const std::vector<AddedToken>& tokens() const { return tokens_; }
    const AddedToken* by_id(int32_t id) const;
    std::optional<int32_t> id_of(std::string_view content) const;
    bool empty() const { return tokens_.empty(); }

    // Calls f(segment, id) in text order: id >= 0 for a matched token (segment is the text it
    // covers, with any lstrip/rstrip whitespace), id == -1 for text between tokens.
    template <typename F>
    void split(std::string_view text, bool parse_special, F&& f) const {
        if (tokens_.empty()) {
            if (!text.empty()) f(text, -1);
            return;
        }
        split_pass(raw_, text, parse_special, [&](std::string_view segment, int32_t id) {
            if (id >= 0) {
                f(segment, id);
            } else {
                split_pass(normalized_, segment, parse_special, f);
            }
        });
    }

  private:
    // A byte trie over the contents of one matching set.
    struct Trie {
        struct Node {
            std::vector<std::pair<uint8_t, int32_t>> children;
            int32_t token = -1;  // index into tokens_
        };
        std::vector<Node> nodes;
        std::array<bool, 256> first{};
        void clear();
        void add(std::string_view content, int32_t token);
        // Index and length of the longest token starting at text[pos], or token -1.
        std::pair<int32_t, size_t> longest_at(std::string_view text, size_t pos) const;
    };

    struct Span {
        size_t begin;
        size_t end;
        int32_t token;
    };

    // One matching pass: f(segment, id) for tokens and gaps (gaps may be empty: skipped).
    template <typename F>
    void split_pass(const Trie& trie, std::string_view text, bool parse_special, F&& f) const {
        size_t done = 0;
        for (const Span& s : find_matches(trie, text, parse_special)) {
            if (s.begin > done) f(text.substr(done, s.begin - done), -1);
            f(text.substr(s.begin, s.end - s.begin), tokens_[s.token].id);
            done = s.end;
        }
        if (done < text.size()) f(text.substr(done), -1);
    }

    std::vector<Span> find_matches(const Trie& trie, std::string_view text,
                                   bool parse_special) const;

    std::vector<AddedToken> tokens_;
    std::unordered_map<int32_t, size_t> by_id_;
    std::unordered_map<std::string, size_t> by_content_;
    Trie raw_;
    Trie normalized_;
};

}  // namespace dsv4::tok
