// Fused compressor (compress.h): one block per row (rows are distinct slots: independent), the
// row's tokens consumed in order (each may complete its slot's block, and the next token writes
// the state the completion read). Per token: the state row p % m (CSA: the block's parity half,
// ops::compress_state_row) takes kv and gate + ape; when p % m == m - 1 entry p / m is pooled
// per channel (softmax over the state rows of the gate, in double like the reference's
// pool_entry), RMS-normed and roped at e * m, round-tripped (reference numerics) and stored in
// the entry format (typed entries are computed in shared memory and encoded by the block:
// cache_row_sm90.cuh). Layout and order as in backend/cpu/ref/compressor.cc.
//
// The bf16 reference mode (CompressArgs::round_bf16) is its own instantiation (kBf16; the float
// kernel's code is unchanged): the pooled entry rounded to bf16 before its norm, the norm's output
// (x * inv * w, then rounded, as cpu_ref::rms_norm's weighted round_bf16) and the rope's rotated
// dims rounded to bf16, each value by the thread that computed it; then the entry round trip,
// which there is kHadamardBf16Fp4 for the indexer's keys (dev::block_round_trip_row, the round-trip
// kernels' device step) or kFp8 for the main entries.
#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/common/cache_row_sm90.cuh"
#include "backend/cuda/kernels/common/rope_sm90.cuh"
#include "backend/cuda/kernels/compressor/compress.h"
#include "backend/cuda/kernels/quant/round_trip_sm90.cuh"
#include "base/check.h"
#include "base/fp_codes.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;

// A decode row's fast path (below) holds, a thread: the pooled slots of up to kPreChannels
// channels (hd <= 512) and the ape of up to kPreCols state columns (width <= 1024).
constexpr int kPreSlots = 8;  // CSA's 2 x 4
constexpr int kPreChannels = 2;
constexpr int kPreCols = 4;
static_assert(kPreChannels == 2, "finish_entry's weight lookup below");

// The entry's state row of pooled slot s, channel c: the s-th pooled row (CSA: block e - 1's
// rows, then block e's) feeds channel c from column c, or hd + c for a CSA open-block row.
__device__ __forceinline__ int64_t pooled_at(const ops::CompressArgs& a, int64_t e, int s, int c) {
    const int m = a.m, width = a.coff * a.hd;
    return a.coff == 2
               ? static_cast<int64_t>(ops::compress_state_row(e + (s >= m ? 0 : -1), s % m, m)) *
                         width +
                     (s >= m ? a.hd : 0) + c
               : static_cast<int64_t>(s) * width + c;
}

// Channel c of entry e from its pooled slots' gates g(s) and values v(s): the softmax over the
// gates in double, as the reference's pool_entry. kN > 0: slots <= kN, the loops unrolled (g
// and v may then index registers); 0: slots.
template <bool kBf16, int kN, typename G, typename V>
__device__ __forceinline__ float pool_channel(int slots, G g, V v) {
    const float neg_inf = -__int_as_float(0x7f800000);
    const int n = kN > 0 ? kN : slots;
    float mx = neg_inf;
#pragma unroll
    for (int s = 0; s < n; ++s)
        if (s < slots) mx = fmaxf(mx, g(s));
    double denom = 0, acc = 0;
#pragma unroll
    for (int s = 0; s < n; ++s) {
        const float gs = s < slots ? g(s) : neg_inf;
        if (gs != neg_inf) {
            const double ex = exp(static_cast<double>(gs) - mx);
            denom = __dadd_rn(denom, ex);
            acc = __dadd_rn(acc, __dmul_rn(ex, static_cast<double>(v(s))));
        }
    }
    const float pooled = static_cast<float>(acc / denom);
    return kBf16 ? bf16_round(pooled) : pooled;
}

// The pooled entry e (entry[0, hd), every channel written before the call) RMS-normed with the
// weights norm_w(c) and roped with cos_sin(q) at e * m, round-tripped and stored.
template <bool kBf16, typename NormW, typename CosSin>
__device__ __forceinline__ void finish_entry(const ops::CompressArgs& a, const RowCodec& codec,
                                             float* entry, uint8_t* stored, double* red,
                                             NormW norm_w, CosSin cos_sin) {
    const int hd = a.hd;
    __syncthreads();
    if (a.norm != nullptr) {
        const float inv = dev::block_rms_inv(entry, hd, a.eps, red);
        for (int c = threadIdx.x; c < hd; c += blockDim.x) {
            const float y = __fmul_rn(__fmul_rn(entry[c], inv), norm_w(c));
            entry[c] = kBf16 ? bf16_round(y) : y;
        }
        __syncthreads();
        const int off = hd - a.rope_dim;
        for (int q = threadIdx.x; q < a.rope_dim / 2; q += blockDim.x) {
            float* pair = entry + off + 2 * q;
            dev::rope_rotate(pair, cos_sin(q));
            if constexpr (kBf16) {
                pair[0] = bf16_round(pair[0]);
                pair[1] = bf16_round(pair[1]);
            }
        }
        __syncthreads();
    }
    // Reference numerics: the NoPE dims to FP8 per 64 (main), Hadamard + FP4 per 32
    // (indexer; in the bf16 mode with the rotated entry rounded to bf16 first), as
    // cpu_ref::compress. (Constant kinds: each call compiles to its kind's steps only.)
    if (a.entry_round_trip == ops::RoundTrip::kFp8)
        dev::block_round_trip_row(entry, hd, hd - a.rope_dim, 64, ops::RoundTrip::kFp8);
    else if (a.entry_round_trip == ops::RoundTrip::kHadamardFp4)
        dev::block_round_trip_row(entry, hd, hd, 32, ops::RoundTrip::kHadamardFp4);
    else if (kBf16 && a.entry_round_trip == ops::RoundTrip::kHadamardBf16Fp4)
        dev::block_round_trip_row(entry, hd, hd, 32, ops::RoundTrip::kHadamardBf16Fp4);
    if (codec.type != CacheType::kF32) dev::block_encode_row(codec, entry, stored);
}

