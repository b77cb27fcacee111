// Distance between two models' logits over the same tokens: what the quantization report
// (docs/numerics-quant.md) and its regression test measure.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace dsv4::testing {

struct LogitMetrics {
    double max_abs = 0;   // largest |quant - reference| over all positions and vocab entries
    double mean_abs = 0;  // mean |quant - reference|
    double top1 = 0;      // fraction of positions whose argmax agrees
    double kl_mean = 0;   // mean over positions of KL(reference || quant), nats
    double kl_max = 0;
};

// `ref` and `got` are [positions, vocab] row-major.
inline LogitMetrics compare_logits(const std::vector<float>& ref, const std::vector<float>& got,
                                   int64_t vocab) {
    LogitMetrics m;
    const int64_t n = static_cast<int64_t>(ref.size()) / vocab;
    if (n == 0 || ref.size() != got.size()) return m;
    int64_t agree = 0;
    double abs_sum = 0;
    for (int64_t p = 0; p < n; ++p) {
        const float* a = ref.data() + p * vocab;
        const float* b = got.data() + p * vocab;
        agree += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
        const double ma = *std::max_element(a, a + vocab), mb = *std::max_element(b, b + vocab);
        double za = 0, zb = 0;
        for (int64_t v = 0; v < vocab; ++v) {
            za += std::exp(a[v] - ma);
            zb += std::exp(b[v] - mb);
            const double d = std::fabs(static_cast<double>(a[v]) - b[v]);
            m.max_abs = std::max(m.max_abs, d);
            abs_sum += d;
        }
        // KL = sum_v pa (log pa - log pb), log p = x - max - log Z.
        double kl = 0;
        for (int64_t v = 0; v < vocab; ++v) {
            const double la = a[v] - ma - std::log(za), lb = b[v] - mb - std::log(zb);
            kl += std::exp(la) * (la - lb);
        }
        m.kl_mean += kl;
        m.kl_max = std::max(m.kl_max, kl);
    }
    m.top1 = static_cast<double>(agree) / static_cast<double>(n);
    m.kl_mean /= static_cast<double>(n);
    m.mean_abs = abs_sum / static_cast<double>(n * vocab);
    return m;
}

}  // namespace dsv4::testing
