// Launcher of the sampling op (ops/sample.h): one block per logit row, every top_k up to V, with
// the reference's xoshiro256** draws (speculative verification included). Rows must use
// distinct slots (one generator each). Numerics: docs/numerics-cuda.md ("sample").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/sample.h"

namespace dsv4::cuda {

// Rows keeping at most this many candidates are sorted in shared memory and walked in the
// reference's order; larger ones take the wide path (sample_sm90.cu).
inline constexpr int kSampleMaxTopK = 1024;

// Scratch of the split first pass (sample_sm90.cu): the finite check and the best candidate of
// each (row, slice), for up to max_parts of them; and the wide rows' candidate histograms
// ([rows, 4096] bins of mass lo / hi words and counts; all zero between launches).
struct SampleScratch {
    unsigned long long* best = nullptr;  // [max_parts]
    int* bad = nullptr;                  // [max_parts]
    int max_parts = 0;
    unsigned long long* hlo = nullptr;  // [kHistRows, kBins]
    unsigned long long* hhi = nullptr;  // [kHistRows, kBins]
    unsigned* hcnt = nullptr;           // [kHistRows, kBins]
    // The split log-probabilities: each (row, slice)'s largest logit, sum of exp(l - it) and top
    // keys, and each row's count of slices done (zero between launches).
    double* lp_max = nullptr;      // [max_parts]
    double* lp_sum = nullptr;      // [max_parts]
    uint64_t* lp_top = nullptr;    // [max_parts, kMaxTopLogprobs]
    unsigned* arrivals = nullptr;  // [max_parts]
};
// Bytes of the scratch for a GPU of sm_count SMs, and the scratch carved out of them (which
// must come zeroed).
int64_t sample_scratch_bytes(int sm_count);
SampleScratch sample_scratch(void* p, int sm_count);

// ws.best null: one launch, each row's block reading its whole row first. Otherwise rows of at
// least kSampleSplitMinV logits are first scanned by many blocks a row (a second launch), and
// in steps of at most 64 rows a third launch (many blocks a row) builds the histograms of the
// rows that sample from more than kSampleMaxTopK candidates (sample_sm90.cu, "wide path").
inline constexpr int64_t kSampleSplitMinV = 2048;
void launch_sample(const ops::SampleArgs& a, const SampleScratch& ws, cudaStream_t stream);

// The log-probabilities op (ops/sample.h). With the scratch and rows of kSampleSplitMinV logits
// or more: one launch of many blocks a row (slices as the sampler's), each reading its slice
// once for its largest logit, its sum of exponentials and its top n, the row's last block
// combining them. Otherwise one block a row, reading the row three times (the largest logit, the
// sum of exponentials in double, the top-n radix select) and once more for the top n's ids.
// n <= kMaxTopLogprobs.
void launch_logprobs(const ops::LogprobsArgs& a, const SampleScratch& ws, cudaStream_t stream);

// The request logits rules (ops/sample.h): a launch marking the step's tokens, then a block for
// each 4096 logits of a sampled row (logits_rules_sm90.cu).
void launch_logits_rules(const ops::LogitsRulesArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