// kBf16: the bf16 reference mode (above); false: float entries.
template <bool kBf16>
__global__ void compress_kernel(ops::CompressArgs a, RowCodec codec) {
    __shared__ double red[32];
    __shared__ float typed_entry[kCompressMaxTypedWidth];  // a typed entry before its encoding
    const ops::StepDesc& st = a.step;
    const int b = blockIdx.x;
    const int m = a.m, hd = a.hd, width = a.coff * a.hd, slots = a.coff * m;
    const int64_t state_size = static_cast<int64_t>(a.coff) * m * width;
    const int64_t slot = st.row_slot[b];
    float* skv = a.state_kv + slot * state_size;
    float* sgate = a.state_gate + slot * state_size;
    const bool typed = codec.type != CacheType::kF32;
    uint8_t* entries = reinterpret_cast<uint8_t*>(a.entries) + slot * a.n_entries * codec.bytes;
    auto entry_of = [&](int64_t e) {  // f32 entries are computed in place, typed ones in smem
        return typed ? typed_entry : reinterpret_cast<float*>(entries + e * codec.bytes);
    };

    // The decode fast path: a one-token row whose token completes its block reads, before the
    // programmatic wait, everything its entry needs but that token's kv and gate (the previous
    // grid's outputs): the pooled state rows of earlier steps, the ape, the norm's weights and
    // the rope's cos / sin. (pdl.cuh: every grid before the previous one is complete then; the
    // step descriptor is uploaded before the step.) After the wait one round trip is left,
    // where the general loop below takes five or so (~13 us of a V4 CSA pooling step on an H100
    // beside the GEMVs' stream: docs/perf.md, session 38).
    const int64_t p_first = st.row_pos0[b];
    const bool fast = st.row_len[b] == 1 && p_first % m == m - 1 && slots <= kPreSlots &&
                      hd <= kPreChannels * kThreads && width <= kPreCols * kThreads &&
                      a.rope_dim / 2 <= kThreads && blockDim.x == kThreads;
    if (fast) {
        const int j = m - 1, row = a.coff == 2 ? ops::compress_state_row(p_first / m, j, m) : j;
        const int own = slots - 1;  // the token's own pooled slot
        const int64_t e = p_first / m;
        float ape[kPreCols], g[kPreChannels][kPreSlots], v[kPreChannels][kPreSlots];
        float nw[kPreChannels];
        dev::RopeCs cs{1.0f, 0.0f};
#pragma unroll
        for (int u = 0; u < kPreCols; ++u) {
            const int c = threadIdx.x + u * kThreads;
            ape[u] = c < width ? a.ape[j * width + c] : 0.0f;
        }
#pragma unroll
        for (int h = 0; h < kPreChannels; ++h) {
            const int c = threadIdx.x + h * kThreads;
#pragma unroll
            for (int s = 0; s < kPreSlots; ++s) {
                const bool old = c < hd && s < own;
                g[h][s] = old ? sgate[pooled_at(a, e, s, c)] : 0.0f;
                v[h][s] = old ? skv[pooled_at(a, e, s, c)] : 0.0f;
            }
            nw[h] = c < hd && a.norm != nullptr ? a.norm[c] : 1.0f;
        }
        if (a.norm != nullptr && static_cast<int>(threadIdx.x) < a.rope_dim / 2)
            cs = dev::rope_cos_sin(e * m, a.inv_freq[threadIdx.x], a.rope_scale, false);
        dev::pdl_enter();
        if (e >= a.n_entries) __trap();  // the cache was sized for fewer entries (a bug)
        const int64_t t = st.row_start[b];
        const float* kv = a.kv + t * width;
        const float* gate = a.gate + t * width;
        float own_g[kPreChannels], own_v[kPreChannels];
#pragma unroll
        for (int u = 0; u < kPreCols; ++u) {
            const int c = threadIdx.x + u * kThreads;
            if (c >= width) continue;
            skv[row * width + c] = kv[c];
            sgate[row * width + c] = __fadd_rn(gate[c], ape[u]);
        }
        // The own slot's column of channel c (the open block's second half for CSA), as the
        // state write above stores it (that column's ape is read here: another thread's u).
#pragma unroll
        for (int h = 0; h < kPreChannels; ++h) {
            const int c = threadIdx.x + h * kThreads, col = (a.coff - 1) * hd + c;
            own_g[h] = c < hd ? __fadd_rn(gate[col], a.ape[j * width + col]) : 0.0f;
            own_v[h] = c < hd ? kv[col] : 0.0f;
        }
        float* entry = entry_of(e);
#pragma unroll
        for (int h = 0; h < kPreChannels; ++h) {
            const int c = threadIdx.x + h * kThreads;
            if (c >= hd) continue;
            entry[c] = pool_channel<kBf16, kPreSlots>(
                slots, [&](int s) { return s == own ? own_g[h] : g[h][s]; },
                [&](int s) { return s == own ? own_v[h] : v[h][s]; });
        }
        finish_entry<kBf16>(
            a, codec, entry, entries + e * codec.bytes, red,
            [&](int c) { return c < kThreads ? nw[0] : nw[1]; }, [&](int) { return cs; });
        return;
    }

    dev::pdl_enter();
    for (int i = 0; i < st.row_len[b]; ++i) {
        const int64_t t = st.row_start[b] + i, p = st.row_pos0[b] + i;
        const int j = static_cast<int>(p % m);
        const int row = a.coff == 2 ? ops::compress_state_row(p / m, j, m) : j;
        const float* kv = a.kv + t * width;
        const float* gate = a.gate + t * width;
        for (int c = threadIdx.x; c < width; c += blockDim.x) {
            skv[row * width + c] = kv[c];
            sgate[row * width + c] = __fadd_rn(gate[c], a.ape[j * width + c]);
        }
        __syncthreads();
        if (j != m - 1) continue;  // block-uniform
        const int64_t e = p / m;
        if (e >= a.n_entries) __trap();  // the cache was sized for fewer entries (a bug)
        float* entry = entry_of(e);
        for (int c = threadIdx.x; c < hd; c += blockDim.x)
            entry[c] = pool_channel<kBf16, 0>(
                slots, [&](int s) { return sgate[pooled_at(a, e, s, c)]; },
                [&](int s) { return skv[pooled_at(a, e, s, c)]; });
        finish_entry<kBf16>(
            a, codec, entry, entries + e * codec.bytes, red, [&](int c) { return a.norm[c]; },
            [&](int q) { return dev::rope_cos_sin(e * m, a.inv_freq[q], a.rope_scale, false); });
    }
}

}  // namespace

