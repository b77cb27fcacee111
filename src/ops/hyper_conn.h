// Op contracts: manifold-constrained hyper-connections (mHC) around each sub-block, and the
// final hc-head collapse. n = hc_mult residual streams of width D.
#pragma once

#include <cstdint>

namespace dsv4::ops {

struct HcPostArgs {
    const float* f = nullptr;     // [T, D] sub-block output
    const float* x = nullptr;     // [T, n, D] streams entering the sub-block
    const float* post = nullptr;  // [T, n]
    const float* comb = nullptr;  // [T, n, n]
    float* out = nullptr;         // [T, n, D]; must not alias x
    int64_t T = 0;
    int n = 0, D = 0;
    bool round_bf16 = false;  // out rounded to bf16 (the bf16 reference mode's streams)
};

struct HcPreArgs {
    const float* x = nullptr;      // [T, n, D] residual streams
    const float* fn = nullptr;     // [(2+n)n, n*D]
    const float* base = nullptr;   // [(2+n)n]
    const float* scale = nullptr;  // [3]
    float* y = nullptr;            // [T, D] collapsed input of the sub-block
    float* post = nullptr;         // [T, n]
    float* comb = nullptr;         // [T, n, n] Sinkhorn-normalised, row j = source stream
    int64_t T = 0;
    int n = 0, D = 0, sinkhorn_iters = 0;
    float norm_eps = 1e-6f, hc_eps = 1e-6f;
    bool round_bf16 = false;  // y rounded to bf16 (the bf16 reference mode); post, comb stay f32
    // The sub-block's input RMSNorm fused (optional): y_norm = rms_norm(y) * norm_weight with
    // eps y_norm_eps, what hc_pre then rms_norm (same round_bf16) give.
    const float* norm_weight = nullptr;  // [D]
    float* y_norm = nullptr;             // [T, D]; nullptr: no norm
    float y_norm_eps = 1e-6f;
    // The previous sub-block's hc_post fused in front (optional): x is first written as
    // hc_post(*post_in) (post_in->out == x), what hc_post then hc_pre give. Its post and comb may
    // be this op's: they are read before they are written.
    const HcPostArgs* post_in = nullptr;
};

// streams[t, i] += x[t] for every stream i (the MTP block's input: the next token's projected
// embedding added to each of the projected streams).
struct AddToStreamsArgs {
    const float* x = nullptr;  // [T, D]
    float* streams = nullptr;  // [T, n, D]
    int64_t T = 0;
    int n = 0, D = 0;
};

struct HcHeadArgs {
    const float* x = nullptr;      // [T, n, D]
    const float* fn = nullptr;     // [n, n*D]
    const float* base = nullptr;   // [n]
    const float* scale = nullptr;  // [1]
    float* out = nullptr;          // [T, D]
    int64_t T = 0;
    int n = 0, D = 0;
    float norm_eps = 1e-6f, hc_eps = 1e-6f;
    bool round_bf16 = false;  // out rounded to bf16 (the bf16 reference mode)
};

}  // namespace dsv4::ops
