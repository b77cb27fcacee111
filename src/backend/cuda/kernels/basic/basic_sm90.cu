// The small op kernels (basic.h). Numerics follow the CPU reference (backend/cpu/ref/): norms
// accumulate in double like the reference; the element-wise float steps use explicit
// round-to-nearest intrinsics where the reference's order matters, so nvcc does not contract
// them into FMAs (the CPU build does not contract: -std=c++20 implies -ffp-contract=off).
#include <algorithm>
#include <vector>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/ptx_sm90.cuh"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/kernels/basic/basic.h"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/common/rope_sm90.cuh"
#include "backend/cuda/kernels/common/swiglu_sm90.cuh"
#include "base/check.h"
#include "base/fp_codes.h"
#include "formats/synth_weight.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n, int per_block = kThreads) {
    const int64_t b = (n + per_block - 1) / per_block;
    return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 16 ? 65535 * 16 : b));
}

// One block per (token, copy); grid-stride over D.
__global__ void embed_kernel(const int32_t* ids, const void* table, bool bf16, int64_t D,
                             float* out, int n) {
    dev::pdl_enter();
    const int64_t t = blockIdx.x;
    const int64_t row = ids[t];
    float* dst = out + (t * n + blockIdx.y) * D;
    if (bf16) {
        const uint16_t* src = static_cast<const uint16_t*>(table) + row * D;
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) dst[i] = bf16_to_f32(src[i]);
    } else {
        const float* src = static_cast<const float*>(table) + row * D;
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) dst[i] = src[i];
    }
}

// One block per row: sum of squares in double (the reference's dot; v * v of a float is exact
// in double, so the FMA is the reference's multiply-add), inv = 1/sqrt(ms + eps) in double
// rounded to float, y = x * inv * w in float. Rows of a multiple of 4 floats go 16 bytes at a
// time with the row held in registers between the two passes (kNormVec float4 a thread at
// most), so a 4096-wide row is one load per thread instead of a serial chain of 16.
constexpr int kNormVec = 4;
constexpr int kNormThreadsMax = 1024;

// What a row's norm reads that no earlier grid writes, loaded before the wait (pdl.cuh): the
// weights of the thread's float4s (registers) and the rope's cos / sin (a shared table, from
// the step descriptor's positions, uploaded before the step). After the wait the row's load is
// the one round trip left; the weights and the positions after the sum were two more.
constexpr int kNormRopeTable = 128;  // pairs (V4: 32); wider ropes compute theirs after the wait

// Returns the table when filled, else null (rope_float4_from computes the cos / sin then).
__device__ __forceinline__ const dev::RopeCs* rms_norm_vec_pre(const ops::RmsNormArgs& a,
                                                               const ops::FusedRope& r, int64_t row,
                                                               float4 (&w)[kNormVec],
                                                               dev::RopeCs* table) {
    const float4* w4 = reinterpret_cast<const float4*>(a.weight);
    const int n4 = a.dim / 4;
#pragma unroll
    for (int j = 0; j < kNormVec; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        w[j] = w4 != nullptr && i < n4 ? w4[i] : make_float4(1.f, 1.f, 1.f, 1.f);
    }
    if (!dev::rope_fits(r, kNormRopeTable)) return nullptr;
    dev::rope_table(r, r.pos[row / r.heads], table);
    return table;
}

// (cs, rms_norm_vec_pre's table or null, is read after block_sum's barriers.)
__device__ __forceinline__ void rms_norm_vec_row(const ops::RmsNormArgs& a, const ops::FusedRope& r,
                                                 int64_t row, const float4 (&w)[kNormVec],
                                                 const dev::RopeCs* cs) {
    __shared__ double red[32];
    const float4* x = reinterpret_cast<const float4*>(a.x + row * a.dim);
    float4* y = reinterpret_cast<float4*>(a.out + row * a.dim);
    const int n4 = a.dim / 4;
    float4 v[kNormVec];
    double ss = 0;
#pragma unroll
    for (int j = 0; j < kNormVec; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        v[j] = i < n4 ? x[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        ss = dev::add_squares(ss, v[j]);
    }
    const float inv = dev::rms_inv(dev::block_sum(ss, red), a.dim, a.eps);
#pragma unroll
    for (int j = 0; j < kNormVec; ++j) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i >= n4) break;
        // (rms_scale's products, the weight from registers: a pointer to w[j] would put w in
        // local memory.)
        float4 o = dev::rms_scale(v[j], inv, nullptr);
        if (a.weight != nullptr)
            o = make_float4(__fmul_rn(o.x, w[j].x), __fmul_rn(o.y, w[j].y), __fmul_rn(o.z, w[j].z),
                            __fmul_rn(o.w, w[j].w));
        y[i] = dev::rope_float4_from(o, r, cs, row, 4 * i, a.dim);
    }
}

