// libFuzzer target: chat::parse_json (Python json.loads semantics; request bodies go through
// it) must return a value or an error for any bytes, and a value must print with dump_json
// and parse back to the same text (nothing it accepts is lost on the way to a prompt).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dsv4/chat.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto value =
        dsv4::chat::parse_json(std::string_view(reinterpret_cast<const char*>(data), size));
    if (!value) return 0;
    const std::string text = dsv4::chat::dump_json(*value);
    auto again = dsv4::chat::parse_json(text);
    DSV4_ASSERT(again.has_value(), "dump_json wrote what parse_json refuses: ", text);
    DSV4_ASSERT(dsv4::chat::dump_json(*again) == text, "not a fixed point: ", text);
    return 0;
}
