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

// A slot's logits rules (dsv4/sampling.h LogitsRules) as the logits_rules op reads them, written
// when a request takes the slot. Its bias list (n_entries of LogitsRuleEntry, sorted by token,
// distinct) holds the logit_bias entries and the ids banned until min_tokens.
struct SlotRules {
    int32_t on = 0;           // 0: the op leaves the slot's rows alone
    int32_t count = 0;        // 1: the penalties are set: the op counts the slot's tokens
    int32_t output_from = 0;  // the request's first output position
    int32_t min_tokens = 0;   // banned entries apply while fewer outputs came before the sample
    int32_t n_entries = 0;
    float repetition = 1.0f, frequency = 0.0f, presence = 0.0f;
};
struct LogitsRuleEntry {
    int32_t token = 0;
    float bias = 0.0f;
    int32_t ban = 0;  // 1: the lowest finite float while min_tokens is not reached
};
// Words of a slot's token table: bit 31 the token was fed (prompt or output), bits 0-30 how
// often it was fed as an output token.
inline constexpr uint32_t kTokenSeen = 0x80000000u;

// The request logits rules of a step, in two parts. First every token the step feeds in a row
// whose slot counts (SlotRules::count) is marked in that slot's table: seen, and an output
// (position >= output_from) once more. Then each of the first R logit rows (the sampled rows)
// whose slot is on gets, for every token v, with w = counts[slot, v], c = w & ~kTokenSeen:
//   l = logits[r, v]; if (w & kTokenSeen && repetition != 1) l = l > 0 ? l / repetition
//   : l * repetition; l = l - frequency * c; if (c > 0) l = l - presence;
// then for its entry e, if any: l = e.ban && generated < min_tokens ? lowest float : l + e.bias,
// where generated = the sampled row's position + 1 - output_from (the outputs before this one).
// Each step is one float operation rounded to nearest (no fused multiply-add), so every backend
// gives the same bits. Runs only in steps where a row's slot has rules.
struct LogitsRulesArgs {
    const int32_t* ids = nullptr;              // [T] the step's tokens
    const int64_t* tok_pos = nullptr;          // [T] their positions
    const int32_t* tok_row = nullptr;          // [T] their step rows
    const int32_t* row_slot = nullptr;         // [B] each step row's slot
    float* logits = nullptr;                   // [R, V] in place
    const int32_t* slot = nullptr;             // [R] each logit row's slot
    const int32_t* logit_idx = nullptr;        // [R] each logit row's step token
    const SlotRules* rules = nullptr;          // [S]
    const LogitsRuleEntry* entries = nullptr;  // [S, E]
    uint32_t* counts = nullptr;                // [S, V] token tables
    int64_t T = 0, R = 0, V = 0, E = 0;  // step tokens, logit rows, vocabulary, entries a slot
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
