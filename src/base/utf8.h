// UTF-8 helpers with Unicode's rules for well-formed sequences (no overlongs, no surrogates,
// nothing above U+10FFFF), shared by the tokenizer and the chat encoding's JSON reader.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dsv4 {

// Length of the well-formed sequence that starts at s[pos], or 0 when there is none.
size_t utf8_sequence_length(std::string_view s, size_t pos);

// True when all of s is well-formed UTF-8.
bool utf8_valid(std::string_view s);

// The code point of the well-formed sequence s[pos, pos + len).
char32_t utf8_decode(std::string_view s, size_t pos, size_t len);

void append_utf8(std::string& out, char32_t cp);

// Length of the longest prefix of s[pos..] that could still start a well-formed sequence
// (1..3 for a truncated sequence, 1 for a byte that cannot start or continue one).
size_t utf8_invalid_subpart(std::string_view s, size_t pos);

// Like Rust's String::from_utf8_lossy (what HF's ByteLevel decoder uses): every maximal
// invalid subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// How many leading bytes of `s` can be converted now without waiting for more: everything
// except a truncated but so far valid sequence at the very end.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace dsv4
