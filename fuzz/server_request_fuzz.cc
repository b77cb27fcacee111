// libFuzzer target: an HTTP request body through the server's whole internal request path
// (JSON, validation, V4 chat encoding, tokenization, context checks), and the prompt's tokens
// replayed as if generated through the output stream (UTF-8 repair, stop strings, streaming
// DSML parse, final message). Any body must end as a request or a 400-class ApiError.
// The first byte picks the endpoint.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dsv4/tokenizer.h"
#include "server/openai_response.h"
#include "server/output_stream.h"
#include "server/prompt.h"

namespace {

const dsv4::Tokenizer& tokenizer() {
    static const dsv4::Tokenizer tok = [] {
        auto t = dsv4::load_model_tokenizer("", DSV4_TEST_TOKENIZER, nullptr);
        DSV4_ASSERT(t.has_value(), t.status().message());
        return std::move(*t);
    }();
    return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace dsv4::server;
    if (size == 0) return 0;
    const Endpoint endpoint = data[0] & 1 ? Endpoint::kCompletions : Endpoint::kChat;
    const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
    auto spec = parse_generation_request(endpoint, body, dsv4::chat::EncodingVersion::kV4);
    if (!spec) {
        DSV4_ASSERT(spec.error().status == 400 && !spec.error().message.empty(), "bad error");
        return 0;
    }
    dsv4::ModelInfo info;  // the small test model's shape
    info.vocab_size = 512;
    info.max_context = 4096;
    auto prompt = build_prompt(*spec, tokenizer(), info);
    if (!prompt) {
        DSV4_ASSERT(prompt.error().status == 400, "bad error");
        return 0;
    }
    DSV4_ASSERT(!prompt->ids.empty() && prompt->max_tokens > 0, "an empty request");
    OutputStream out(tokenizer(), *spec);
    for (int32_t id : prompt->ids) {
        (void)out.push(id);
        if (out.stopped()) break;
    }
    (void)out.finish();
    (void)dump(out.message("call_"));
    return 0;
}
