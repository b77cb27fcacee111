#include "model/rope_table.h"

#include <algorithm>
#include <cmath>

namespace dsv4 {

std::vector<float> rope_inv_freq(const RopeParams& p, int rope_dim) {
    const int half = rope_dim / 2;
    std::vector<float> inv(half);
    for (int i = 0; i < half; ++i) {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
        inv[i] = 1.0f / std::pow(static_cast<float>(p.theta), exponent);
    }
    if (!p.yarn) return inv;
    // YaRN: pairs below `low` keep their frequency, pairs above `high` are divided by the
    // factor, a linear ramp in between; low/high are floored/ceiled and clamped.
    const double pi = 3.14159265358979323846;
    auto corr = [&](double rotations) {
        return rope_dim * std::log(p.original_max_position / (rotations * 2 * pi)) /
               (2 * std::log(p.theta));
    };
    double low = std::max(0.0, std::floor(corr(p.beta_fast)));
    double high = std::min(static_cast<double>(rope_dim - 1), std::ceil(corr(p.beta_slow)));
    if (high == low) high += 0.001;
    for (int i = 0; i < half; ++i) {
        const float ramp = std::clamp(static_cast<float>((i - low) / (high - low)), 0.0f, 1.0f);
        const float extrapolation = 1.0f - ramp;
        const float interpolated = inv[i] / static_cast<float>(p.factor);
        inv[i] = interpolated * (1.0f - extrapolation) + inv[i] * extrapolation;
    }
    return inv;
}

}  // namespace dsv4
