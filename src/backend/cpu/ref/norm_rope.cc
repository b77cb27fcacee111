// Reference RMSNorm (weighted / unweighted), interleaved partial RoPE, embedding, row gather.
#include <algorithm>

#include "backend/cpu/ref/ref_ops.h"
#include "base/fp_codes.h"

namespace dsv4::cpu_ref {

namespace {

// The per-head q norm as DeepSeek writes it on a bf16 tensor (ops/norm.h): torch rounds the
// result of every elementwise op and of the mean (accumulated in fp32) to bf16.
void rms_norm_bf16_ops(const float* x, float* y, int dim, float eps) {
    double sum = 0;
    for (int i = 0; i < dim; ++i) sum += bf16_round(x[i] * x[i]);
    const float mean = bf16_round(static_cast<float>(sum / dim));
    const float inv = bf16_round(static_cast<float>(1.0 / std::sqrt(bf16_round(mean + eps))));
    for (int i = 0; i < dim; ++i) y[i] = bf16_round(x[i] * inv);
}

}  // namespace

void rms_norm(const ops::RmsNormArgs& a) {
    for (int64_t r = 0; r < a.rows; ++r) {
        const float* x = a.x + r * a.dim;
        float* y = a.out + r * a.dim;
        if (a.round_bf16 && a.weight == nullptr) {
            rms_norm_bf16_ops(x, y, a.dim, a.eps);
            continue;
        }
        const double ms = dot(x, x, a.dim) / a.dim;
        const float inv = static_cast<float>(1.0 / std::sqrt(ms + a.eps));
        for (int i = 0; i < a.dim; ++i) y[i] = x[i] * inv * (a.weight ? a.weight[i] : 1.0f);
        if (a.round_bf16) round_trip({y, 1, a.dim, a.dim, 1, ops::RoundTrip::kBf16});
    }
    if (const ops::FusedRope* r = a.rope; r != nullptr && r->inv_freq != nullptr)
        rope({a.out, r->inv_freq, r->pos, a.rows / r->heads, r->heads, a.dim, r->rope_dim,
              r->inverse, r->scale, a.round_bf16});
    if (a.also != nullptr) rms_norm(*a.also);
}

void rope(const ops::RopeArgs& a) {
    const int half = a.rope_dim / 2;
    const int off = a.head_dim - a.rope_dim;
    for (int64_t r = 0; r < a.rows; ++r) {
        // Angles in float32 like transformers (position * inv_freq), cos/sin correctly rounded.
        const float pos = static_cast<float>(a.pos[r]);
        for (int i = 0; i < half; ++i) {
            const float angle = pos * a.inv_freq[i];
            const float c = static_cast<float>(std::cos(static_cast<double>(angle))) * a.scale;
            float s = static_cast<float>(std::sin(static_cast<double>(angle))) * a.scale;
            if (a.inverse) s = -s;
            for (int h = 0; h < a.heads; ++h) {
                float* p = a.x + (r * a.heads + h) * a.head_dim + off + 2 * i;
                const float x0 = p[0], x1 = p[1];
                p[0] = x0 * c - x1 * s;
                p[1] = x0 * s + x1 * c;
            }
        }
        if (a.round_bf16)
            for (int h = 0; h < a.heads; ++h)
                round_trip({a.x + (r * a.heads + h) * a.head_dim + off, 1, a.rope_dim, a.rope_dim,
                            1, ops::RoundTrip::kBf16});
    }
}

void embed(const ops::EmbedArgs& a) {
    const int64_t D = a.table->cols;
    for (int64_t t = 0; t < a.T; ++t) {
        float* dst = a.out + t * a.n * D;
        dequant_row(quant(*a.table), a.ids[t], dst);
        for (int i = 1; i < a.n; ++i) std::copy(dst, dst + D, dst + i * D);
    }
}

void gather_rows(const ops::GatherRowsArgs& a) {
    for (int64_t r = 0; r < a.R; ++r)
        std::copy(a.src + a.idx[r] * a.width, a.src + (a.idx[r] + 1) * a.width,
                  a.dst + r * a.width);
}

}  // namespace dsv4::cpu_ref
