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

// kBf16: the bf16 reference mode (above); false: float entries.
template <bool kBf16>
__global__ void compress_kernel(ops::CompressArgs a, RowCodec codec) {
    dev::pdl_enter();
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
    const float neg_inf = -__int_as_float(0x7f800000);
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
        // f32 entries are computed in place; typed ones in shared memory, then encoded.
        float* entry = typed ? typed_entry : reinterpret_cast<float*>(entries + e * codec.bytes);
        for (int c = threadIdx.x; c < hd; c += blockDim.x) {
            // The s-th pooled row (CSA: block e - 1's rows, then block e's) feeds channel c
            // from column c, or hd + c for a CSA open-block row.
            auto at = [&](int s) {
                return a.coff == 2
                           ? ops::compress_state_row(e + (s >= m ? 0 : -1), s % m, m) * width +
                                 (s >= m ? hd : 0) + c
                           : s * width + c;
            };
            float mx = neg_inf;
            for (int s = 0; s < slots; ++s) mx = fmaxf(mx, sgate[at(s)]);
            double denom = 0, acc = 0;
            for (int s = 0; s < slots; ++s) {
                const float g = sgate[at(s)];
                if (g == neg_inf) continue;
                const double ex = exp(static_cast<double>(g) - mx);
                denom = __dadd_rn(denom, ex);
                acc = __dadd_rn(acc, __dmul_rn(ex, static_cast<double>(skv[at(s)])));
            }
            const float pooled = static_cast<float>(acc / denom);
            entry[c] = kBf16 ? bf16_round(pooled) : pooled;
        }
        __syncthreads();
        if (a.norm != nullptr) {
            const float inv = dev::block_rms_inv(entry, hd, a.eps, red);
            for (int c = threadIdx.x; c < hd; c += blockDim.x) {
                const float y = __fmul_rn(__fmul_rn(entry[c], inv), a.norm[c]);
                entry[c] = kBf16 ? bf16_round(y) : y;
            }
            __syncthreads();
            const int off = hd - a.rope_dim;
            for (int q = threadIdx.x; q < a.rope_dim / 2; q += blockDim.x) {
                float* pair = entry + off + 2 * q;
                dev::rope_rotate(pair,
                                 dev::rope_cos_sin(e * m, a.inv_freq[q], a.rope_scale, false));
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
        if (typed) dev::block_encode_row(codec, entry, entries + e * codec.bytes);
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
