// Sink attention (attention.h). One block per (token, group of up to 64 heads): the token's
// keys (its slot's ring positions before the chunk, the chunk's own tokens, then the compressed
// entries: all valid ones for HCA, the top-k list for CSA) are staged through shared memory in
// tiles of kTile keys, each key read from global memory once for all the heads of the block
// (V4 has one K=V head shared by every query head). Each warp owns heads warp, warp + 16, ...
// and keeps an online softmax per head: running max m (starting at the sink logit), running
// denominator l (starting at exp(sink - sink) = 1: the sink only enters the denominator) and
// the value accumulator, lane i holding dims i, i + 32, ... FP32 throughout; the reference
// (backend/cpu/ref/attention.cc) accumulates in double: tolerance in docs/numerics-cuda.md.
#include <algorithm>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

constexpr int kWarps = 16;
constexpr int kHeadsPerWarp = 4;
constexpr int kHeadsPerBlock = kWarps * kHeadsPerWarp;  // 64
constexpr int kDimsPerLane = kAttnMaxHeadDim / 32;      // 16
constexpr int kTile = 16;                               // keys staged per round

size_t attention_smem(int heads, int hd) {
    return (static_cast<size_t>(heads) * hd + static_cast<size_t>(kTile) * hd) * sizeof(float) +
           kTile * sizeof(int);
}

// Where token t's keys live: j < n_ring: the slot's ring; then the chunk's own tokens; then the
// compressed entries (HCA: e = j - n_win for e < n_ent; CSA: topk[t][j - n_win], -1 = none).
struct KeyList {
    const float* ring;
    const float* chunk;
    const float* entries;
    const int32_t* topk;
    int64_t first, n_ring, n_win, n_total;
    int W, hd;

    __device__ const float* key(int64_t j) const {
        if (j < n_ring) return ring + ((first + j) % W) * hd;
        if (j < n_win) return chunk + (j - n_ring) * hd;
        const int64_t e = topk ? topk[j - n_win] : j - n_win;
        return e < 0 ? nullptr : entries + e * hd;
    }
};

__global__ void __launch_bounds__(kWarps * 32) attention_kernel(ops::AttentionArgs a) {
    extern __shared__ float smem[];
    const int t = blockIdx.x;
    const int h0 = blockIdx.y * kHeadsPerBlock;
    const int nh = min(kHeadsPerBlock, a.H - h0);
    const int hd = a.hd;
    float* q_s = smem;                                     // [nh][hd]
    float* k_s = q_s + static_cast<size_t>(nh) * hd;       // [kTile][hd]
    int* ok_s = reinterpret_cast<int*>(k_s + kTile * hd);  // [kTile] key present

    const ops::StepDesc& st = a.step;
    const int b = st.tok_row[t];
    const int64_t p = st.tok_pos[t], pos0 = st.row_pos0[b];
    const int64_t slot = st.row_slot[b];
    KeyList kl;
    kl.W = a.W;
    kl.hd = hd;
    kl.ring = a.ring + slot * a.W * hd;
    kl.first = p - a.W + 1 > 0 ? p - a.W + 1 : 0;
    kl.n_ring = pos0 > kl.first ? pos0 - kl.first : 0;
    const int64_t chunk_first = kl.first > pos0 ? kl.first : pos0;
    kl.chunk = a.kv + (static_cast<int64_t>(st.row_start[b]) + (chunk_first - pos0)) * hd;
    kl.n_win = kl.n_ring + (p - chunk_first + 1);
    kl.entries = a.entries ? a.entries + slot * a.n_entries * hd : nullptr;
    kl.topk = a.entries && a.topk ? a.topk + static_cast<int64_t>(t) * a.K : nullptr;
    const int64_t n_ent = a.entries == nullptr ? 0 : (a.topk ? a.K : (p + 1) / a.compress_rate);
    kl.n_total = kl.n_win + n_ent;

    const float* q = a.q + (static_cast<int64_t>(t) * a.H + h0) * hd;
    for (int i = threadIdx.x; i < nh * hd; i += blockDim.x) q_s[i] = q[i];

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float acc[kHeadsPerWarp][kDimsPerLane];
    float mrun[kHeadsPerWarp], lrun[kHeadsPerWarp];
#pragma unroll
    for (int hh = 0; hh < kHeadsPerWarp; ++hh) {
        const int h = warp + hh * kWarps;
        mrun[hh] = h < nh ? a.sink[h0 + h] : 0.0f;
        lrun[hh] = 1.0f;
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) acc[hh][i] = 0.0f;
    }

    for (int64_t j0 = 0; j0 < kl.n_total; j0 += kTile) {
        const int nt = static_cast<int>(kl.n_total - j0 < kTile ? kl.n_total - j0 : kTile);
        __syncthreads();  // the previous tile is consumed (and q_s written, first round)
        for (int i = threadIdx.x; i < nt * hd; i += blockDim.x) {
            const int j = i / hd, d = i % hd;
            const float* k = kl.key(j0 + j);
            k_s[i] = k ? k[d] : 0.0f;
            if (d == 0) ok_s[j] = k != nullptr;
        }
        __syncthreads();
        for (int j = 0; j < nt; ++j) {
            if (!ok_s[j]) continue;
            const float* k = k_s + j * hd;
            float kr[kDimsPerLane];
#pragma unroll
            for (int i = 0; i < kDimsPerLane; ++i) {
                const int d = lane + 32 * i;
                kr[i] = d < hd ? k[d] : 0.0f;
            }
#pragma unroll
            for (int hh = 0; hh < kHeadsPerWarp; ++hh) {
                const int h = warp + hh * kWarps;
                if (h >= nh) break;
                const float* qh = q_s + h * hd;
                float s = 0;
#pragma unroll
                for (int i = 0; i < kDimsPerLane; ++i) {
                    const int d = lane + 32 * i;
                    if (d < hd) s = fmaf(qh[d], kr[i], s);
                }
                const float z = dev::warp_sum(s) * a.softmax_scale;
                float e, corr = 1.0f;
                if (z > mrun[hh]) {
                    corr = expf(mrun[hh] - z);
                    mrun[hh] = z;
                    e = 1.0f;
                } else {
                    e = expf(z - mrun[hh]);
                }
                lrun[hh] = lrun[hh] * corr + e;
#pragma unroll
                for (int i = 0; i < kDimsPerLane; ++i) acc[hh][i] = acc[hh][i] * corr + e * kr[i];
            }
        }
    }

