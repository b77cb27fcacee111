// The CPU reference: plain loops in float32 (dot products and norms accumulate in double),
// one file per op family. This is the oracle every other backend is tested against. Step
// descriptors, caches and weights are host memory here; a weight handle's impl is the
// checkpoint's QuantWeight (read in place), an experts handle's impl a CpuExperts.
#pragma once

#include <cmath>
#include <vector>

#include "ops/backend.h"

namespace dsv4::cpu_ref {

struct CpuExperts {
    std::vector<QuantWeight> w1, w3, w2;  // [E] each
};

inline const QuantWeight& quant(const ops::Weight& w) {
    return *static_cast<const QuantWeight*>(w.impl);
}
// A handle for a QuantWeight the caller keeps alive (CPU backend and tests).
inline ops::Weight wrap(const QuantWeight& q) {
    return {q.rows, q.cols, &q};
}
inline ops::ExpertWeights wrap(const CpuExperts& e, int I, int D) {
    return {static_cast<int>(e.w1.size()), I, D, &e};
}

void embed(const ops::EmbedArgs& a);
void linear(const ops::LinearArgs& a);
void linear_group(const ops::LinearGroupArgs& a);
void swiglu(const ops::SwigluArgs& a);
void rms_norm(const ops::RmsNormArgs& a);
void rope(const ops::RopeArgs& a);
void hc_pre(const ops::HcPreArgs& a);
void hc_post(const ops::HcPostArgs& a);
void hc_head(const ops::HcHeadArgs& a);
void add_to_streams(const ops::AddToStreamsArgs& a);
void attention(const ops::AttentionArgs& a);
void ring_write(const ops::RingWriteArgs& a);
void compress(const ops::CompressArgs& a);
void indexer_topk(const ops::IndexerTopkArgs& a);
void route(const ops::RouteArgs& a);
void router(const ops::RouterArgs& a);
void moe(const ops::MoeArgs& a);
void gather_rows(const ops::GatherRowsArgs& a);
void sample(const ops::SampleArgs& a);
void logprobs(const ops::LogprobsArgs& a);
void logits_rules(const ops::LogitsRulesArgs& a);
void round_trip(const ops::RoundTripArgs& a);
// x [rows, K] (rows ldx apart) rounded to FP8 per 128 along K into out [rows, K] (the
// reference's act_quant; a last block shorter than 128 is its own block).
void fp8_activations(const float* x, int64_t rows, int64_t K, int64_t ldx, float* out);
// One draw for one row (the op's body; the state advances only when a draw is needed).
int32_t sample_row(const float* logits, int64_t V, const SamplingParams& p, uint64_t state[4],
                   int32_t draft = -1);

// Shared scalar helpers.
double dot(const float* a, const float* b, int64_t n);
inline float sigmoid(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}

}  // namespace dsv4::cpu_ref