// Blocks [0, a.rows) norm a's rows, the next b.rows (RmsNormArgs::also; 0 when none) b's.
__global__ void __launch_bounds__(kNormThreadsMax)
    rms_norm_vec_kernel(ops::RmsNormArgs a, ops::FusedRope r, ops::RmsNormArgs b,
                        ops::FusedRope rb) {
    __shared__ dev::RopeCs table[kNormRopeTable];
    const int64_t row = blockIdx.x;
    float4 w[kNormVec];
    // (Two calls, not a reference to either parameter: that would copy both to local memory.)
    if (row < a.rows) {
        const dev::RopeCs* cs = rms_norm_vec_pre(a, r, row, w, table);
        dev::pdl_enter();
        rms_norm_vec_row(a, r, row, w, cs);
    } else {
        const dev::RopeCs* cs = rms_norm_vec_pre(b, rb, row - a.rows, w, table);
        dev::pdl_enter();
        rms_norm_vec_row(b, rb, row - a.rows, w, cs);
    }
}

__global__ void rms_norm_kernel(ops::RmsNormArgs a) {
    dev::pdl_enter();
    __shared__ double red[32];
    const int64_t row = static_cast<int64_t>(blockIdx.x) * a.dim;
    dev::block_rms_norm_row(a.x + row, a.weight, a.out + row, a.dim, a.eps, red);
}

// The bf16 reference mode (RmsNormArgs::round_bf16), one block per row, as cpu_ref::rms_norm.
// Weighted: the plain norm, each output then rounded to bf16 (by the thread that wrote it).
// Unweighted (the per-head q norm as torch ops on a bf16 tensor): the squares rounded to bf16
// and summed in double (exact in any order for a row of bf16 squares, so the block reduction
// gives the CPU's sum), then the mean, mean + eps, 1 / sqrt (a float sqrt, the division in
// double) and each product rounded to bf16.
__global__ void rms_norm_bf16_kernel(ops::RmsNormArgs a) {
    dev::pdl_enter();
    __shared__ double red[32];
    const int64_t off = static_cast<int64_t>(blockIdx.x) * a.dim;
    const float* x = a.x + off;
    float* y = a.out + off;
    if (a.weight != nullptr) {
        dev::block_rms_norm_row(x, a.weight, y, a.dim, a.eps, red);
        for (int i = threadIdx.x; i < a.dim; i += blockDim.x) y[i] = bf16_round(y[i]);
        return;
    }
    double ss = 0;
    for (int i = threadIdx.x; i < a.dim; i += blockDim.x) ss += bf16_round(__fmul_rn(x[i], x[i]));
    const double sum = dev::block_sum(ss, red);
    const float mean = bf16_round(static_cast<float>(__ddiv_rn(sum, a.dim)));
    const float root = __fsqrt_rn(bf16_round(__fadd_rn(mean, a.eps)));
    const float inv = bf16_round(static_cast<float>(__ddiv_rn(1.0, root)));
    for (int i = threadIdx.x; i < a.dim; i += blockDim.x) y[i] = bf16_round(__fmul_rn(x[i], inv));
}

// One thread per (row, head, pair). Angle in float (pos * inv_freq), cos/sin in double rounded
// to float, like the reference. (One thread per (row, pair) looping over the heads left a
// batch-1 call of 64 heads on 32 threads: 26 us.)
__global__ void rope_kernel(ops::RopeArgs a) {
    dev::pdl_enter();
    const int half = a.rope_dim / 2;
    const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= a.rows * a.heads * half) return;
    const int64_t rh = idx / half;  // row * heads + head
    const int i = static_cast<int>(idx % half);
    const dev::RopeCs cs =
        dev::rope_cos_sin(a.pos[rh / a.heads], a.inv_freq[i], a.scale, a.inverse);
    float* p = a.x + rh * a.head_dim + (a.head_dim - a.rope_dim) + 2 * i;
    dev::rope_rotate(p, cs);
    if (a.round_bf16) {
        p[0] = bf16_round(p[0]);
        p[1] = bf16_round(p[1]);
    }
}

