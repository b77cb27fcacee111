// libFuzzer target: arbitrary bytes through encode (both special-token modes) must come back
// unchanged from decode_bytes, decode must give valid UTF-8, and the same bytes read as ids
// must decode (streamed and whole) to the same text. Uses DeepSeek's tokenizer.json
// (tools/setup.sh), or the file named by $DSV4_TOKENIZER.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dsv4/tokenizer.h"

namespace {

const dsv4::Tokenizer& tokenizer() {
    static const dsv4::Tokenizer* tok = [] {
        const char* path = std::getenv("DSV4_TOKENIZER");
        auto loaded = dsv4::Tokenizer::load(path != nullptr ? path : DSV4_TOKENIZER_JSON);
        if (!loaded) {
            std::fprintf(stderr, "tokenizer_fuzz: %s (run tools/setup.sh)\n",
                         loaded.status().message().c_str());
            std::abort();
        }
        return new dsv4::Tokenizer(std::move(loaded).value());
    }();
    return *tok;
}

bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto b = static_cast<unsigned char>(s[i]);
        const size_t n = b < 0x80   ? 1
                         : b < 0xC2 ? 0
                         : b < 0xE0 ? 2
                         : b < 0xF0 ? 3
                         : b < 0xF5 ? 4
                                    : 0;
        if (n == 0 || i + n > s.size()) return false;
        uint32_t cp = n == 1 ? b : b & (0x7F >> n);
        for (size_t k = 1; k < n; ++k) {
            const auto c = static_cast<unsigned char>(s[i + k]);
            if ((c & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (c & 0x3F);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += n;
    }
    return true;
}

void check(bool ok, const char* what) {
    if (!ok) {
        std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
        std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const dsv4::Tokenizer& tok = tokenizer();
    const std::string text(reinterpret_cast<const char*>(data), size);
    for (bool parse_special : {true, false}) {
        const std::vector<int32_t> ids = tok.encode(text, parse_special);
        check(tok.decode_bytes(ids) == text, "decode_bytes(encode(x)) != x");
        const std::string decoded = tok.decode(ids);
        check(valid_utf8(decoded), "decode() is not valid UTF-8");
        if (valid_utf8(text)) check(decoded == text, "decode(encode(x)) != x for UTF-8 x");
    }
    std::vector<int32_t> ids(size / 4);
    if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
    for (int32_t& id : ids) id = static_cast<int32_t>(static_cast<uint32_t>(id) % 131072u);
    const std::string whole = tok.decode(ids);
    check(valid_utf8(whole), "decode(ids) is not valid UTF-8");
    dsv4::TokenStreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    check(streamed == whole, "streamed decode differs from decode");
    return 0;
}
