// GPT-2's byte-level alphabet: each byte stands for one printable code point, so any byte
// string is a string of vocabulary characters (tokenizer.json vocab entries are written in it).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dsv4::tok {

class ByteLevel {
  public:
    static const ByteLevel& get();

    // UTF-8 of the code point standing for byte b.
    const std::string& char_of(uint8_t b) const { return chars_[b]; }

    // The bytes a vocabulary token stands for; nullopt when it holds a character outside the
    // alphabet (HF's decoder then keeps the token's own UTF-8, and so does ours).
    std::optional<std::string> token_bytes(std::string_view token) const;

  private:
    ByteLevel();
    std::array<std::string, 256> chars_;
    static constexpr int kMaxCodePoint = 256 + 68;
    std::array<int16_t, kMaxCodePoint> byte_of_{};  // -1: not in the alphabet
};

}  // namespace dsv4::tok
