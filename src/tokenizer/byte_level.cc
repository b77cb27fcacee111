#include "tokenizer/byte_level.h"

#include "base/utf8.h"

namespace dsv4::tok {

const ByteLevel& ByteLevel::get() {
    static const ByteLevel table;
    return table;
}

ByteLevel::ByteLevel() {
    byte_of_.fill(-1);
    // Printable Latin-1 bytes stand for themselves; the others (controls, space, DEL, NBSP,
    // soft hyphen) take the code points from U+0100 upwards, in byte order.
    auto printable = [](int b) {
        return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 256;
    for (int b = 0; b < 256; ++b) {
        const int cp = printable(b) ? b : next++;
        append_utf8(chars_[b], static_cast<char32_t>(cp));
        byte_of_[cp] = static_cast<int16_t>(b);
    }
}

std::optional<std::string> ByteLevel::token_bytes(std::string_view token) const {
    std::string out;
    out.reserve(token.size());
    size_t pos = 0;
    while (pos < token.size()) {
        const size_t len = utf8_sequence_length(token, pos);
        if (len == 0) return std::nullopt;
        const char32_t cp = utf8_decode(token, pos, len);
        if (cp >= static_cast<char32_t>(kMaxCodePoint) || byte_of_[cp] < 0) return std::nullopt;
        out += static_cast<char>(byte_of_[cp]);
        pos += len;
    }
    return out;
}

}  // namespace dsv4::tok
