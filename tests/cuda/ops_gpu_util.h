// Helpers of the CUDA op tests (ops_gpu_test.cc, numerics_gpu_test.cc): a CUDA backend, device
// copies of host vectors and step descriptors, random data, and the per-element tolerance check
// that prints its worst error over tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/cuda_backend.h"
#include "base/check.h"
#include "cuda_test_util.h"
#include "formats/cache_row.h"
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

// |gpu - ref| <= tol[i] per element (a bound per output), NaN never passes.
inline void expect_within(const char* what, const std::vector<float>& gpu,
                          const std::vector<float>& ref, const std::vector<double>& tol) {
    ASSERT_EQ(gpu.size(), ref.size()) << what;
    ASSERT_EQ(tol.size(), ref.size()) << what;
    double worst = 0, worst_abs = 0;
    size_t at = 0, bad = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double err = std::fabs(static_cast<double>(gpu[i]) - ref[i]);
        const double r =
            std::isfinite(gpu[i]) ? (tol[i] > 0 ? err / tol[i] : (err > 0 ? 1e30 : 0)) : 1e30;
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
                       << ": gpu " << gpu[at] << " ref " << ref[at] << " tol " << tol[at];
}

// |gpu - ref| <= atol + rtol * |ref| per element, NaN never passes. Prints the worst ratio.
inline void expect_close(const char* what, const std::vector<float>& gpu,
                         const std::vector<float>& ref, double rtol, double atol) {
    std::vector<double> tol(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) tol[i] = atol + rtol * std::fabs(ref[i]);
    expect_within(what, gpu, ref, tol);
}

inline float max_abs(const std::vector<float>& v) {
    float m = 0;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
}

// Decode rows and prefill chunks in 5 slots, at positions that cross window wrap-arounds and
// compressor block ends.
inline ops::HostStep mixed_step() {
    ops::HostStep s;
    s.add_row(3, 41, 1);
    s.add_row(0, 0, 9);
    s.add_row(4, 17, 6);
    s.add_row(1, 63, 1);
    s.add_row(2, 26, 13);
    return s;
}

// Captures run() into *graph on stream s under global capture mode, where any host
// synchronisation inside it would invalidate the capture.
template <typename Run>
bool capture_graph(cudaStream_t s, Run run, cuda::CudaGraph* graph) {
    cuda::CudaGraph::begin_capture(s);
    run();
    return cuda::CudaGraph::end_capture(s, graph) == cudaSuccess;
}

struct CompressCase {
    int coff = 1, m = 4, hd = 36, rope_dim = 12;
    bool with_norm = true;
    ops::RoundTrip entry_round_trip = ops::RoundTrip::kNone;
    // The entries' cache format: typed rows are stored cache_row_bytes apart in the entry
    // vectors' storage (never wider than float32 rows), the rest of it zeros.
    CacheRowFormat entry_format{};
};

// States and entries after two consecutive compressor steps from empty states (mixed_step(),
// then rows continuing slots 0, 2 and 4), on the device and in the CPU reference; with an entry
// round trip also the device's entries of the same steps without it (`gpu_plain_entries`).
struct CompressRun {
    std::vector<float> gpu_kv, gpu_gate, gpu_entries, gpu_plain_entries;
    std::vector<float> ref_kv, ref_gate, ref_entries;
};

inline CompressRun run_compress(Backend& be, const CompressCase& c, uint32_t seed) {
    std::mt19937 rng(seed);
    const int S = 5, coff = c.coff, m = c.m, hd = c.hd, rd = c.rope_dim, width = coff * hd;
    const int64_t n_entries = 30, state = int64_t{coff} * m * width;
    const auto ape = randn(m * width, rng), norm = randn(hd, rng);
    std::vector<float> inv(rd / 2);
    for (int i = 0; i < rd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rd);
    CompressRun out;
    out.ref_kv.assign(S * state, 0.0f);
    out.ref_gate.assign(S * state, -std::numeric_limits<float>::infinity());
    out.ref_entries.assign(S * n_entries * hd, 0.0f);
    Dev<float> dape(be, ape), dnorm(be, norm), dinv(be, inv);
    Dev<float> dskv(be, out.ref_kv), dsgate(be, out.ref_gate), dent(be, out.ref_entries);
    Dev<float> pskv(be, out.ref_kv), psgate(be, out.ref_gate), pent(be, out.ref_entries);
    const bool plain = c.entry_round_trip != ops::RoundTrip::kNone;
    ops::HostStep steps[2];
    steps[0] = mixed_step();
    steps[1].add_row(0, 9, 1);  // continues slot 0
    steps[1].add_row(2, 39, 17);
    steps[1].add_row(4, 23, 1);
    for (const ops::HostStep& st : steps) {
        const auto kv = randn(int64_t{st.T()} * width, rng);
        const auto gate = randn(int64_t{st.T()} * width, rng);
        DevStep ds(be, st);
        Dev<float> dkv(be, kv), dgate(be, gate);
        ops::CompressArgs a;
        a.n_entries = n_entries;
        a.m = m;
        a.hd = hd;
        a.coff = coff;
        a.rope_dim = rd;
        a.rope_scale = 1.0f;
        a.entry_round_trip = c.entry_round_trip;
        a.entry_format = c.entry_format;
        ops::CompressArgs g = a, r = a;
        g.kv = dkv.p, g.gate = dgate.p, g.ape = dape.p, g.norm = c.with_norm ? dnorm.p : nullptr;
        g.inv_freq = dinv.p, g.state_kv = dskv.p, g.state_gate = dsgate.p, g.entries = dent.p;
        g.step = ds.view();
        r.kv = kv.data(), r.gate = gate.data(), r.ape = ape.data();
        r.norm = c.with_norm ? norm.data() : nullptr;
        r.inv_freq = inv.data(), r.state_kv = out.ref_kv.data(), r.state_gate = out.ref_gate.data();
        r.entries = out.ref_entries.data(), r.step = st.view();
        be.compress(g);
        if (plain) {
            ops::CompressArgs p = g;
            p.entry_round_trip = ops::RoundTrip::kNone;
            p.state_kv = pskv.p, p.state_gate = psgate.p, p.entries = pent.p;
            be.compress(p);
        }
        cpu_ref::compress(r);
    }
    out.gpu_kv = dskv.get();
    out.gpu_gate = dsgate.get();
    out.gpu_entries = dent.get();
    if (plain) out.gpu_plain_entries = pent.get();
    return out;
}

