// The reference's rotation of one interleaved pair (backend/cpu/ref/norm_rope.cc): angle in
// float (position * inv_freq), cos and sin in double rounded to float, times scale, then the
// rotation in float with explicit roundings (no FMA contraction, as on the CPU).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/rope.h"

namespace dsv4::cuda::dev {

// sin and cos of a float angle in double, to within a few double ulps (so rounding them to float
// gives the reference's correctly rounded values except within ~1e-16 of a float rounding
// boundary). CUDA's sin/cos of large arguments reduce through a local-memory table (a spill,
// which this build forbids), so the angle is reduced here: k = rint(x / 2π), r = x - k·2π with
// 2π split in two doubles (the fma makes k·P1 exact), then sincospi(r / π), which needs no
// reduction table.
__device__ __forceinline__ void sincos_angle(float angle, double* s, double* c) {
    const double x = angle;
    const double k = rint(x * 0.15915494309189535);
    const double r = fma(-k, 6.283185307179586, x) - k * 2.4492935982947064e-16;
    sincospi(r * 0.3183098861837907, s, c);
}

struct RopeCs {
    float c, s;
};

__device__ __forceinline__ RopeCs rope_cos_sin(int64_t pos, float inv_freq, float scale,
                                               bool inverse) {
    const float angle = __fmul_rn(static_cast<float>(pos), inv_freq);
    double sd, cd;
    sincos_angle(angle, &sd, &cd);
    const float s = __fmul_rn(static_cast<float>(sd), scale);
    return {__fmul_rn(static_cast<float>(cd), scale), inverse ? -s : s};
}

__device__ __forceinline__ void rope_rotate(float* p, RopeCs cs) {
    const float x0 = p[0], x1 = p[1];
    p[0] = __fsub_rn(__fmul_rn(x0, cs.c), __fmul_rn(x1, cs.s));
    p[1] = __fadd_rn(__fmul_rn(x0, cs.s), __fmul_rn(x1, cs.c));
}

// The float4 at column `col` (a multiple of 4) of a row of `dim` floats with its two pairs
// rotated, pair i of the trailing rope dims by cs_of(i), when they lie in those dims, which
// start on a float4 (cuda::fuse_rope); unchanged otherwise.
template <typename CsOf>
__device__ __forceinline__ float4 rope_float4_by(float4 v, int rope_dim, int col, int dim,
                                                 CsOf&& cs_of) {
    const int first = col - (dim - rope_dim);
    if (first < 0) return v;
    float p0[2] = {v.x, v.y}, p1[2] = {v.z, v.w};
    rope_rotate(p0, cs_of(first / 2));
    rope_rotate(p1, cs_of(first / 2 + 1));
    return make_float4(p0[0], p0[1], p1[0], p1[1]);
}

// A fused rope (ops::FusedRope) on the float4 at column `col` of output row `row`: rotated as
// rope_kernel rotates it (rope_float4_by); unchanged when r.inv_freq is null.
__device__ __forceinline__ float4 rope_float4(float4 v, const ops::FusedRope& r, int64_t row,
                                              int col, int dim) {
    if (r.inv_freq == nullptr) return v;
    return rope_float4_by(v, r.rope_dim, col, dim, [&](int i) {  // (pos read in the rope dims only)
        return rope_cos_sin(r.pos[row / r.heads], r.inv_freq[i], r.scale, r.inverse);
    });
}

// rope_float4 with the cos / sin of `table` (a rope_table of r at this row's position, read
// after a barrier) when given, else computed here.
__device__ __forceinline__ float4 rope_float4_from(float4 v, const ops::FusedRope& r,
                                                   const RopeCs* table, int64_t row, int col,
                                                   int dim) {
    if (table == nullptr) return rope_float4(v, r, row, col, dim);
    return rope_float4_by(v, r.rope_dim, col, dim, [&](int i) { return table[i]; });
}

// The cos and sin of pair i of the rope dims at position pos into cs[i], i < r.rope_dim / 2,
// by the block's threads (a table for rope_float4_by, read after a barrier).
__device__ __forceinline__ void rope_table(const ops::FusedRope& r, int64_t pos, RopeCs* cs) {
    for (int i = threadIdx.x; i < r.rope_dim / 2; i += blockDim.x)
        cs[i] = rope_cos_sin(pos, r.inv_freq[i], r.scale, r.inverse);
}

// Whether r is a rope whose table fits cap pairs (kernels with a table of that size fill it
// before their wait; wider ropes compute their cos / sin where they rotate).
__device__ __forceinline__ bool rope_fits(const ops::FusedRope& r, int cap) {
    return r.inv_freq != nullptr && r.rope_dim / 2 <= cap;
}

}  // namespace dsv4::cuda::dev
