// Op contracts: gathering the rows that need logits, and sampling on the backend. Only the
// sampled ids (R int32) come back to the host each step.
#pragma once

#include <cstdint>

#include "dsv4/sampling.h"

namespace dsv4::ops {

// dst[r] = src[idx[r]] for rows of `width` floats.
struct GatherRowsArgs {
    const float* src = nullptr;    // [T, width]
    const int32_t* idx = nullptr;  // [R] rows of src
    float* dst = nullptr;          // [R, width]
    int64_t R = 0, width = 0;
};

// Greedy (temperature 0 or top_k 1: the lowest id of the maximum), else softmax at the
// temperature over the top_k best (ties to the lower id), cut to the smallest prefix whose
// mass reaches top_p, and one uniform draw from the slot's xoshiro256** generator. A row whose
// logits are not all finite gets -1 (the engine reports it; nothing is sampled from garbage).
// Speculative verification: with a draft d for the row (a proposal that put all its mass on d),
// one draw keeps d with probability p(d), else the token is drawn from p without d,
// renormalised (a second draw) — the output is distributed as p exactly. Greedy keeps d only
// when it is the arg-max.
struct SampleArgs {
    const float* logits = nullptr;           // [R, V]
    const SamplingParams* params = nullptr;  // [R]
    const int32_t* slot = nullptr;           // [R] cache slot of each row (its generator)
    uint64_t* rng = nullptr;                 // [S, 4] generator state per slot
    int32_t* out = nullptr;                  // [R] sampled ids
    int64_t R = 0, V = 0;                    // rows, vocabulary
    const int32_t* draft = nullptr;          // [R] draft to verify, -1 none; nullptr: none
};

// Log-probabilities of sampled rows (Request::logprobs): the log-softmax of each row's logits
// (temperature 1, every token) at its sampled id, and the row's n most likely ids (largest logit
// first, ties to the lower id) with theirs. log p(i) = l_i - (m + log(sum_j exp(l_j - m))), m
// the row's largest logit, the sum in double. A row whose sample is -1 (non-finite logits) gets
// NaN and ids -1. Runs only in steps where some request asks for them.
struct LogprobsArgs {
    const float* logits = nullptr;     // [R, V]
    const int32_t* sampled = nullptr;  // [R] the sampling op's output
    float* logprob = nullptr;          // [R]
    int32_t* top_id = nullptr;         // [R, n]
    float* top_logprob = nullptr;      // [R, n]
    int64_t R = 0, V = 0;              // rows, vocabulary
    int n = 0;                         // 1..kMaxTopLogprobs
};

// The generator state for `seed` (splitmix64 expansion), written into a slot at admission.
inline void seed_rng(uint64_t seed, uint64_t state[4]) {
    for (int i = 0; i < 4; ++i) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        state[i] = z ^ (z >> 31);
    }
}

}  // namespace dsv4::ops