// Worst error over the GEMV bound (2e-5 + 2^-16 of sum |w x|) of y [M][ldy] columns
// [0, N) against rows [row0, row0 + N) of reference_gemv's products of x [M][K].
inline double worst_over_bound(const QuantWeight& w, const std::vector<float>& x, int64_t M,
                               int64_t K, int64_t ldx, const std::vector<float>& y, int64_t ldy,
                               int64_t row0, int64_t N, int64_t* bad) {
    std::vector<float> xd(M * K);
    for (int64_t m = 0; m < M; ++m)
        std::copy(x.begin() + m * ldx, x.begin() + m * ldx + K, xd.begin() + m * K);
    std::vector<double> ref(M * w.rows), abs_sum(M * w.rows);
    cuda::test::reference_gemv(w, xd.data(), M, ref.data(), abs_sum.data());
    double worst = 0;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            const double r = ref[m * w.rows + row0 + n];
            const double got = y[m * ldy + n];
            const double err = std::fabs(got - r);
            const double tol = (2e-5 + 0x1p-16) * abs_sum[m * w.rows + row0 + n] + 1e-30;
            worst = std::max(worst, std::isfinite(got) ? err / tol : 1e30);
            *bad += !(err <= tol);
        }
    return worst;
}

// linear_group over `parts` (the packed weight `packed`'s, in order) on x [M, K] on the device,
// with `clears` (LinearGroupArgs::clear) when given: each part's output [M, rows], copied back.
inline std::vector<std::vector<float>> run_linear_group(
    Backend& be, const ops::Weight& packed, const std::vector<ops::Weight>& parts, const float* dx,
    int64_t M, const ops::Clear (*clears)[ops::kMaxClears] = nullptr) {
    std::vector<std::unique_ptr<Dev<float>>> dy;
    ops::LinearGroupArgs g{dx, {}, static_cast<int>(parts.size()), M, &packed};
    if (clears != nullptr) std::copy(std::begin(*clears), std::end(*clears), std::begin(g.clear));
    for (size_t i = 0; i < parts.size(); ++i) {
        dy.push_back(std::make_unique<Dev<float>>(be, M * parts[i].rows));
        g.out[i] = {&parts[i], dy.back()->p};
    }
    be.linear_group(g);
    std::vector<std::vector<float>> y;
    for (const auto& d : dy) y.push_back(d->get());
    return y;
}

// Rows of `width` floats as the cache stores them in f.
inline std::vector<uint8_t> stored_rows(const CacheRowFormat& f, int width,
                                        const std::vector<float>& x) {
    const int64_t rb = cache_row_bytes(f, width), rows = static_cast<int64_t>(x.size()) / width;
    std::vector<uint8_t> out(rows * rb);
    for (int64_t r = 0; r < rows; ++r)
        encode_cache_row(f, width, x.data() + r * width, out.data() + r * rb);
    return out;
}

// A step of 11 tokens (the cluster kernel: more than 8): slices and key tiles cut short, tokens
// of a row at mixed valid counts, tokens keeping fewer than K (some blocks of the cluster with
// no entry, none valid at all).
inline ops::HostStep indexer_cluster_step() {
    ops::HostStep st;
    st.add_row(1, 8191, 1);  // 2048 entries: 128 per block, 4 full tiles of 32
    st.add_row(0, 5000, 1);  // 1250: 79 per block (tiles of 32, 32, 15), the last block 65
    st.add_row(2, 2101, 4);  // 525, 525, 526, 526
    st.add_row(3, 8002, 2);  // 2000, 2001 in the sparse slot with positive weights
    st.add_row(4, 99, 1);    // 25: 2 per block, blocks 13-15 empty
    st.add_row(5, 2, 2);     // 0 (all -1), then 1
    return st;
}

// A decode step of 6 rows (the split kernel: S blocks a token through the scratch, the last to
// finish selecting): 2048 entries (~32 a block), 1250, 526, 2001 in the sparse slot, 25 (most
// blocks empty), 0 (all -1).
inline ops::HostStep indexer_decode_step() {
    ops::HostStep st;
    st.add_row(1, 8191, 1);
    st.add_row(0, 5000, 1);
    st.add_row(2, 2104, 1);
    st.add_row(3, 8006, 1);
    st.add_row(4, 99, 1);
    st.add_row(5, 2, 1);
    return st;
}

}  // namespace dsv4::ops_gpu_test
