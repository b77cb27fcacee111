// What the attention kernels (attention_sm90.cu for prefill chunks and large steps,
// attention_split_sm90.cu for decode steps, attention_bf16_sm90.cu for the bf16 reference mode)
// share: where a token's keys live, the float4 helpers, and the staging of a key row into shared
// memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common/ptx_sm90.cuh"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/common/cache_row_sm90.cuh"
#include "ops/attention.h"

namespace dsv4::cuda {
namespace attn {

inline constexpr int kChunk = 128;  // dims of one float4 per lane

// Rows in shared memory are zero-padded to a whole number of chunks, so the inner loops need no
// bounds (the padding adds exact zeros).
__host__ __device__ constexpr int padded_hd(int hd) {
    return (hd + kChunk - 1) / kChunk * kChunk;
}

// How the kernels read key rows (launch_attention fills it): the ring's and the entries'
// format, and the step's own rows in that format (a.kv itself for f32 rows; else their encoding,
// made by the launcher: a key reads the same from the step as later from the ring).
struct KeyRows {
    RowCodec codec;
    const uint8_t* chunk = nullptr;  // [T, codec.bytes]
};

// Where token t's keys live: j < n_ring: the slot's ring; then the chunk's own tokens; then the
// compressed entries (HCA: e = j - n_win for e < n_ent; CSA: topk[t][j - n_win], -1 = none).
struct KeyList {
    const uint8_t* ring;
    const uint8_t* chunk;
    const uint8_t* entries;
    const int32_t* topk;
    int64_t first_row, n_ring, n_win, n_total;  // first_row: the ring row of key 0
    int64_t rb;                                 // bytes a row
    int64_t R;                                  // rows a ring (AttentionArgs::ring_rows)

