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

#include "base/utf8.h"
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
        check(dsv4::utf8_valid(decoded), "decode() is not valid UTF-8");
        if (dsv4::utf8_valid(text)) check(decoded == text, "decode(encode(x)) != x for UTF-8 x");
    }
    std::vector<int32_t> ids(size / 4);
    if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
    for (int32_t& id : ids) id = static_cast<int32_t>(static_cast<uint32_t>(id) % 131072u);
    const std::string whole = tok.decode(ids);
    check(dsv4::utf8_valid(whole), "decode(ids) is not valid UTF-8");
    dsv4::TokenStreamDecoder stream(tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    check(streamed == whole, "streamed decode differs from decode");
    return 0;
}
