// Reference router (gate projection, sqrt-softplus, bias for selection only, or hash routing)
// and MoE (routed experts with clipped SwiGLU, each expert's rows dequantized once per step,
// then the shared expert).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/fp_codes.h"
#include "base/thread_pool.h"

namespace dsv4::cpu_ref {
namespace {

float softplus(float x) {
    return x > 20.0f ? x : std::log1p(std::exp(x));
}

}  // namespace

void route(const ops::RouteArgs& a) {
    std::vector<float> s(a.E), biased(a.E);
    std::vector<int32_t> order(a.E);
    for (int64_t t = 0; t < a.T; ++t) {
        const float* l = a.logits + t * a.E;
        for (int e = 0; e < a.E; ++e) s[e] = std::sqrt(softplus(l[e]));
        int32_t* sel = a.sel + t * a.k;
        if (a.tid2eid != nullptr) {
            std::copy(a.tid2eid + static_cast<int64_t>(a.ids[t]) * a.k,
                      a.tid2eid + static_cast<int64_t>(a.ids[t] + 1) * a.k, sel);
        } else {
            for (int e = 0; e < a.E; ++e) biased[e] = s[e] + (a.bias ? a.bias[e] : 0.0f);
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + a.k, order.end(),
                              [&](int32_t x, int32_t y) {
                                  return biased[x] > biased[y] || (biased[x] == biased[y] && x < y);
                              });
            std::copy(order.begin(), order.begin() + a.k, sel);
        }
        double sum = 0;
        for (int j = 0; j < a.k; ++j) sum += s[sel[j]];
        for (int j = 0; j < a.k; ++j)
            a.weight[t * a.k + j] = static_cast<float>(s[sel[j]] / sum * a.scale);
    }
}

void router(const ops::RouterArgs& a) {
    linear({a.x, a.gate, a.logits, a.T, a.E});
    route({a.logits, a.bias, a.tid2eid, a.ids, a.sel, a.weight, a.T, a.E, a.k, a.scale});
}

void moe(const ops::MoeArgs& a) {
    if (a.route != nullptr) {
        DSV4_ASSERT(a.route->sel == a.sel && a.route->weight == a.weight && a.route->T == a.T &&
                        a.route->k == a.k,
                    "moe: the routing must write this op's sel and weight");
        router(*a.route);
    }
    const CpuExperts& ex = *static_cast<const CpuExperts*>(a.experts->impl);
    const int64_t slots = a.T * a.k;
    // DeepSeek's Expert weights the SwiGLU output before w2; float mode weights after w2.
    const bool weight_first = a.act_fp8 || a.round_bf16;
    auto to_bf16 = [&](float v) { return a.round_bf16 ? bf16_round(v) : v; };
    // contrib[(t*k + j)*D + d]: expert sel[t][j]'s weighted output for token t; summed in j
    // order afterwards so the result does not depend on which tokens share the chunk.
    std::vector<float> contrib(static_cast<size_t>(slots) * a.D);
    // Reference numerics: the experts read x rounded to FP8 per 128.
    std::vector<float> xq;
    const float* x = a.x;
    if (a.act_fp8) {
        xq.resize(static_cast<size_t>(a.T) * a.D);
        fp8_activations(a.x, a.T, a.D, a.D, xq.data());
        x = xq.data();
    }
    // The experts held here (all of them, or a rank's share: ops/collective.h); a slot whose
    // expert another rank holds contributes zeros, which leave the sums below unchanged.
    const int first = a.experts->first;
    parallel_for(a.experts->E, 1, [&](int64_t e_begin, int64_t e_end) {
        std::vector<float> row(std::max(a.D, a.I)), g, u;
        std::vector<int64_t> users;
        for (int64_t e = e_begin; e < e_end; ++e) {
            users.clear();
            for (int64_t s = 0; s < slots; ++s)
                if (a.sel[s] == first + e) users.push_back(s);
            if (users.empty()) continue;
            const int64_t n = static_cast<int64_t>(users.size());
            g.assign(n * a.I, 0.0f);
            u.assign(n * a.I, 0.0f);
            for (int i = 0; i < a.I; ++i) {
                dequant_row(ex.w1[e], i, row.data());
                for (int64_t r = 0; r < n; ++r)
                    g[r * a.I + i] = to_bf16(
                        static_cast<float>(dot(x + (users[r] / a.k) * a.D, row.data(), a.D)));
                dequant_row(ex.w3[e], i, row.data());
                for (int64_t r = 0; r < n; ++r)
                    u[r * a.I + i] = to_bf16(
                        static_cast<float>(dot(x + (users[r] / a.k) * a.D, row.data(), a.D)));
            }
            swiglu({g.data(), u.data(), g.data(), n * a.I, a.swiglu_limit});
            if (weight_first) {
                // The reference weights the SwiGLU output, then rounds it for w2.
                for (int64_t r = 0; r < n; ++r) {
                    float* h = g.data() + r * a.I;
                    for (int i = 0; i < a.I; ++i) h[i] = to_bf16(h[i] * a.weight[users[r]]);
                    if (a.act_fp8) fp8_activations(h, 1, a.I, a.I, h);
                }
            }
            for (int d = 0; d < a.D; ++d) {
                dequant_row(ex.w2[e], d, row.data());
                for (int64_t r = 0; r < n; ++r) {
                    const float v =
                        to_bf16(static_cast<float>(dot(g.data() + r * a.I, row.data(), a.I)));
                    contrib[users[r] * a.D + d] = weight_first ? v : v * a.weight[users[r]];
                }
            }
        }
    });
    std::vector<int> order(a.k);
    for (int64_t t = 0; t < a.T; ++t) {
        float* out = a.out + t * a.D;
        std::fill(out, out + a.D, 0.0f);
        std::iota(order.begin(), order.end(), 0);
        // The bf16 reference mode sums in expert-id order, as DeepSeek's loop over experts does.
        if (a.round_bf16)
            std::sort(order.begin(), order.end(),
                      [&](int i, int j) { return a.sel[t * a.k + i] < a.sel[t * a.k + j]; });
        for (int j : order) {
            const float* c = contrib.data() + (t * a.k + j) * a.D;
            for (int d = 0; d < a.D; ++d) out[d] += c[d];
        }
    }
    if (a.shared_w1 != nullptr) {
        // The shared expert clips like the routed ones; added after the routed sum.
        float* g = a.shared_scratch;
        float* u = g + a.T * a.I;
        float* y = u + a.T * a.I;
        const ops::ActType f32 = ops::ActType::kF32;
        linear({a.x, a.shared_w1, g, a.T, a.I, 0, 0, 0, f32, f32, a.act_fp8, a.round_bf16});
        linear({a.x, a.shared_w3, u, a.T, a.I, 0, 0, 0, f32, f32, a.act_fp8, a.round_bf16});
        swiglu({g, u, g, a.T * a.I, a.swiglu_limit});
        if (a.round_bf16) round_trip({g, a.T, a.I, a.I, 1, ops::RoundTrip::kBf16});
        linear({g, a.shared_w2, y, a.T, a.D, 0, 0, 0, f32, f32, a.act_fp8, a.round_bf16});
        for (int64_t i = 0; i < a.T * a.D; ++i) a.out[i] += y[i];
    }
    if (a.round_bf16) round_trip({a.out, a.T, a.D, a.D, 1, ops::RoundTrip::kBf16});
}

}  // namespace dsv4::cpu_ref
