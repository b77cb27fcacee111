// The CPU reference: plain loops in float32 (dot products and norms accumulate in double),
// one file per op family. This is the oracle every other backend is tested against.
#pragma once

#include <cmath>

#include "ops/attention.h"
#include "ops/compressor.h"
#include "ops/embed.h"
#include "ops/hyper_conn.h"
#include "ops/indexer.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace dsv4::cpu_ref {

void embed(const ops::EmbedArgs& a);
void linear(const ops::LinearArgs& a);
void swiglu(const ops::SwigluArgs& a);
void rms_norm(const ops::RmsNormArgs& a);
void rope(const ops::RopeArgs& a);
void hc_pre(const ops::HcPreArgs& a);
void hc_post(const ops::HcPostArgs& a);
void hc_head(const ops::HcHeadArgs& a);
void attention(const ops::AttentionArgs& a);
void ring_write(const ops::RingWriteArgs& a);
void compress(const ops::CompressArgs& a);
void indexer_topk(const ops::IndexerTopkArgs& a);
void route(const ops::RouteArgs& a);
void moe(const ops::MoeArgs& a);

// Shared scalar helpers.
double dot(const float* a, const float* b, int64_t n);
inline float sigmoid(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}

}  // namespace dsv4::cpu_ref
