#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "tokenizer/unicode_delta.h"

namespace dsv4::tok {

struct Regex::Impl {
    pcre2_code* code = nullptr;
    bool jit = false;
    ~Impl() { pcre2_code_free(code); }
};

namespace {

// Per-thread matcher state: the match data (only the whole-match offsets are read, so one
// pair is enough for any pattern) and a JIT stack larger than PCRE2's 32 KiB default, so
// long runs of one character class do not exhaust it.
struct MatchScratch {
    pcre2_match_data* data = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* stack = nullptr;

    MatchScratch() {
        data = pcre2_match_data_create(1, nullptr);
        context = pcre2_match_context_create(nullptr);
        stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
        if (context != nullptr && stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
    }
    ~MatchScratch() {
        pcre2_jit_stack_free(stack);
        pcre2_match_context_free(context);
        pcre2_match_data_free(data);
    }
    MatchScratch(const MatchScratch&) = delete;
    MatchScratch& operator=(const MatchScratch&) = delete;
};

MatchScratch& scratch() {
    thread_local MatchScratch s;
    return s;
}

std::string pcre2_message(int code) {
    PCRE2_UCHAR buffer[256];
    if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) return "unknown PCRE2 error";
    return reinterpret_cast<const char*>(buffer);
}

// Unicode White_Space (what Oniguruma's \s is), as PCRE2 class content.
constexpr std::string_view kWhiteSpace =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
    "\\x{202f}\\x{205f}\\x{3000}";
// Oniguruma's \w: letters, marks, decimal digits and connector punctuation.
std::string word_class() {
    return "\\p{L}" + std::string(unicode16_delta('L')) + "\\p{M}" +
           std::string(unicode16_delta('M')) + "\\p{Nd}\\p{Pc}";
}

// \p{X} / \pX / \P{X} at pattern[i] (the letter after the backslash); advances i past it.
// The five major categories gain the code points Unicode assigned after PCRE2's tables.
Expected<std::string> translate_property(std::string_view pattern, size_t& i, bool in_class) {
    const char e = pattern[i];
    size_t end = i + 1;
    std::string name;
    if (end < pattern.size() && pattern[end] == '{') {
        const size_t close = pattern.find('}', end);
        if (close == std::string_view::npos) {
            return error("regex /", pattern, "/: unterminated \\", e, "{");
        }
        name = std::string(pattern.substr(end + 1, close - end - 1));
        end = close + 1;
    } else if (end < pattern.size()) {
        name = std::string(1, pattern[end]);
        end += 1;
    }
    i = end - 1;
    const std::string_view delta = name.size() == 1 ? unicode16_delta(name[0]) : std::string_view();
    const std::string original = "\\" + std::string(1, e) + "{" + name + "}";
    if (delta.empty()) return original;
    if (e == 'p') {
        return in_class ? original + std::string(delta) : "[" + original + std::string(delta) + "]";
    }
    if (in_class) {
        return error("regex /", pattern, "/: \\P{", name,
                     "} inside a character class is not supported");
    }
    return "[^\\p{" + name + "}" + std::string(delta) + "]";
}

}  // namespace

Regex::Regex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

Expected<Regex> Regex::compile(std::string_view pattern, bool literal) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    // PCRE2_LITERAL admits no UCP (nothing to classify in a plain string).
    const uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
    pcre2_code* compiled = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                                         pattern.size(), options, &code, &offset, nullptr);
    if (compiled == nullptr) {
        return error("regex /", pattern, "/ does not compile at offset ", offset, ": ",
                     pcre2_message(code));
    }
    auto impl = std::make_unique<Impl>();
    impl->code = compiled;
    // Without JIT (a PCRE2 built without it) the interpreter gives the same matches, slower.
    impl->jit = pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE) == 0;
    return Regex(std::move(impl));
}

bool Regex::find(std::string_view subject, size_t start, Match& match) const {
    MatchScratch& s = scratch();
    const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
    int rc = PCRE2_ERROR_NOMATCH;
    if (impl_->jit) {
        rc = pcre2_jit_match(impl_->code, text, subject.size(), start, 0, s.data, s.context);
    }
    if (!impl_->jit || (rc < 0 && rc != PCRE2_ERROR_NOMATCH)) {
        rc = pcre2_match(impl_->code, text, subject.size(), start, PCRE2_NO_UTF_CHECK, s.data,
                         s.context);
    }
    if (rc < 0) return false;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(s.data);
    match.begin = ovector[0];
    match.end = ovector[1];
    return true;
}

bool Regex::full_match(std::string_view subject) const {
    MatchScratch& s = scratch();
    const int rc =
        pcre2_match(impl_->code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), 0,
                    PCRE2_ANCHORED | PCRE2_ENDANCHORED | PCRE2_NO_UTF_CHECK, s.data, s.context);
    return rc >= 0;
}

Expected<std::string> onig_to_pcre2(std::string_view pattern) {
    std::string out;
    out.reserve(pattern.size() + 64);
    bool in_class = false;
    size_t class_start = 0;  // index in `pattern` just after '[' or "[^"
    for (size_t i = 0; i < pattern.size(); ++i) {
        const char c = pattern[i];
        if (c == '\\') {
            if (i + 1 == pattern.size()) return error("regex /", pattern, "/ ends with '\\'");
            const char e = pattern[++i];
            switch (e) {
                case 's':
                    out +=
                        in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
                    continue;
                case 'w':
                    out += in_class ? word_class() : "[" + word_class() + "]";
                    continue;
                case 'S':
                case 'W':
                    if (in_class) {
                        return error("regex /", pattern, "/: \\", e,
                                     " inside a character class is not supported");
                    }
                    out += "[^" + (e == 'S' ? std::string(kWhiteSpace) : word_class()) + "]";
                    continue;
                case 'p':
                case 'P': {
                    DSV4_ASSIGN_OR_RETURN(std::string translated,
                                          translate_property(pattern, i, in_class));
                    out += translated;
                    continue;
                }
                case 'h':
                case 'H':
                case 'b':
                case 'B':
                    return error("regex /", pattern, "/: Oniguruma's \\", e,
                                 " has no PCRE2 equivalent here (not supported)");
                default:
                    out += '\\';
                    out += e;
                    continue;
            }
        }
        if (in_class) {
            if (c == ']' && i > class_start) {
                in_class = false;
            } else if (c == '[') {
                return error("regex /", pattern,
                             "/: nested classes and POSIX brackets are not supported");
            } else if (c == '&' && i + 1 < pattern.size() && pattern[i + 1] == '&') {
                return error("regex /", pattern, "/: class intersection (&&) is not supported");
            }
        } else if (c == '[') {
            in_class = true;
            class_start = i + 1;
            if (class_start < pattern.size() && pattern[class_start] == '^') {
                out += "[^";
                ++i;
                ++class_start;
                continue;
            }
        }
        out += c;
    }
    return out;
}

}  // namespace dsv4::tok