__global__ void swiglu_kernel(ops::SwigluArgs a) {
    dev::pdl_enter();
    const float L = a.limit;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        a.out[i] = dev::clipped_swiglu(a.gate[i], a.up[i], L);
    }
}

// Block (chunk, row): kGatherChunk floats of one row (a row of V4's streams is 16384 floats:
// one block took 26 us, a serial chain of loads).
constexpr int kGatherChunk = 1024;
__global__ void gather_rows_kernel(ops::GatherRowsArgs a) {
    dev::pdl_enter();
    const float* src = a.src + static_cast<int64_t>(a.idx[blockIdx.y]) * a.width;
    float* dst = a.dst + static_cast<int64_t>(blockIdx.y) * a.width;
    const int64_t end = min(a.width, (blockIdx.x + 1) * int64_t{kGatherChunk});
    for (int64_t i = blockIdx.x * int64_t{kGatherChunk} + threadIdx.x; i < end; i += blockDim.x)
        dst[i] = src[i];
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
    dev::pdl_enter();
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        x[i] = __fmul_rn(x[i], s);
}

__global__ void fill_kernel(float* x, float v, int64_t n) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        x[i] = v;
}

// 8 bytes per thread step: random (span 0) or lo + (random byte % span).
__global__ void synth_bytes_kernel(uint8_t* dst, int64_t n, uint64_t seed, uint32_t lo,
                                   uint32_t span) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i * 8 < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const uint64_t r = synth_bits(seed, static_cast<uint64_t>(i));
        for (int b = 0; b < 8 && i * 8 + b < n; ++b) {
            const uint32_t v = static_cast<uint32_t>(r >> (8 * b)) & 0xffu;
            dst[i * 8 + b] = static_cast<uint8_t>(span == 0 ? v : lo + v % span);
        }
    }
}

