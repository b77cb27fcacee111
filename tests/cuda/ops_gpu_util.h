// Helpers of the CUDA op tests (ops_gpu_test.cc, numerics_gpu_test.cc): a CUDA backend, device
// copies of host vectors and step descriptors, random data, and the per-element tolerance check
// that prints its worst error over tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "base/check.h"
#include "ops/backend.h"
#include "ops/step.h"

namespace dsv4::ops_gpu_test {

inline std::unique_ptr<Backend> make_gpu() {
    auto b = make_cuda_backend();
    DSV4_ASSERT(b.has_value(), b.status().message());
    return std::move(*b);
}

// A device array holding a copy of a host vector.
template <typename T>
struct Dev {
    Backend* be = nullptr;
    T* p = nullptr;
    size_t n = 0;
    Dev(Backend& b, const std::vector<T>& h) : be(&b), n(h.size()) {
        p = static_cast<T*>(b.alloc(std::max<size_t>(n, 1) * sizeof(T)));
        b.upload(p, h.data(), n * sizeof(T));
    }
    Dev(Backend& b, size_t count) : be(&b), n(count) {
        p = static_cast<T*>(b.alloc(std::max<size_t>(n, 1) * sizeof(T)));
    }
    Dev(const Dev&) = delete;
    Dev& operator=(const Dev&) = delete;
    ~Dev() { be->free(p); }
    void set(const std::vector<T>& h) { be->upload(p, h.data(), h.size() * sizeof(T)); }
    std::vector<T> get() const {
        std::vector<T> h(n);
        be->download(h.data(), p, n * sizeof(T));
        be->synchronize();
        return h;
    }
};

// The step descriptor's arrays on the device.
struct DevStep {
    Dev<int32_t> ids, tok_row, row_slot, row_start, row_len;
    Dev<int64_t> tok_pos, row_pos0;
    int T, B;
    DevStep(Backend& b, const ops::HostStep& h)
        : ids(b, h.ids),
          tok_row(b, h.tok_row),
          row_slot(b, h.row_slot),
          row_start(b, h.row_start),
          row_len(b, h.row_len),
          tok_pos(b, h.tok_pos),
          row_pos0(b, h.row_pos0),
          T(h.T()),
          B(h.B()) {}
    ops::StepDesc view() const {
        return {ids.p, tok_row.p, tok_pos.p, row_slot.p, row_start.p, row_len.p, row_pos0.p, T, B};
    }
};

inline std::vector<float> randn(size_t n, std::mt19937& rng, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// |gpu - ref| <= atol + rtol * |ref| per element, NaN never passes. Prints the worst ratio.
inline void expect_close(const char* what, const std::vector<float>& gpu,
                         const std::vector<float>& ref, double rtol, double atol) {
    ASSERT_EQ(gpu.size(), ref.size()) << what;
    double worst = 0, worst_abs = 0;
    size_t at = 0, bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double err = std::fabs(static_cast<double>(gpu[i]) - ref[i]);
        const double tol = atol + rtol * std::fabs(ref[i]);
        const double r =
            std::isfinite(gpu[i]) ? (tol > 0 ? err / tol : (err > 0 ? 1e30 : 0)) : 1e30;
        if (r > worst) {
            worst = r;
            at = i;
        }
        worst_abs = std::max(worst_abs, err);
        bad += r > 1.0;
    }
    std::printf("[ops] %-34s n=%zu worst err/tol = %.3g (max abs err %.3g)\n", what, ref.size(),
                worst, worst_abs);
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements out of tolerance; worst at " << at
                       << ": gpu " << gpu[at] << " ref " << ref[at];
}

inline float max_abs(const std::vector<float>& v) {
    float m = 0;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
}

}  // namespace dsv4::ops_gpu_test
