// The pre-tokenizer: a sequence of regex Split steps (HF `Split`), each applied to every piece
// the previous step produced, so no BPE token crosses a split boundary.
#pragma once

#include <string_view>
#include <vector>

#include "base/utf8.h"
#include "tokenizer/regex.h"

namespace dsv4::tok {

enum class SplitBehavior {
    kIsolated,  // matches and the gaps between them are pieces
    kRemoved,   // only the gaps are pieces
};

struct SplitStep {
    Regex regex;
    SplitBehavior behavior = SplitBehavior::kIsolated;
};

class PreTokenizer {
  public:
    PreTokenizer() = default;
    explicit PreTokenizer(std::vector<SplitStep> steps) : steps_(std::move(steps)) {}

    // Calls f(piece) for every non-empty piece of `text` (valid UTF-8), in order.
    template <typename F>
    void for_each_piece(std::string_view text, F&& f) const {
        split(text, 0, f);
    }

  private:
    template <typename F>
    void split(std::string_view piece, size_t step, F& f) const {
        if (piece.empty()) return;
        if (step == steps_.size()) {
            f(piece);
            return;
        }
        const SplitStep& s = steps_[step];
        size_t gap_start = 0;
        size_t search = 0;
        Match m;
        while (search <= piece.size() && s.regex.find(piece, search, m)) {
            split(piece.substr(gap_start, m.begin - gap_start), step + 1, f);
            if (m.end > m.begin) {
                if (s.behavior == SplitBehavior::kIsolated) {
                    split(piece.substr(m.begin, m.end - m.begin), step + 1, f);
                }
                gap_start = search = m.end;
            } else {
                // An empty match only marks a boundary; the search resumes one character on,
                // as Oniguruma's find_iter does.
                gap_start = m.begin;
                if (m.begin >= piece.size()) break;
                const size_t len = utf8_sequence_length(piece, m.begin);
                search = m.begin + (len > 0 ? len : 1);
            }
        }
        split(piece.substr(gap_start), step + 1, f);
    }

    std::vector<SplitStep> steps_;
};

}  // namespace dsv4::tok