// Pure read: every byte of the buffer once, 4 independent 16-byte loads in flight per thread.
__global__ void read_sum(const uint4* p, size_t n, uint32_t* sink) {
    uint32_t acc = 0;
    const size_t stride = size_t{gridDim.x} * blockDim.x;
    size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = ptx::ld_stream_v4(p + i);
        const uint4 b = ptx::ld_stream_v4(p + i + stride);
        const uint4 c = ptx::ld_stream_v4(p + i + 2 * stride);
        const uint4 d = ptx::ld_stream_v4(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
               d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const uint4 a = ptx::ld_stream_v4(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads alive; practically never stores
}

__device__ __forceinline__ float load_act(const void* p, bool bf16, int64_t i) {
    return bf16 ? bf16_to_f32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

// Block = 8 warps; block (n, mb) computes y[mb*8 + warp, n]: each warp one token's dot with
// weight row row0 + n (lanes stride over K, FP32 sums, warp reduction). The weight row is read
// once per 8 tokens from L2/L1.
constexpr int kLinWarps = 8;
__global__ void dense_linear_kernel(DenseLinearArgs a) {
    dev::pdl_enter();
    const int64_t n = blockIdx.x;
    const int64_t m = static_cast<int64_t>(blockIdx.y) * kLinWarps + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (m >= a.M) return;
    const int64_t wrow =
        (a.w_ids != nullptr ? a.w_ids[m] * a.w_stride : int64_t{0}) + (a.row0 + n) * a.K;
    const int64_t xrow = (m / a.x_div) * a.ldx;
    float s = 0;
    for (int64_t k = lane; k < a.K; k += 32)
        s = fmaf(load_act(a.x, a.x_bf16, xrow + k), load_act(a.w, a.w_bf16, wrow + k), s);
    s = dev::warp_sum(s);
    if (lane != 0) return;
    if (a.y_bf16)
        static_cast<uint16_t*>(a.y)[m * a.ldy + n] = f32_to_bf16(s);
    else
        static_cast<float*>(a.y)[m * a.ldy + n] = s;
}

}  // namespace

void launch_embed_dense(const int32_t* ids, const void* table, bool bf16, int64_t D, float* out,
                        int64_t T, int n, cudaStream_t stream) {
    if (T == 0) return;
    launch_pdl(embed_kernel, dim3(static_cast<unsigned>(T), static_cast<unsigned>(n)), kThreads, 0,
               stream, 1, ids, table, bf16, D, out, n);
}

namespace {

// Whether the vectorised kernel takes a's rows (16-byte rows of at most kNormVec float4 a thread).
bool norm_vec(const ops::RmsNormArgs& a) {
    return a.dim % 4 == 0 && a.dim / 4 <= kNormVec * kNormThreadsMax &&
           reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(a.out) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(a.weight) % 16 == 0;
}

// Enough threads for kNormVec float4 each, in whole warps.
int norm_threads(int dim) {
    const int per = (dim / 4 + kNormVec - 1) / kNormVec;
    return std::clamp((per + 31) / 32 * 32, 32, kNormThreadsMax);
}

// a (its `also` ignored) as the kernel takes it: the rope passed by value, no host pointers.
ops::RmsNormArgs device_args(const ops::RmsNormArgs& a) {
    ops::RmsNormArgs d = a;
    d.rope = nullptr;
    d.also = nullptr;
    return d;
}

// One norm (its `also` ignored).
void launch_one_norm(const ops::RmsNormArgs& a, cudaStream_t stream) {
    if (a.rows == 0) return;
    const bool vec = norm_vec(a) && !a.round_bf16;  // (the bf16 mode: its own kernel)
    const ops::RmsNormArgs d = device_args(a);
    const RopeFusion rope = fuse_rope(a.rope, a.rows, a.dim, vec, "rms_norm");
    if (vec)
        launch_pdl(rms_norm_vec_kernel, static_cast<unsigned>(a.rows), norm_threads(a.dim), 0,
                   stream, 1, d, rope.in_kernel, ops::RmsNormArgs{}, ops::FusedRope{});
    else
        launch_pdl(a.round_bf16 ? rms_norm_bf16_kernel : rms_norm_kernel,
                   static_cast<unsigned>(a.rows), kThreads, 0, stream, 1, d);
    rope.launch_after(a.out, a.rows, a.dim, stream, a.round_bf16);
}

// Whether a can share a launch: the vectorised kernel with its rope (if any) in it.
bool pairable(const ops::RmsNormArgs& a) {
    return norm_vec(a) && !a.round_bf16 &&
           fuse_rope(a.rope, a.rows, a.dim, true, "rms_norm").after.inv_freq == nullptr;
}

}  // namespace

void launch_rms_norm(const ops::RmsNormArgs& a, cudaStream_t stream) {
    const ops::RmsNormArgs* b = a.also;
    if (b == nullptr || b->also != nullptr || !pairable(a) || !pairable(*b) ||
        a.rows + b->rows == 0) {
        launch_one_norm(a, stream);
        if (b != nullptr) launch_rms_norm(*b, stream);
        return;
    }
    // Both in one launch: blocks [0, a.rows) a's rows, the next b's.
    const RopeFusion ra = fuse_rope(a.rope, a.rows, a.dim, true, "rms_norm");
    const RopeFusion rb = fuse_rope(b->rope, b->rows, b->dim, true, "rms_norm");
    launch_pdl(rms_norm_vec_kernel, static_cast<unsigned>(a.rows + b->rows),
               std::max(norm_threads(a.dim), norm_threads(b->dim)), 0, stream, 1, device_args(a),
               ra.in_kernel, device_args(*b), rb.in_kernel);
}

RopeFusion fuse_rope(const ops::FusedRope* r, int64_t rows, int dim, bool vec, const char* what) {
    RopeFusion f;
    if (r == nullptr || r->inv_freq == nullptr) return f;
    DSV4_ASSERT(r->heads >= 1 && rows % r->heads == 0 && r->rope_dim % 2 == 0 && r->rope_dim <= dim,
                what, " rope: ", rows, " rows, ", r->heads, " heads, rope_dim ", r->rope_dim,
                " of ", dim);
    (vec && (dim - r->rope_dim) % 4 == 0 ? f.in_kernel : f.after) = *r;
    return f;
}

void RopeFusion::launch_after(float* out, int64_t rows, int dim, cudaStream_t stream,
                              bool round_bf16) const {
    const ops::FusedRope& r = after;
    if (r.inv_freq == nullptr) return;
    launch_rope({out, r.inv_freq, r.pos, rows / r.heads, r.heads, dim, r.rope_dim, r.inverse,
                 r.scale, round_bf16},
                stream);
}

void launch_rope(const ops::RopeArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.rope_dim % 2 == 0 && a.rope_dim <= a.head_dim, a.rope_dim, " ", a.head_dim);
    const int64_t n = a.rows * a.heads * (a.rope_dim / 2);
    if (n == 0) return;
    launch_pdl(rope_kernel, static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0,
               stream, 1, a);
}

void launch_swiglu(const ops::SwigluArgs& a, cudaStream_t stream) {
    if (a.n == 0) return;
    launch_pdl(swiglu_kernel, grid_for(a.n), kThreads, 0, stream, 1, a);
}

__global__ void count_experts_kernel(ops::CountExpertsArgs a) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        if (a.sel[i] >= 0 && a.sel[i] < a.E) atomicAdd(a.counts + a.sel[i], 1);
}

