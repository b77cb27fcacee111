// Token sampling on host logits: greedy, temperature, top-k, top-p, deterministic per seed.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4 {

struct SamplingParams {
    float temperature = 0.0f;  // 0 = greedy
    int top_k = 0;             // 0 = all
    float top_p = 1.0f;        // 1 = all
    uint64_t seed = 0;
};

class Sampler {
  public:
    explicit Sampler(const SamplingParams& p);
    // Picks a token from logits[0, V). Greedy ties go to the lower id.
    int32_t sample(const float* logits, int64_t V);

  private:
    double uniform();  // [0, 1) from xoshiro256**, identical on every platform
    SamplingParams p_;
    uint64_t s_[4];
    std::vector<int32_t> order_;
    std::vector<double> probs_;
};

int32_t argmax(const float* logits, int64_t V);

}  // namespace dsv4