void launch_compress(const ops::CompressArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.coff == 1 || a.coff == 2, "compress: coff ", a.coff);
    DSV4_ASSERT(a.m >= 1 && a.rope_dim % 2 == 0 && a.rope_dim <= a.hd, "compress: m ", a.m,
                " rope_dim ", a.rope_dim);
    DSV4_ASSERT(a.entry_round_trip != ops::RoundTrip::kFp8 || (a.hd - a.rope_dim) % 64 == 0,
                "compress: FP8 entry round trip of ", a.hd - a.rope_dim, " NoPE dims");
    DSV4_ASSERT(a.entry_round_trip == ops::RoundTrip::kNone ||
                    a.entry_round_trip == ops::RoundTrip::kFp8 ||
                    a.entry_round_trip == ops::RoundTrip::kHadamardFp4 ||
                    a.entry_round_trip == ops::RoundTrip::kHadamardBf16Fp4,
                "compress: no entry round trip of kind ", static_cast<int>(a.entry_round_trip));
    // (Only the bf16 mode's kernel has the bf16 kind's steps: the float kernel stays as it was.)
    DSV4_ASSERT(a.entry_round_trip != ops::RoundTrip::kHadamardBf16Fp4 || a.round_bf16,
                "compress: the kHadamardBf16Fp4 entry round trip without round_bf16");
    const bool hadamard = a.entry_round_trip == ops::RoundTrip::kHadamardFp4 ||
                          a.entry_round_trip == ops::RoundTrip::kHadamardBf16Fp4;
    DSV4_ASSERT(!hadamard || ((a.hd & (a.hd - 1)) == 0 && a.hd % 32 == 0),
                "compress: Hadamard entry round trip of width ", a.hd);
    const RowCodec c = row_codec(a.entry_format, a.hd);
    DSV4_ASSERT(c.type == CacheType::kF32 || a.hd <= kCompressMaxTypedWidth,
                "compress: typed entries of ", a.hd, " values (at most ", kCompressMaxTypedWidth,
                ")");
    DSV4_ASSERT(c.type != CacheType::kFp4 || a.entry_round_trip == ops::RoundTrip::kNone,
                "compress: fp4 entries rotate once: no Hadamard round trip before them");
    if (a.step.B == 0) return;
    launch_pdl(a.round_bf16 ? compress_kernel<true> : compress_kernel<false>,
               static_cast<unsigned>(a.step.B), kThreads, 0, stream, 1, a, c);
}

}  // namespace dsv4::cuda
