// Sink attention (attention.h). A thread-block cluster of C blocks per (token, group of up to 64
// heads): the token's keys (its slot's ring positions before the chunk, the chunk's own tokens,
// then the compressed entries: all valid ones for HCA, the top-k list for CSA) are split into C
// contiguous slices, one per block, so a batch-1 decode step (one token, ~640 keys x 64 heads of
// 512 dims) runs on C SMs instead of one (one block alone took 769 us a call on an H200).
//
// Each block stages its slice through shared memory in tiles of kTile keys, each key read from
// global memory once for all the heads of the block (V4 has one K=V head shared by every query
// head), and runs an online softmax per head a tile at a time:
//  1. scores: the [64 heads x kTile keys] tile of q.k dots as a register-tiled product (each
//     lane 4 heads x 4 keys over an eighth of the dims, then a 3-step shuffle reduction), so each
//     value read from shared memory feeds four FMAs (a per-key warp dot re-read the queries from
//     shared memory for every key, which bounded the old kernel);
//  2. per head (warp h % 16): tile max, running max m, rescale factor, p = exp(z - m), running
//     denominator l;
//  3. values: acc = acc * corr + sum_j p_j k_j, lane i holding dims 4i..4i+3 (+ 128 c).
// The sink enters only block 0's state (m = sink, l = exp(sink - sink) = 1: the sink is in the
// denominator only); the other blocks start empty (m = -inf, l = 0, acc = 0), and a block whose
// slice is empty stays so. After the key loop each block leaves its partial (m, l, acc) per head
// in its own shared memory; block r of the cluster merges heads r, r + C, ... from every block
// through distributed shared memory (M = max m_i, L = sum l_i e^(m_i - M),
// out = sum acc_i e^(m_i - M) / L; empty partials weigh e^-inf = 0) and writes them.
// FP32 throughout; the reference (backend/cpu/ref/attention.cc) accumulates in double: tolerance
// in docs/numerics-cuda.md.
#include <cooperative_groups.h>

#include <cstdint>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
constexpr int kHeadsPerWarp = 4;
constexpr int kHeadsPerBlock = kWarps * kHeadsPerWarp;  // 64
constexpr int kTile = 16;                               // keys staged per round: one per warp
constexpr int kMaxCluster = 8;                          // the portable cluster size
constexpr int kChunk = 128;                             // dims of one float4 per lane
constexpr int kMaxChunks = kAttnMaxHeadDim / kChunk;    // 4
static_assert(kTile == kWarps, "the loader gives each warp one key of the tile");
static_assert(kAttnMaxHeadDim % kChunk == 0, "head_dim limit in whole chunks");

// Rows in shared memory are zero-padded to a whole number of chunks, so the inner loops need no
// bounds (the padding adds exact zeros to the dots).
__host__ __device__ constexpr int padded_hd(int hd) {
    return (hd + kChunk - 1) / kChunk * kChunk;
}