    // The CSA list value key j needs (0 where it needs none), read a tile ahead of key().
    __device__ int32_t index(int64_t j) const { return topk && j >= n_win ? topk[j - n_win] : 0; }
    __device__ const uint8_t* key(int64_t j, int32_t idx) const {
        if (j < n_ring) {  // first_row < R and j < W <= R: no modulo
            const int64_t r = first_row + j;
            return ring + (r < R ? r : r - R) * rb;
        }
        if (j < n_win) return chunk + (j - n_ring) * rb;
        const int64_t e = topk ? idx : j - n_win;
        return e < 0 ? nullptr : entries + e * rb;
    }
};

// Token t's keys from the step descriptor: the window (the slot's ring before the row's chunk,
// then the chunk's own tokens up to t), then the compressed entries.
__device__ inline KeyList key_list(const ops::AttentionArgs& a, const KeyRows& kr, int t) {
    const ops::StepDesc& st = a.step;
    const int b = st.tok_row[t];
    const int64_t p = st.tok_pos[t], pos0 = st.row_pos0[b];
    const int64_t slot = st.row_slot[b];
    const int64_t rb = kr.codec.bytes;
    KeyList kl;
    kl.R = a.ring_rows > 0 ? a.ring_rows : a.W;
    kl.rb = rb;
    kl.ring = reinterpret_cast<const uint8_t*>(a.ring) + slot * kl.R * rb;
    const int64_t first = p - a.W + 1 > 0 ? p - a.W + 1 : 0;
    kl.first_row = first % kl.R;
    kl.n_ring = pos0 > first ? pos0 - first : 0;
    const int64_t chunk_first = first > pos0 ? first : pos0;
    kl.chunk = kr.chunk + (static_cast<int64_t>(st.row_start[b]) + (chunk_first - pos0)) * rb;
    kl.n_win = kl.n_ring + (p - chunk_first + 1);
    kl.entries =
        a.entries ? reinterpret_cast<const uint8_t*>(a.entries) + slot * a.n_entries * rb : nullptr;
    kl.topk = a.entries && a.topk ? a.topk + static_cast<int64_t>(t) * a.K : nullptr;
    const int64_t n_ent = a.entries == nullptr ? 0 : (a.topk ? a.K : (p + 1) / a.compress_rate);
    kl.n_total = kl.n_win + n_ent;
    return kl;
}

// The most keys any token of a launch can have (host-known: both kernels size their key
// splits by it, never by the positions): the window, then the top-k list (CSA) or every entry
// a slot holds (HCA).
inline int64_t max_keys(const ops::AttentionArgs& a) {
    return a.W + (a.entries == nullptr ? 0 : a.topk ? a.K : a.n_entries);
}

__device__ __forceinline__ float4& f4(float* p) {
    return *reinterpret_cast<float4*>(p);
}
__device__ __forceinline__ const float4& f4(const float* p) {
    return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float comp(const float4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
__device__ __forceinline__ void fma4(float4& acc, float w, const float4& v) {
    acc.x = fmaf(w, v.x, acc.x);
    acc.y = fmaf(w, v.y, acc.y);
    acc.z = fmaf(w, v.z, acc.z);
    acc.w = fmaf(w, v.w, acc.w);
}
__device__ __forceinline__ float dot4(const float4& a, const float4& b, float s) {
    s = fmaf(a.x, b.x, s);
    s = fmaf(a.y, b.y, s);
    s = fmaf(a.z, b.z, s);
    return fmaf(a.w, b.w, s);
}

// One warp fills a shared row of hdp floats from a stored row of hd values (nullptr: zeros),
// zero padded. f32 rows (!kTyped) with vec (every row 16-byte aligned: hd % 4 == 0 and aligned
// bases) go asynchronously (cp.async, completed by the caller's wait), other f32 rows with plain
// loads; typed rows are decoded (four values a lane at a time when the codec allows). The
// kernels are instantiated per kTyped, so the f32 kernels carry no decoding code.
template <bool kTyped>
__device__ __forceinline__ void stage_row(float* dst, const uint8_t* src_bytes,
                                          const RowCodec& codec, int hd, int hdp, bool vec,
                                          int lane) {
    if constexpr (!kTyped) {
        const float* src = reinterpret_cast<const float*>(src_bytes);
        if (src != nullptr && vec) {
            for (int d = lane * 4; d < hdp; d += kChunk) {
                if (d < hd)
                    ptx::cp_async_16(ptx::smem_addr(dst + d), src + d);
                else
                    f4(dst + d) = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        } else {
            for (int d = lane; d < hdp; d += 32) dst[d] = src != nullptr && d < hd ? src[d] : 0.0f;
        }
    } else if (codec.vec4) {
        for (int d = lane * 4; d < hdp; d += kChunk)
            f4(dst + d) = src_bytes != nullptr && d < hd ? dev::decode4(codec, src_bytes, d)
                                                         : make_float4(0.f, 0.f, 0.f, 0.f);
    } else {
        for (int d = lane; d < hdp; d += 32)
            dst[d] = src_bytes != nullptr && d < hd ? dev::decode_value(codec, src_bytes, d) : 0.0f;
    }
}

// The threads of a block copy one stored row (bytes % 4 == 0; both rows 16-byte aligned when
// bytes % 16 == 0), 16 bytes at a time where they can.
__device__ __forceinline__ void copy_row(uint8_t* dst, const uint8_t* src, int64_t bytes) {
    if (bytes % 16 == 0) {
        for (int64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x)
            reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    } else {
        for (int64_t i = threadIdx.x; i < bytes / 4; i += blockDim.x)
            reinterpret_cast<uint32_t*>(dst)[i] = reinterpret_cast<const uint32_t*>(src)[i];
    }
}

// Whether the split kernel can norm the queries as it stages them (AttentionArgs::q_norm): the
// unweighted fp32 per-head norm of q in place, its rope (if any) on float4-aligned trailing dims.
bool split_norms_queries(const ops::AttentionArgs& a, const ops::RmsNormArgs& n);

// The split kernel for a decode step (attention_split_sm90.cu); false (nothing launched) when
// the step is too large, the rows are not float4-aligned (vec) or there is no scratch. q_norm
// (split_norms_queries; may be nullptr): the queries' norm, done in the kernel.
bool launch_attention_split(const ops::AttentionArgs& a, const KeyRows& kr,
                            const AttentionScratch& ws, bool vec, const ops::RmsNormArgs* q_norm,
                            cudaStream_t stream);

// The bf16 reference mode's kernel (a.round_bf16; attention_bf16_sm90.cu), with the output rope;
// a.ring_out is not written (the caller writes the ring after it).
void launch_attention_bf16(const ops::AttentionArgs& a, const KeyRows& kr, cudaStream_t stream);

// The weights of a merge of n partial softmax states (running max m[r], sum l[r]) with the
// head's sink logit: w[r] = e^(m[r] - M) / L, M = max(sink, m[r]), L = e^(sink - M) +
// sum l[r] e^(m[r] - M), in r order. An empty state (m = -inf: no key) weighs exactly 0, and its
// partial (maybe never written) must not be added. m and w may be the same array.
template <int kMax>
__device__ __forceinline__ void merge_weights(float sink, const float* m, const float* l, int n,
                                              float* w) {
    float m_all = sink;
#pragma unroll
    for (int r = 0; r < kMax; ++r)
        if (r < n) m_all = fmaxf(m_all, m[r]);
    float l_all = expf(sink - m_all);
    float e[kMax];
#pragma unroll
    for (int r = 0; r < kMax; ++r) {
        if (r >= n) break;
        e[r] = m[r] == -INFINITY ? 0.0f : expf(m[r] - m_all);
        l_all += l[r] * e[r];
    }
    const float inv = 1.0f / l_all;
#pragma unroll
    for (int r = 0; r < kMax; ++r)
        if (r < n) w[r] = e[r] * inv;
}

}  // namespace attn
}  // namespace dsv4::cuda
