// Reference linear (dequantize one weight row at a time, never the whole matrix) and SwiGLU.
#include <algorithm>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
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
    const QuantWeight& w = *a.w;
    const int64_t K = w.cols;
    const int64_t ldx = a.ldx ? a.ldx : K;
    const int64_t ldy = a.ldy ? a.ldy : a.N;
    DSV4_ASSERT(a.row0 >= 0 && a.row0 + a.N <= w.rows, "rows [", a.row0, ", ", a.row0 + a.N,
                ") outside weight of ", w.rows);
    parallel_for(a.N, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, K * a.M)),
                 [&](int64_t begin, int64_t end) {
                     thread_local std::vector<float> row;
                     row.resize(K);
                     for (int64_t n = begin; n < end; ++n) {
                         dequant_row(w, a.row0 + n, row.data());
                         for (int64_t m = 0; m < a.M; ++m)
                             a.y[m * ldy + n] =
                                 static_cast<float>(dot(a.x + m * ldx, row.data(), K));
                     }
                 });
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
