// Reference mHC: pre (RMS over n*D, sigmoid gates, Sinkhorn), post (post ⊗ F + Cᵀ X), head.
#include <algorithm>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/check.h"
#include "base/thread_pool.h"

namespace dsv4::cpu_ref {
namespace {

// mix = (fn · x) / rms(x), x = the flattened streams of one token.
void hc_mix(const float* x, const float* fn, int rows, int64_t width, float eps, float* mix) {
    const double ms = dot(x, x, width) / static_cast<double>(width);
    const double inv = 1.0 / std::sqrt(ms + eps);
    for (int k = 0; k < rows; ++k) mix[k] = static_cast<float>(dot(fn + k * width, x, width) * inv);
}

// Row softmax + eps, column-normalise, then (iters - 1) x (row-normalise, column-normalise).
void sinkhorn(float* C, int n, int iters, float eps) {
    auto col_norm = [&] {
        for (int k = 0; k < n; ++k) {
            float s = 0;
            for (int j = 0; j < n; ++j) s += C[j * n + k];
            for (int j = 0; j < n; ++j) C[j * n + k] /= (s + eps);
        }
    };
    for (int j = 0; j < n; ++j) {
        float* row = C + j * n;
        const float mx = *std::max_element(row, row + n);
        float s = 0;
        for (int k = 0; k < n; ++k) s += (row[k] = std::exp(row[k] - mx));
        for (int k = 0; k < n; ++k) row[k] = row[k] / s + eps;
    }
    col_norm();
    for (int it = 1; it < iters; ++it) {
        for (int j = 0; j < n; ++j) {
            float s = 0;
            for (int k = 0; k < n; ++k) s += C[j * n + k];
            for (int k = 0; k < n; ++k) C[j * n + k] /= (s + eps);
        }
        col_norm();
    }
}

}  // namespace

void hc_pre(const ops::HcPreArgs& a) {
    if (a.post_in != nullptr) {
        DSV4_ASSERT(a.post_in->out == a.x, "hc_pre: the fused hc_post must write x");
        hc_post(*a.post_in);
    }
    const int n = a.n;
    const int64_t width = static_cast<int64_t>(n) * a.D;
    const int mix_rows = (2 + n) * n;
    parallel_for(a.T, 1, [&](int64_t begin, int64_t end) {
        std::vector<float> mix(mix_rows);
        for (int64_t t = begin; t < end; ++t) {
            const float* x = a.x + t * width;
            hc_mix(x, a.fn, mix_rows, width, a.norm_eps, mix.data());
            std::vector<float> pre(n);
            for (int i = 0; i < n; ++i) {
                pre[i] = sigmoid(mix[i] * a.scale[0] + a.base[i]) + a.hc_eps;
                a.post[t * n + i] = 2.0f * sigmoid(mix[n + i] * a.scale[1] + a.base[n + i]);
            }
            float* C = a.comb + t * n * n;
            for (int jk = 0; jk < n * n; ++jk)
                C[jk] = mix[2 * n + jk] * a.scale[2] + a.base[2 * n + jk];
            sinkhorn(C, n, a.sinkhorn_iters, a.hc_eps);
            float* y = a.y + t * a.D;
            for (int d = 0; d < a.D; ++d) {
                float s = 0;
                for (int i = 0; i < n; ++i) s += pre[i] * x[i * a.D + d];
                y[d] = s;
            }
            if (a.round_bf16) round_trip({y, 1, a.D, a.D, 1, ops::RoundTrip::kBf16});
        }
    });
    if (a.y_norm != nullptr)
        rms_norm({a.y, a.norm_weight, a.y_norm, a.T, a.D, a.y_norm_eps, a.round_bf16});
}

void hc_post(const ops::HcPostArgs& a) {
    const int n = a.n;
    for (int64_t t = 0; t < a.T; ++t) {
        const float* x = a.x + t * n * a.D;
        const float* C = a.comb + t * n * n;
        const float* f = a.f + t * a.D;
        float* out = a.out + t * n * a.D;
        for (int k = 0; k < n; ++k) {
            for (int d = 0; d < a.D; ++d) {
                float s = a.post[t * n + k] * f[d];
                for (int j = 0; j < n; ++j) s += C[j * n + k] * x[j * a.D + d];
                out[k * a.D + d] = s;
            }
        }
        if (a.round_bf16) round_trip({out, 1, n * a.D, n * a.D, 1, ops::RoundTrip::kBf16});
    }
}

void hc_head(const ops::HcHeadArgs& a) {
    const int n = a.n;
    const int64_t width = static_cast<int64_t>(n) * a.D;
    std::vector<float> mix(n), pre(n);
    for (int64_t t = 0; t < a.T; ++t) {
        const float* x = a.x + t * width;
        hc_mix(x, a.fn, n, width, a.norm_eps, mix.data());
        for (int i = 0; i < n; ++i) pre[i] = sigmoid(mix[i] * a.scale[0] + a.base[i]) + a.hc_eps;
        for (int d = 0; d < a.D; ++d) {
            float s = 0;
            for (int i = 0; i < n; ++i) s += pre[i] * x[i * a.D + d];
            a.out[t * a.D + d] = s;
        }
        if (a.round_bf16) round_trip({a.out + t * a.D, 1, a.D, a.D, 1, ops::RoundTrip::kBf16});
    }
}

void add_to_streams(const ops::AddToStreamsArgs& a) {
    for (int64_t t = 0; t < a.T; ++t)
        for (int i = 0; i < a.n; ++i) {
            float* s = a.streams + (t * a.n + i) * a.D;
            const float* x = a.x + t * a.D;
            for (int d = 0; d < a.D; ++d) s[d] = x[d] + s[d];
        }
}

}  // namespace dsv4::cpu_ref
