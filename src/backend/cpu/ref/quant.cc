// Reference round trips through DeepSeek's reference formats (FP8 E4M3 and E2M1 with UE8M0
// block scales, the Hadamard rotation, bf16), written after its kernels: fp32 block amax, the
// scale rounded up to a power of two, division by it (exact), rounding, and the product back.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/fp_codes.h"
#include "formats/cache_row.h"

namespace dsv4::cpu_ref {
namespace {

void fp8_block(float* x, int n) {
    float amax = 0;
    for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = fp8_block_scale(amax);
    for (int i = 0; i < n; ++i) x[i] = fp8_round_trip(x[i], s);
}

void fp4_block(float* x, int n) {
    float amax = 0;
    for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float s = fp4_block_scale(amax);
    for (int i = 0; i < n; ++i) x[i] = fp4_round_trip(x[i], s);
}

}  // namespace

void round_trip(const ops::RoundTripArgs& a) {
    if (a.kind == ops::RoundTrip::kNone) return;
    DSV4_ASSERT(a.block > 0 && a.dims % a.block == 0 && a.dims <= a.width, "round trip of ", a.dims,
                " dims in blocks of ", a.block);
    const bool hadamard =
        a.kind == ops::RoundTrip::kHadamardFp4 || a.kind == ops::RoundTrip::kHadamardBf16Fp4;
    DSV4_ASSERT(!hadamard || (a.dims == a.width && (a.width & (a.width - 1)) == 0),
                "Hadamard of width ", a.width);
    for (int64_t r = 0; r < a.rows; ++r) {
        float* row = a.x + r * a.width;
        if (hadamard) hadamard_rotate(row, a.width);
        if (a.kind == ops::RoundTrip::kHadamardBf16Fp4 || a.kind == ops::RoundTrip::kBf16)
            for (int i = 0; i < a.dims; ++i) row[i] = bf16_round(row[i]);
        if (a.kind == ops::RoundTrip::kBf16) continue;
        for (int b = 0; b < a.dims; b += a.block) {
            if (a.kind == ops::RoundTrip::kFp8)
                fp8_block(row + b, a.block);
            else
                fp4_block(row + b, a.block);
        }
    }
}

void fp8_activations(const float* x, int64_t rows, int64_t K, int64_t ldx, float* out) {
    for (int64_t r = 0; r < rows; ++r) {
        std::copy(x + r * ldx, x + r * ldx + K, out + r * K);
        for (int64_t b = 0; b < K; b += 128)
            fp8_block(out + r * K + b, static_cast<int>(std::min<int64_t>(128, K - b)));
    }
}

}  // namespace dsv4::cpu_ref
