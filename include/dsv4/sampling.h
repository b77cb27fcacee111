// Sampling parameters of one request (one type for the CLI, the engine, the server and the
// sampling op, which keeps an array of them in backend memory: plain data, no pointers).
#pragma once

#include <cstdint>

namespace dsv4 {

struct SamplingParams {
    float temperature = 0.0f;  // 0 = greedy
    int top_k = 0;             // 0 = all
    float top_p = 1.0f;        // 1 = all
    uint64_t seed = 0;         // seeds the request's generator when it is admitted
};

}  // namespace dsv4
