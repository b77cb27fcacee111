#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dsv4 {
namespace {

uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

}  // namespace

int32_t argmax(const float* logits, int64_t V) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
        if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
}

Sampler::Sampler(const SamplingParams& p) : p_(p) {
    uint64_t x = p.seed;
    for (auto& s : s_) s = splitmix64(x);
}

double Sampler::uniform() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return static_cast<double>(result >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(const float* logits, int64_t V) {
    if (p_.temperature <= 0.0f || p_.top_k == 1) return argmax(logits, V);
    order_.resize(V);
    std::iota(order_.begin(), order_.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    int64_t keep = (p_.top_k > 0 && p_.top_k < V) ? p_.top_k : V;
    std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(), by_logit);
    probs_.resize(keep);
    const double mx = logits[order_[0]];
    double sum = 0;
    for (int64_t i = 0; i < keep; ++i)
        sum += (probs_[i] = std::exp((logits[order_[i]] - mx) / p_.temperature));
    if (p_.top_p < 1.0f) {
        // Smallest prefix whose mass reaches top_p (at least one token).
        double mass = 0;
        int64_t cut = 0;
        while (cut < keep) {
            mass += probs_[cut++] / sum;
            if (mass >= p_.top_p) break;
        }
        keep = cut;
        sum = std::accumulate(probs_.begin(), probs_.begin() + keep, 0.0);
    }
    const double r = uniform() * sum;
    double acc = 0;
    for (int64_t i = 0; i < keep; ++i) {
        acc += probs_[i];
        if (r < acc) return order_[i];
    }
    return order_[keep - 1];
}

}  // namespace dsv4
