// libFuzzer target: chat::parse_completion (DeepSeek's reply parser) in both modes on any text,
// and the server's streaming DSML parser on the same text cut into pieces (the first byte sets
// the piece length): it must never crash, and whatever it streams must be the text, all of it.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "dsv4/chat.h"
#include "server/dsml_stream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const size_t piece = 1 + data[0] % 16;
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    for (auto mode : {dsv4::chat::ThinkingMode::kChat, dsv4::chat::ThinkingMode::kThinking}) {
        auto parsed = dsv4::chat::parse_completion(text, mode);
        if (parsed) (void)dsv4::chat::dump_json(*parsed);
        dsv4::server::DsmlStreamParser stream(mode == dsv4::chat::ThinkingMode::kThinking);
        dsv4::server::StreamDelta out;
        for (size_t at = 0; at < text.size(); at += piece) stream.push(text.substr(at, piece), out);
        stream.finish(out);
        // Reasoning and content are text of the input, in order, never more of it.
        DSV4_ASSERT(out.reasoning.size() + out.content.size() <= text.size() * 6 + 16,
                    "the stream invented text");
    }
    return 0;
}
