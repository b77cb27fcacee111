// libFuzzer target: the safetensors header validator and the config.json parser must turn
// any byte string into either a value or an error, never a crash or an out-of-bounds read.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/safetensors.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::map<std::string, std::string> metadata;
    auto tensors = dsv4::SafetensorsFile::parse(data, size, "fuzz", &metadata);
    if (tensors) {
        for (const auto& t : *tensors) {
            // Every validated range must be readable.
            volatile uint8_t sink = 0;
            if (t.nbytes) sink = t.data[0] ^ t.data[t.nbytes - 1];
            (void)sink;
        }
    }
    auto cfg =
        dsv4::parse_model_config(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    if (cfg) (void)cfg->summary();
    return 0;
}
