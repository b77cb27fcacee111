// Reference linear (dequantize one weight row at a time, never the whole matrix), the group of
// linears over one x, and SwiGLU.
#include <algorithm>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/fp_codes.h"
#include "base/thread_pool.h"

namespace dsv4::cpu_ref {

double dot(const float* a, const float* b, int64_t n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += static_cast<double>(a[i]) * b[i];
        s1 += static_cast<double>(a[i + 1]) * b[i + 1];
        s2 += static_cast<double>(a[i + 2]) * b[i + 2];
        s3 += static_cast<double>(a[i + 3]) * b[i + 3];
    }
    for (; i < n; ++i) s0 += static_cast<double>(a[i]) * b[i];
    return (s0 + s1) + (s2 + s3);
}

void linear(const ops::LinearArgs& a) {
    if (a.then != nullptr) {  // (the plain sequence)
        ops::LinearArgs first = a;
        first.then = nullptr;
        linear(first);
        linear(*a.then);
        return;
    }
    if (a.groups > 1) {
        for (int j = 0; j < a.groups; ++j) linear(ops::linear_group_part(a, a.w->cols, j));
        return;
    }
    const QuantWeight& w = quant(*a.w);
    const int64_t K = w.cols;
    const int64_t ldx = a.ldx ? a.ldx : K;
    const int64_t ldy = a.ldy ? a.ldy : a.N;
    DSV4_ASSERT(a.row0 >= 0 && a.row0 + a.N <= w.rows, "rows [", a.row0, ", ", a.row0 + a.N,
                ") outside weight of ", w.rows);
    // bf16 activations are widened once (exact), so both types share the f32 loop.
    const float* x = static_cast<const float*>(a.x);
    std::vector<float> xf;
    if (a.x_type == ops::ActType::kBF16) {
        xf.resize(static_cast<size_t>(a.M) * K);
        const uint16_t* xb = static_cast<const uint16_t*>(a.x);
        for (int64_t m = 0; m < a.M; ++m)
            for (int64_t k = 0; k < K; ++k) xf[m * K + k] = bf16_to_f32(xb[m * ldx + k]);
        x = xf.data();
    }
    int64_t xs = a.x_type == ops::ActType::kBF16 ? K : ldx;
    std::vector<float> xq;
    if (a.act_fp8) {
        xq.resize(static_cast<size_t>(a.M) * K);
        fp8_activations(x, a.M, K, xs, xq.data());
        x = xq.data();
        xs = K;
    }
    parallel_for(a.N, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, K * a.M)),
                 [&](int64_t begin, int64_t end) {
                     thread_local std::vector<float> row;
                     row.resize(K);
                     for (int64_t n = begin; n < end; ++n) {
                         dequant_row(w, a.row0 + n, row.data());
                         for (int64_t m = 0; m < a.M; ++m) {
                             const float v = static_cast<float>(dot(x + m * xs, row.data(), K));
                             if (a.y_type == ops::ActType::kBF16)
                                 static_cast<uint16_t*>(a.y)[m * ldy + n] = f32_to_bf16(v);
                             else
                                 static_cast<float*>(a.y)[m * ldy + n] =
                                     a.round_bf16 ? bf16_round(v) : v;
                         }
                     }
                 });
}

void linear_group(const ops::LinearGroupArgs& a) {
    DSV4_ASSERT(a.n_out >= 0 && a.n_out <= ops::LinearGroupArgs::kMaxOutputs, a.n_out);
    for (int i = 0; i < a.n_out; ++i)
        linear({a.x, a.out[i].w, a.out[i].y, a.M, a.out[i].w->rows, 0, 0, 0, ops::ActType::kF32,
                ops::ActType::kF32, a.out[i].act_fp8, a.out[i].round_bf16});
    for (const ops::Clear& c : a.clear)
        if (c.p != nullptr) std::fill(c.p, c.p + c.n, 0.0f);
}

void swiglu(const ops::SwigluArgs& a) {
    const float L = a.limit;
    for (int64_t i = 0; i < a.n; ++i) {
        float g = a.gate[i], u = a.up[i];
        if (L > 0) {
            g = std::min(g, L);
            u = std::clamp(u, -L, L);
        }
        a.out[i] = g * sigmoid(g) * u;
    }
}

}  // namespace dsv4::cpu_ref
