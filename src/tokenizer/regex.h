// PCRE2 (UTF + Unicode properties, JIT) behind a small interface, plus the translation of the
// Oniguruma patterns that HF tokenizer.json files carry into PCRE2 syntax.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "dsv4/status.h"

namespace dsv4::tok {

// Where a match starts and ends (byte offsets into the subject).
struct Match {
    size_t begin = 0;
    size_t end = 0;
};

class Regex {
  public:
    // Compiles a PCRE2 pattern (UTF, UCP); `literal` compiles the text as a plain string.
    static Expected<Regex> compile(std::string_view pattern, bool literal = false);

    Regex(Regex&&) noexcept;
    Regex& operator=(Regex&&) noexcept;
    ~Regex();

    // First match in subject[start..] (the subject must be valid UTF-8: it is not checked).
    // Returns false when there is none. A matcher error (resource limits on huge inputs)
    // also ends the search: the rest of the subject then stays one piece.
    bool find(std::string_view subject, size_t start, Match& match) const;

    // True when the pattern matches the whole of `subject`.
    bool full_match(std::string_view subject) const;

    struct Impl;

  private:
    explicit Regex(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Oniguruma (what HF tokenizers compiles tokenizer.json regexes with) and PCRE2 agree on the
// syntax these files use, not on every class: Oniguruma's \s is Unicode White_Space (PCRE2's
// also takes U+180E), its \w takes marks, and its Unicode tables are newer (16.0 against
// PCRE2 10.42's 14.0). So \s \S \w \W become explicit classes, \p{L} \p{M} \p{N} \p{P}
// \p{S} gain the code points assigned since (unicode_delta.h), and escapes with another meaning
// in PCRE2 (\h \H) or none expressible here (\b \B, \S \W \P inside a class, nested
// classes) are rejected by name.
Expected<std::string> onig_to_pcre2(std::string_view pattern);

}  // namespace dsv4::tok