#pragma unroll
    for (int hh = 0; hh < kHeadsPerWarp; ++hh) {
        const int h = warp + hh * kWarps;
        if (h >= nh) break;
        float* out = a.out + (static_cast<int64_t>(t) * a.H + h0 + h) * hd;
        const float inv = 1.0f / lrun[hh];
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) {
            const int d = lane + 32 * i;
            if (d < hd) out[d] = acc[hh][i] * inv;
        }
    }
}

// One block per token; only each row's last min(len, W) tokens are written.
__global__ void ring_write_kernel(ops::RingWriteArgs a) {
    const ops::StepDesc& st = a.step;
    const int t = blockIdx.x;
    const int b = st.tok_row[t];
    const int i = t - st.row_start[b];
    if (i < st.row_len[b] - a.W) return;
    float* dst =
        a.ring + (static_cast<int64_t>(st.row_slot[b]) * a.W + (st.row_pos0[b] + i) % a.W) * a.hd;
    const float* src = a.kv + static_cast<int64_t>(t) * a.hd;
    for (int d = threadIdx.x; d < a.hd; d += blockDim.x) dst[d] = src[d];
}

}  // namespace

void launch_attention(const ops::AttentionArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.hd >= 1 && a.hd <= kAttnMaxHeadDim, "attention: head_dim ", a.hd, " (at most ",
                kAttnMaxHeadDim, ")");
    DSV4_ASSERT(a.entries == nullptr || a.compress_rate > 0, "attention: compress_rate 0");
    if (a.step.T == 0) return;
    const int groups = (a.H + kHeadsPerBlock - 1) / kHeadsPerBlock;
    const size_t smem = attention_smem(std::min(a.H, kHeadsPerBlock), a.hd);
    // The attribute is a host-side setting (not a stream operation): allowed during capture.
    static const cudaError_t attr =
        cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(attention_smem(kHeadsPerBlock, kAttnMaxHeadDim)));
    DSV4_CHECK_CUDA(attr);
    attention_kernel<<<dim3(static_cast<unsigned>(a.step.T), static_cast<unsigned>(groups)),
                       kWarps * 32, smem, stream>>>(a);
    DSV4_CHECK_LAUNCH(stream);
}

void launch_ring_write(const ops::RingWriteArgs& a, cudaStream_t stream) {
    if (a.step.T == 0) return;
    ring_write_kernel<<<static_cast<unsigned>(a.step.T), 128, 0, stream>>>(a);
    DSV4_CHECK_LAUNCH(stream);
}

}  // namespace dsv4::cuda
