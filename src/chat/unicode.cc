#include "chat/unicode.h"

#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>

namespace dsv4::chat {

namespace {

// PCRE2 10.42 carries Unicode 14.0, the version of Python 3.11's unicodedata, so its general
// categories are exactly the ones the reference ran with.
class NonPrintable {
  public:
    NonPrintable() {
        static const PCRE2_UCHAR32 pattern[] = {'[', '\\', 'p', '{', 'C', '}', '\\',
                                                'p', '{',  'Z', '}', ']', 0};
        int code = 0;
        PCRE2_SIZE offset = 0;
        re_ = pcre2_compile(pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &offset,
                            nullptr);
        data_ = pcre2_match_data_create(1, nullptr);
    }
    ~NonPrintable() {
        pcre2_match_data_free(data_);
        pcre2_code_free(re_);
    }
    NonPrintable(const NonPrintable&) = delete;
    NonPrintable& operator=(const NonPrintable&) = delete;

    bool matches(char32_t c) const {
        if (re_ == nullptr || c > 0x10FFFF) return true;
        const PCRE2_UCHAR32 subject[1] = {c};
        // Lone surrogates are not valid UTF-32 for PCRE2; Python calls them unprintable (Cs).
        if (c >= 0xD800 && c <= 0xDFFF) return true;
        return pcre2_match(re_, subject, 1, 0, PCRE2_ANCHORED, data_, nullptr) > 0;
    }

  private:
    pcre2_code* re_ = nullptr;
    pcre2_match_data* data_ = nullptr;
};

}  // namespace

bool py_isprintable(char32_t c) {
    if (c == ' ') return true;
    if (c < 0x7F) return c > 0x20;
    thread_local NonPrintable non_printable;
    return !non_printable.matches(c);
}

bool py_isspace(char32_t c) {
    return (c >= 0x9 && c <= 0xD) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace dsv4::chat