void launch_count_experts(const ops::CountExpertsArgs& a, cudaStream_t stream) {
    if (a.n == 0) return;
    count_experts_kernel<<<grid_for(a.n), kThreads, 0, stream>>>(a);
    DSV4_CHECK_LAUNCH(stream);
}

void launch_gather_rows(const ops::GatherRowsArgs& a, cudaStream_t stream) {
    if (a.R == 0) return;
    DSV4_ASSERT(a.R <= 65535, "gather_rows: ", a.R, " rows");
    const dim3 grid(static_cast<unsigned>((a.width + kGatherChunk - 1) / kGatherChunk),
                    static_cast<unsigned>(a.R));
    launch_pdl(gather_rows_kernel, grid, kThreads, 0, stream, 1, a);
}

// One block per token; grid-stride over the n streams' D values. Same order as the reference
// (x + stream), one rounding.
__global__ void add_to_streams_kernel(ops::AddToStreamsArgs a) {
    dev::pdl_enter();
    const int64_t t = blockIdx.x;
    const float* x = a.x + t * a.D;
    float* s = a.streams + t * a.n * a.D;
    for (int64_t i = threadIdx.x; i < int64_t{a.n} * a.D; i += blockDim.x)
        s[i] = __fadd_rn(x[i % a.D], s[i]);
}

void launch_add_to_streams(const ops::AddToStreamsArgs& a, cudaStream_t stream) {
    if (a.T == 0) return;
    launch_pdl(add_to_streams_kernel, static_cast<unsigned>(a.T), kThreads, 0, stream, 1, a);
}

void launch_scale(float* x, float s, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    launch_pdl(scale_kernel, grid_for(n), kThreads, 0, stream, 1, x, s, n);
}

void launch_fill(float* x, float v, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, v, n);
    DSV4_CHECK_LAUNCH(stream);
}

void launch_synth_bytes(void* dst, int64_t n, uint64_t seed, uint32_t lo, uint32_t span,
                        cudaStream_t stream) {
    if (n == 0) return;
    synth_bytes_kernel<<<grid_for((n + 7) / 8), kThreads, 0, stream>>>(static_cast<uint8_t*>(dst),
                                                                       n, seed, lo, span);
    DSV4_CHECK_LAUNCH(stream);
}

void launch_read_sum(const void* p, int64_t bytes, uint32_t* sink, int ctas, cudaStream_t stream) {
    read_sum<<<ctas, 512, 0, stream>>>(static_cast<const uint4*>(p),
                                       static_cast<size_t>(bytes) / 16, sink);
    DSV4_CHECK_LAUNCH(stream);
}

double measure_read_bandwidth(const void* p, int64_t bytes, uint32_t* sink, int ctas,
                              cudaStream_t stream) {
    const CudaEvent t0 = CudaEvent::create(), t1 = CudaEvent::create();
    std::vector<float> ms;
    for (int r = 0; r < 13; ++r) {
        t0.record(stream);
        launch_read_sum(p, bytes, sink, ctas, stream);
        t1.record(stream);
        const float t = CudaEvent::elapsed_ms(t0, t1);
        if (r >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return static_cast<double>(bytes) / (static_cast<double>(ms[ms.size() / 2]) * 1e-3);
}

void launch_dense_linear(const DenseLinearArgs& a, cudaStream_t stream) {
    if (a.M == 0 || a.N == 0) return;
    DSV4_ASSERT(a.N <= 0x7fffffff && (a.M + kLinWarps - 1) / kLinWarps <= 65535, a.M, " ", a.N);
    dim3 grid(static_cast<unsigned>(a.N), static_cast<unsigned>((a.M + kLinWarps - 1) / kLinWarps));
    launch_pdl(dense_linear_kernel, grid, kLinWarps * 32, 0, stream, 1, a);
}

}  // namespace dsv4::cuda
