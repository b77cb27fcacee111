#include "base/utf8.h"

#include <cstdint>

namespace dsv4 {

namespace {

// Expected length of a sequence from its lead byte and the allowed range of the second byte
// (the only byte whose range depends on the lead); 0 length for bytes that cannot lead.
struct Lead {
    size_t length;
    uint8_t second_lo;
    uint8_t second_hi;
};

Lead lead_info(uint8_t b) {
    if (b < 0x80) return {1, 0, 0};
    if (b < 0xC2) return {0, 0, 0};
    if (b < 0xE0) return {2, 0x80, 0xBF};
    if (b == 0xE0) return {3, 0xA0, 0xBF};
    if (b == 0xED) return {3, 0x80, 0x9F};
    if (b < 0xF0) return {3, 0x80, 0xBF};
    if (b == 0xF0) return {4, 0x90, 0xBF};
    if (b < 0xF4) return {4, 0x80, 0xBF};
    if (b == 0xF4) return {4, 0x80, 0x8F};
    return {0, 0, 0};
}

// Number of bytes from pos that match the sequence pattern (at most its length).
size_t matched_prefix(std::string_view s, size_t pos, const Lead& lead) {
    size_t k = 1;
    while (k < lead.length && pos + k < s.size()) {
        const auto b = static_cast<uint8_t>(s[pos + k]);
        const bool ok =
            k == 1 ? (b >= lead.second_lo && b <= lead.second_hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) break;
        ++k;
    }
    return k;
}

}  // namespace

size_t utf8_sequence_length(std::string_view s, size_t pos) {
    const Lead lead = lead_info(static_cast<uint8_t>(s[pos]));
    if (lead.length <= 1) return lead.length;
    return matched_prefix(s, pos, lead) == lead.length ? lead.length : 0;
}

bool utf8_valid(std::string_view s) {
    for (size_t pos = 0; pos < s.size();) {
        const size_t len = utf8_sequence_length(s, pos);
        if (len == 0) return false;
        pos += len;
    }
    return true;
}

char32_t utf8_decode(std::string_view s, size_t pos, size_t len) {
    const auto b0 = static_cast<uint8_t>(s[pos]);
    if (len == 1) return b0;
    char32_t cp = b0 & (0x7F >> len);
    for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<uint8_t>(s[pos + i]) & 0x3F);
    return cp;
}

void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

size_t utf8_invalid_subpart(std::string_view s, size_t pos) {
    const Lead lead = lead_info(static_cast<uint8_t>(s[pos]));
    if (lead.length <= 1) return 1;
    return matched_prefix(s, pos, lead);
}

std::string utf8_lossy(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    size_t pos = 0;
    while (pos < bytes.size()) {
        const size_t len = utf8_sequence_length(bytes, pos);
        if (len > 0) {
            out.append(bytes.substr(pos, len));
            pos += len;
        } else {
            out += "\xEF\xBF\xBD";
            pos += utf8_invalid_subpart(bytes, pos);
        }
    }
    return out;
}

size_t utf8_complete_prefix(std::string_view s) {
    // Only the last three bytes can hold the start of a truncated sequence.
    const size_t first = s.size() > 3 ? s.size() - 3 : 0;
    for (size_t pos = first; pos < s.size(); ++pos) {
        const Lead lead = lead_info(static_cast<uint8_t>(s[pos]));
        if (lead.length <= 1) continue;
        const size_t k = matched_prefix(s, pos, lead);
        if (k < lead.length && pos + k == s.size()) return pos;
    }
    return s.size();
}

}  // namespace dsv4