// Shared memory: queries [64][hdp] (after the key loop: this block's accumulators), a key tile
// [kTile][hdp], the tile's scores/weights [64][kTile], the partial (m, l) [64][2], the merge
// weights [64][kMaxCluster], then the tile's key-present flags [kTile]. At hd 512: 167 KB.
size_t attention_smem(int hd) {
    const size_t hdp = padded_hd(hd);
    return ((kHeadsPerBlock + kTile) * hdp + kHeadsPerBlock * kTile + kHeadsPerBlock * 2 +
            kHeadsPerBlock * kMaxCluster) *
               sizeof(float) +
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

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
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

// One warp copies a row of hd floats (nullptr: zeros) into a shared row of hdp floats, zero
// padded. vec: every global row is 16-byte aligned (hd % 4 == 0 and aligned bases).
__device__ __forceinline__ void load_row(float* dst, const float* src, int hd, int hdp, bool vec,
                                         int lane) {
    if (src != nullptr && vec) {
        for (int d = lane * 4; d < hdp; d += kChunk)
            f4(dst + d) = d < hd ? f4(src + d) : make_float4(0.f, 0.f, 0.f, 0.f);
    } else {
        for (int d = lane; d < hdp; d += 32) dst[d] = src != nullptr && d < hd ? src[d] : 0.0f;
    }
}

__global__ void __launch_bounds__(kThreads, 1) attention_kernel(ops::AttentionArgs a, bool vec) {
    extern __shared__ float4 smem4[];
    cg::cluster_group cluster = cg::this_cluster();
    const int C = static_cast<int>(cluster.dim_blocks().x);
    const int rank = static_cast<int>(cluster.block_rank());
    const int t = static_cast<int>(blockIdx.x) / C;
    const int h0 = blockIdx.y * kHeadsPerBlock;
    const int nh = min(kHeadsPerBlock, a.H - h0);
    const int hd = a.hd, hdp = padded_hd(hd), nc = hdp / kChunk;
    float* q_s = reinterpret_cast<float*>(smem4);  // [64][hdp]; later the accumulators
    float* k_s = q_s + kHeadsPerBlock * hdp;       // [kTile][hdp]
    float* s_s = k_s + kTile * hdp;                // [64][kTile] scores, then weights
    float* ml_s = s_s + kHeadsPerBlock * kTile;    // [64][2] partial (m, l)
    float* w_s = ml_s + kHeadsPerBlock * 2;        // [64][kMaxCluster] merge weights
    int* ok_s = reinterpret_cast<int*>(w_s + kHeadsPerBlock * kMaxCluster);  // [kTile]

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
    // This block's slice of the keys (empty for the last ranks of a short list).
    const int64_t per = (kl.n_total + C - 1) / C;
    const int64_t j_begin = rank * per < kl.n_total ? rank * per : kl.n_total;
    const int64_t j_end = j_begin + per < kl.n_total ? j_begin + per : kl.n_total;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float* q = a.q + (static_cast<int64_t>(t) * a.H + h0) * hd;
    for (int h = warp; h < kHeadsPerBlock; h += kWarps)
        load_row(q_s + h * hdp, h < nh ? q + static_cast<int64_t>(h) * hd : nullptr, hd, hdp, vec,
                 lane);

    // Softmax state of heads warp + 16 hh; acc[hh][c] holds dims 128 c + 4 lane .. + 3.
    float4 acc[kHeadsPerWarp][kMaxChunks];
    float mrun[kHeadsPerWarp], lrun[kHeadsPerWarp];
#pragma unroll
    for (int hh = 0; hh < kHeadsPerWarp; ++hh) {
        const int h = warp + hh * kWarps;
        mrun[hh] = rank == 0 && h < nh ? a.sink[h0 + h] : -INFINITY;
        lrun[hh] = rank == 0 ? 1.0f : 0.0f;
#pragma unroll
        for (int c = 0; c < kMaxChunks; ++c) acc[hh][c] = make_float4(0.f, 0.f, 0.f, 0.f);
    }

    // Score tiling: warp w covers heads 8 (w / 2) .. +7 and keys 8 (w % 2) .. +7; lane = (lh, lk,
    // ld): heads +4 lh .. +3, keys +4 lk .. +3, dims 4 ld + 32 i .. +3. A quarter warp (8 lanes,
    // one ld each) reads 128 contiguous bytes of one row: no bank conflicts without padding.
    const int ld = lane & 7, lk = (lane >> 3) & 1, lh = lane >> 4;
    const int sh = (warp >> 1) * 8 + lh * 4, sk = (warp & 1) * 8 + lk * 4;
    const float* qsb = q_s + sh * hdp + ld * 4;
    const float* ksb = k_s + sk * hdp + ld * 4;

    for (int64_t j0 = j_begin; j0 < j_end; j0 += kTile) {
        __syncthreads();  // the previous tile is consumed (and q_s written, first round)
        {
            const int64_t j = j0 + warp;
            const float* k = j < j_end ? kl.key(j) : nullptr;
            load_row(k_s + warp * hdp, k, hd, hdp, vec, lane);
            if (lane == 0) ok_s[warp] = k != nullptr;
        }
        __syncthreads();

        // 1. Scores of the tile.
        float dot[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int k = 0; k < 4; ++k) dot[i][k] = 0.0f;
#pragma unroll 1
        for (int d = 0; d < hdp; d += 32) {
            float4 kv[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) kv[k] = f4(ksb + k * hdp + d);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float4 qv = f4(qsb + i * hdp + d);
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    dot[i][k] = fmaf(qv.x, kv[k].x, dot[i][k]);
                    dot[i][k] = fmaf(qv.y, kv[k].y, dot[i][k]);
                    dot[i][k] = fmaf(qv.z, kv[k].z, dot[i][k]);
                    dot[i][k] = fmaf(qv.w, kv[k].w, dot[i][k]);
                }
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                float s = dot[i][k];
#pragma unroll
                for (int o = 1; o < 8; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                if (ld == 0) s_s[(sh + i) * kTile + sk + k] = s * a.softmax_scale;
            }
        __syncthreads();

        // 2. Softmax update of this warp's heads; the weights replace the scores in s_s.
        float corr[kHeadsPerWarp];
#pragma unroll
        for (int hh = 0; hh < kHeadsPerWarp; ++hh) {
            const int h = warp + hh * kWarps;
            corr[hh] = 1.0f;
            if (h >= nh) continue;  // warp-uniform
            const float z = lane < kTile && ok_s[lane] ? s_s[h * kTile + lane] : -INFINITY;
            const float m_new = fmaxf(mrun[hh], warp_max(z));
            float e = 0.0f;
            if (m_new != -INFINITY) {  // else no key yet and none here: nothing changes
                corr[hh] = expf(mrun[hh] - m_new);  // 0 while the state is empty
                e = expf(z - m_new);                // 0 for a missing key
                lrun[hh] = lrun[hh] * corr[hh] + dev::warp_sum(e);
                mrun[hh] = m_new;
            }
            if (lane < kTile) s_s[h * kTile + lane] = e;
        }
        __syncwarp();

        // 3. Values. Rows of missing keys are zeros with weight 0; heads >= nh take weight 0
        // (their rows of s_s are never written; their acc is never stored).
#pragma unroll
        for (int hh = 0; hh < kHeadsPerWarp; ++hh)
#pragma unroll
            for (int c = 0; c < kMaxChunks; ++c) {
                acc[hh][c].x *= corr[hh];
                acc[hh][c].y *= corr[hh];
                acc[hh][c].z *= corr[hh];
                acc[hh][c].w *= corr[hh];
            }
#pragma unroll 1
        for (int j = 0; j < kTile; j += 4) {
            float4 pw[kHeadsPerWarp];
#pragma unroll
            for (int hh = 0; hh < kHeadsPerWarp; ++hh) {
                const int h = warp + hh * kWarps;
                pw[hh] = h < nh ? f4(s_s + h * kTile + j) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                const float* kr = k_s + (j + jj) * hdp + lane * 4;
#pragma unroll
                for (int c = 0; c < kMaxChunks; ++c) {
                    if (c >= nc) break;
                    const float4 v = f4(kr + c * kChunk);
#pragma unroll
                    for (int hh = 0; hh < kHeadsPerWarp; ++hh) {
                        const float w = comp(pw[hh], jj);
                        acc[hh][c].x = fmaf(w, v.x, acc[hh][c].x);
                        acc[hh][c].y = fmaf(w, v.y, acc[hh][c].y);
                        acc[hh][c].z = fmaf(w, v.z, acc[hh][c].z);
                        acc[hh][c].w = fmaf(w, v.w, acc[hh][c].w);
                    }
                }
            }
        }
    }

    // Partials into this block's shared memory (the queries are dead), then the merge.
    __syncthreads();
    float* part_s = q_s;  // [64][hdp]
#pragma unroll
    for (int hh = 0; hh < kHeadsPerWarp; ++hh) {
        const int h = warp + hh * kWarps;
        if (h >= nh) break;
#pragma unroll
        for (int c = 0; c < kMaxChunks; ++c)
            if (c < nc) f4(part_s + h * hdp + c * kChunk + lane * 4) = acc[hh][c];
        if (lane == 0) {
            ml_s[2 * h] = mrun[hh];
            ml_s[2 * h + 1] = lrun[hh];
        }
    }
    cluster.sync();  // every block's partials are written

    // Block `rank` merges heads rank, rank + C, ... . Rank 0 carries the sink, so M is finite
    // (for a finite sink) and the empty partials (m = -inf, l = 0) weigh 0.
    const int n_mine = rank < nh ? (nh - rank + C - 1) / C : 0;
    if (static_cast<int>(threadIdx.x) < n_mine) {
        const int h = rank + C * static_cast<int>(threadIdx.x);
        float m_all = -INFINITY;
        for (int r = 0; r < C; ++r) m_all = fmaxf(m_all, cluster.map_shared_rank(ml_s, r)[2 * h]);
        float l_all = 0.0f;
        for (int r = 0; r < C; ++r) {
            const float* ml = cluster.map_shared_rank(ml_s, r);
            l_all += ml[2 * h + 1] * expf(ml[2 * h] - m_all);
        }
        const float inv = 1.0f / l_all;
        for (int r = 0; r < C; ++r)
            w_s[threadIdx.x * kMaxCluster + r] =
                expf(cluster.map_shared_rank(ml_s, r)[2 * h] - m_all) * inv;
    }
    __syncthreads();
    const int n4 = (hd + 3) / 4;  // float4 columns holding output dims
    for (int i = threadIdx.x; i < n_mine * n4; i += kThreads) {
        const int k = i / n4, d = (i % n4) * 4;
        const int h = rank + C * k;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int r = 0; r < C; ++r) {
            const float w = w_s[k * kMaxCluster + r];
            if (w == 0.0f) continue;  // an empty slice (or one fully outweighed)
            const float4 v = f4(cluster.map_shared_rank(part_s, r) + h * hdp + d);
            o.x = fmaf(w, v.x, o.x);
            o.y = fmaf(w, v.y, o.y);
            o.z = fmaf(w, v.z, o.z);
            o.w = fmaf(w, v.w, o.w);
        }
        float* out = a.out + (static_cast<int64_t>(t) * a.H + h0 + h) * hd + d;
        if (vec) {
            f4(out) = o;
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (d + e < hd) out[e] = comp(o, e);
        }
    }
    cluster.sync();  // the other blocks have read this block's partials: it may exit
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

bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void launch_attention(const ops::AttentionArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.hd >= 1 && a.hd <= kAttnMaxHeadDim, "attention: head_dim ", a.hd, " (at most ",
                kAttnMaxHeadDim, ")");
    DSV4_ASSERT(a.entries == nullptr || a.compress_rate > 0, "attention: compress_rate 0");
    if (a.step.T == 0) return;
    const int groups = (a.H + kHeadsPerBlock - 1) / kHeadsPerBlock;
    // Blocks per cluster from the grid alone (key counts live in device memory): each block
    // needs ~167 KB of shared memory, so one per SM; a decode batch of a few tokens gets 8
    // blocks per token (a slice of ~80 of ~640 keys each), larger steps fewer, so the grid stays
    // within about two waves of an H200's 132 SMs, and from 129 (token, group) blocks on one
    // block per token (splitting more would only add merge work, not parallelism).
    const int64_t blocks = static_cast<int64_t>(a.step.T) * groups;
    const int cluster = blocks <= 32 ? kMaxCluster : blocks <= 64 ? 4 : blocks <= 128 ? 2 : 1;
    // The row loads and the output stores go 16 bytes at a time when every row is aligned.
    const bool vec = a.hd % 4 == 0 && aligned16(a.q) && aligned16(a.kv) && aligned16(a.ring) &&
                     aligned16(a.entries) && aligned16(a.out);
    // The attribute is a host-side setting (not a stream operation): allowed during capture.
    static const cudaError_t attr =
        cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(attention_smem(kAttnMaxHeadDim)));
    DSV4_CHECK_CUDA(attr);
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(a.step.T * cluster), static_cast<unsigned>(groups));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = attention_smem(a.hd);
    cfg.stream = stream;
    cudaLaunchAttribute attrs[1];
    attrs[0].id = cudaLaunchAttributeClusterDimension;
    attrs[0].val.clusterDim.x = static_cast<unsigned>(cluster);
    attrs[0].val.clusterDim.y = 1;
    attrs[0].val.clusterDim.z = 1;
    cfg.attrs = attrs;
    cfg.numAttrs = 1;
    DSV4_CHECK_CUDA(cudaLaunchKernelEx(&cfg, attention_kernel, a, vec));
    DSV4_CHECK_LAUNCH(stream);
}

void launch_ring_write(const ops::RingWriteArgs& a, cudaStream_t stream) {
    if (a.step.T == 0) return;
    ring_write_kernel<<<static_cast<unsigned>(a.step.T), 128, 0, stream>>>(a);
    DSV4_CHECK_LAUNCH(stream);
}

}  // namespace dsv4::cuda
