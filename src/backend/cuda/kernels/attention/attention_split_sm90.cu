// Sink attention for decode steps (attention.h: at most kAttnSplitMaxTokens tokens, float4
// rows). The cluster kernel (attention_sm90.cu) spends ~25 us on a batch-1 V4-Flash token
// whatever its key count: Nsight Compute showed its SMs idle for two thirds of the launch and
// its blocks stalled on instruction fetch (a ~125 KB body, fully unrolled over 4 heads x 8 keys
// x 4 chunks, run once per block: every instruction a cold miss) and on the cluster barriers;
// its time grew by ~7 us per extra 16-key tile. This kernel keeps the loops small (they stay in
// the instruction cache); its clusters only merge the key splits (below):
//  - grid (S key splits, G head groups x T tokens): a block takes 8 heads of one token and a
//    contiguous slice of its keys; S (host-known: T, H, W, K, n_entries, the SM count, never the
//    positions, so a CUDA graph replays it) fills up to two blocks an SM, at most kMaxSplits;
//  - 8 warps; the 8 heads' queries and a tile of 32 keys in shared memory (cp.async; typed
//    cache rows decoded as staged, in the kernel's typed instantiation);
//  - scores: warp (quad, octet) dots 4 heads x 8 keys over the head dim, one 128-dim chunk per
//    loop pass (4 + 8 float4 reads feed 128 FMAs), then a warp reduce-scatter leaves score
//    (head lane / 8, key lane % 8) on lane l;
//  - softmax: warp h owns head h (lane = key of the tile): running max m and sum l in
//    registers, the tile's weights p and the rescale factor into shared memory;
//  - values: warp (quad, chunk) keeps 4 heads x 4 dims a lane of the output in registers, each
//    key's float4 feeding 4 heads (p read as float4 broadcasts, 4 keys a pass);
//  - the S blocks of a (token, group) are a thread-block cluster (since session 21): each
//    leaves the partial (m, l, acc) of each head in its own shared memory and, after a cluster
//    barrier, merges a 1/S share of the outputs from every block's partial (distributed shared
//    memory) with the sink: M = max(sink, m_s), L = e^(sink - M) + sum l_s e^(m_s - M),
//    out = sum acc_s e^(m_s - M) / L, then the fused output rope. (AttentionScratch::
//    merge_in_cluster false: the partials go to the scratch and the last block of the (token,
//    group) to arrive (dev::last_to_arrive) merges them all, reading them back from L2.)
// With AttentionArgs::q_norm (split_norms_queries), each block norms its 8 heads' queries once
// they are staged (warp h head h: the sum of squares in double, then the norm kernel's scaling
// and rope, rms_norm_vec_row's arithmetic) instead of a norm launch before it.
// Missing keys (a CSA -1, past the slice) are zero rows with score -inf: p = 0. FP32
// throughout, as the cluster kernel; the reference (backend/cpu/ref/attention.cc) accumulates in
// double: tolerance in docs/numerics-cuda.md.
#include <cooperative_groups.h>

#include <algorithm>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/common/ptx_sm90.cuh"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/attention/attention_keys_sm90.cuh"
#include "backend/cuda/kernels/basic/basic.h"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/common/rope_sm90.cuh"
#include "base/check.h"

namespace dsv4::cuda {
namespace {

using namespace attn;
namespace cg = cooperative_groups;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kHeads = 8;  // heads a block: two quads
constexpr int kQuad = 4;   // heads a warp in the score and value passes
constexpr int kOct = 8;    // keys a warp in the score pass
constexpr int kTile = 32;  // keys a tile: 2 quads x 4 octets = 8 warps of scores
constexpr int kMaxChunks = kAttnMaxHeadDim / kChunk;
constexpr int kMaxSplits = 16;
static_assert(kQuad * kOct == 32, "one score of a warp's 4 x 8 a lane");
static_assert(kHeads == kWarps, "the softmax pass: warp h owns head h");
static_assert(kTile == 32, "the softmax pass: lane k owns key k of the tile");
static_assert(2 * kMaxChunks == kWarps, "the value pass: 2 quads x 4 chunks");

// Floats of a block's partial in the scratch: acc [kHeads][hdp], then (m, l) per head.
constexpr int64_t kPartStride = int64_t{kHeads} * (kAttnMaxHeadDim + 2);

// Shared memory (floats): queries [kHeads][hdp], keys [kTile][hdp], scores / weights
// [kHeads][kTile], rescale factors [kHeads], key-present flags [kTile] (int). hd 512: ~81 KB.
size_t split_smem(int hd) {
    const int hdp = padded_hd(hd);
    return (static_cast<size_t>(kHeads + kTile) * hdp + kHeads * kTile + kHeads) * sizeof(float) +
           kTile * sizeof(int);
}

// What the kernel reads that no earlier grid writes, before its programmatic wait (pdl.cuh):
// the block's heads' sinks and the cos / sin tables of the queries' rope and the output's
// inverse rope at the token's position (the step descriptor's, uploaded before the step). The
// three were global round trips after the wait: the queries' norm, the merge's first step and
// its last store each waited on one (session 38).
constexpr int kRopeTable = 64;  // pairs (V4: 32); wider ropes, or a rope whose rows are not
                                // the token's heads, compute theirs after the wait
struct PreWait {
    float* sink;                             // [kHeads]
    const dev::RopeCs* q_table = nullptr;    // [rope_dim / 2] when the queries' rope has one
    const dev::RopeCs* out_table = nullptr;  // likewise the output's

    static __device__ __forceinline__ bool tabled(const ops::FusedRope& r, int H) {
        return dev::rope_fits(r, kRopeTable) && r.heads == H;
    }
    // Every thread calls it: the sinks by threads [0, kHeads), each table that fits into q_cs /
    // out_cs ([kRopeTable] each) by rope_table's threads. q_on: the kernel norms the queries.
    __device__ __forceinline__ void load(const ops::AttentionArgs& a, bool q_on,
                                         const ops::FusedRope& q_rope, const ops::FusedRope& out,
                                         int t, int h0, dev::RopeCs* q_cs, dev::RopeCs* out_cs) {
        const int i = threadIdx.x;
        if (i < kHeads) sink[i] = h0 + i < a.H ? a.sink[h0 + i] : 0.0f;
        if (q_on && tabled(q_rope, a.H)) {
            dev::rope_table(q_rope, q_rope.pos[t], q_cs);
            q_table = q_cs;
        }
        if (tabled(out, a.H)) {
            dev::rope_table(out, out.pos[t], out_cs);
            out_table = out_cs;
        }
    }
};

// The merge of the S key splits of one (token t, head group from h0), split r's partial at
// split(r) (acc [kHeads][hdp], then (m, l) per head), with the sink: M = max(sink, m_r),
// L = e^(sink - M) + sum l_r e^(m_r - M), out = sum acc_r e^(m_r - M) / L, then the output
// rope. The weights per (head, split) into wsplit, then float4 outputs first, first + step, ...
// of the kHeads x hd. kCluster: the partials are in the cluster's blocks' shared memory (every
// block merges a share); else in the scratch, written by other blocks: read from L2 (__ldcg).
template <bool kCluster, class Split>
__device__ __forceinline__ void merge_splits(const ops::AttentionArgs& a,
                                             const ops::FusedRope& rope, const PreWait& pre, int t,
                                             int h0, int S, Split split,
                                             float (*wsplit)[kMaxSplits], int first, int step) {
    const int hd = a.hd, hdp = padded_hd(hd);
    if (threadIdx.x < kHeads && h0 + static_cast<int>(threadIdx.x) < a.H) {
        const int h = threadIdx.x;
        const float sink = pre.sink[h];
        float mr[kMaxSplits], lr[kMaxSplits];  // (all splits' loads issued together)
#pragma unroll
        for (int r = 0; r < kMaxSplits; ++r) {
            if (r < S) {
                const float* ml = split(r) + kHeads * hdp + 2 * h;
                mr[r] = kCluster ? ml[0] : __ldcg(ml);
                lr[r] = kCluster ? ml[1] : __ldcg(ml + 1);
            }
        }
        merge_weights<kMaxSplits>(sink, mr, lr, S, wsplit[h]);
    }
    __syncthreads();
    const int n4 = hd / 4;
    for (int o = first; o < kHeads * n4; o += step) {
        const int h = o / n4, d = (o - h * n4) * 4;
        if (h0 + h >= a.H) break;  // o only grows
        // Four splits' loads in flight at a time (all sixteen spill at 128 registers).
        float4 out = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int r0 = 0; r0 < S; r0 += 4) {
            float4 pr[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                if (r0 + k < S) {
                    const float* p = split(r0 + k) + h * hdp + d;
                    pr[k] = kCluster ? f4(p) : __ldcg(reinterpret_cast<const float4*>(p));
                }
            }
#pragma unroll
            for (int k = 0; k < 4; ++k)  // (weight 0: an empty split, not added)
                if (r0 + k < S && wsplit[h][r0 + k] != 0.0f) fma4(out, wsplit[h][r0 + k], pr[k]);
        }
        const int64_t row = static_cast<int64_t>(t) * a.H + h0 + h;
        f4(a.out + row * hd + d) = dev::rope_float4_from(out, rope, pre.out_table, row, d, hd);
    }
}

// The queries' per-head norm done in the kernel (AttentionArgs::q_norm): on, its eps and rope
// (by value; rope.inv_freq null: none).
struct QueryNorm {
    bool on = false;
    float eps = 0.0f;
    ops::FusedRope rope;
};

// Warp h norms head h of the block's staged queries (sq [kHeads][hdp]) in place: the sum of
// squares in double, inv = rms_inv, then each float4 scaled and roped as rms_norm_vec_row does.
__device__ __forceinline__ void norm_queries(float* sq, const ops::AttentionArgs& a,
                                             const QueryNorm& qn, const PreWait& pre, int t, int h0,
                                             int warp, int lane) {
    constexpr int kVec = kAttnMaxHeadDim / 4 / 32;  // float4s a lane
    if (h0 + warp >= a.H) return;
    const int hd = a.hd, n4 = hd / 4;
    float* const row = sq + warp * padded_hd(hd);
    float4 v[kVec];
    double ss = 0;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
        const int i = lane + 32 * j;
        v[j] = i < n4 ? f4(row + 4 * i) : make_float4(0.f, 0.f, 0.f, 0.f);
        ss = dev::add_squares(ss, v[j]);
    }
    const float inv = dev::rms_inv(dev::warp_sum(ss), hd, qn.eps);
    const int64_t qrow = static_cast<int64_t>(t) * a.H + h0 + warp;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
        const int i = lane + 32 * j;
        if (i < n4)
            f4(row + 4 * i) = dev::rope_float4_from(dev::rms_scale(v[j], inv, nullptr), qn.rope,
                                                    pre.q_table, qrow, 4 * i, hd);
    }
}

// The S blocks of a (token, head group) merge their partials one of two ways: kCluster, the
// blocks are a thread-block cluster, each leaves its partial in its own shared memory and merges
// a 1/S share of the outputs from all of them (distributed shared memory); otherwise through the
// scratch, the last block to arrive merging everything (see the file comment).
template <bool kTyped, bool kCluster>
__global__ void __launch_bounds__(kThreads, 2)
    attention_split_kernel(ops::AttentionArgs a, KeyRows kr, ops::FusedRope rope, float* part,
                           unsigned* arrivals, int S, int G, QueryNorm qn) {
    extern __shared__ float4 smem4[];
    __shared__ float wsplit[kHeads][kMaxSplits];  // the merge's weight of each split
    __shared__ float pre_sink[kHeads];
    __shared__ dev::RopeCs pre_q_cs[kRopeTable], pre_out_cs[kRopeTable];
    const int hd = a.hd, hdp = padded_hd(hd), nc = hdp / kChunk;
    float* const sq = reinterpret_cast<float*>(smem4);
    float* const sk = sq + kHeads * hdp;
    float* const ssc = sk + kTile * hdp;
    float* const scorr = ssc + kHeads * kTile;
    int* const sok = reinterpret_cast<int*>(scorr + kHeads);
    const int s = static_cast<int>(blockIdx.x);
    const int g = static_cast<int>(blockIdx.y) % G, t = static_cast<int>(blockIdx.y) / G;
    const int h0 = g * kHeads;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    PreWait pre{pre_sink};
    pre.load(a, qn.on, qn.rope, rope, t, h0, pre_q_cs, pre_out_cs);

    // The block's keys: from the step descriptor (pdl.cuh), its loads two dependent round trips
    // that go before the wait. (The first tile's rows that earlier steps wrote staged before the
    // wait too, session 42, made sliding and HCA attention ~2.6 us slower: loads issued under the
    // previous GEMV's stream.)
    const KeyList kl = key_list(a, kr, t);
    const int64_t per = (kl.n_total + S - 1) / S;
    const int64_t j_begin = s * per < kl.n_total ? s * per : kl.n_total;
    const int64_t j_end = j_begin + per < kl.n_total ? j_begin + per : kl.n_total;
    dev::pdl_enter();

    // The fused ring write (a step of one token a row: the launcher's condition): token t's K=V
    // row into its slot's ring row pos % R, which holds position pos - R, a key no token of this
    // step reads (token t reads positions > pos - W >= pos - R; other rows other slots). The
    // row as stored: kr.chunk's row t.
    if (a.ring_out != nullptr && s == 0 && g == 0) {
        const int b = a.step.tok_row[t];
        const int64_t R = a.ring_rows > 0 ? a.ring_rows : a.W, rb = kr.codec.bytes;
        copy_row(reinterpret_cast<uint8_t*>(a.ring_out) +
                     (a.step.row_slot[b] * R + a.step.tok_pos[t] % R) * rb,
                 kr.chunk + static_cast<int64_t>(t) * rb, rb);
    }

    // The block's queries (zeros past hd and for heads >= H), copied asynchronously: the first
    // tile's wait completes them.
    const int n4p = hdp / 4;
    for (int i = threadIdx.x; i < kHeads * n4p; i += kThreads) {
        const int h = i / n4p, d = (i - h * n4p) * 4;
        if (h0 + h < a.H && d < hd)
            ptx::cp_async_16(ptx::smem_addr(sq + h * hdp + d),
                             a.q + (static_cast<int64_t>(t) * a.H + h0 + h) * hd + d);
        else
            f4(sq + h * hdp + d) = make_float4(0.f, 0.f, 0.f, 0.f);
    }

    const int quad = warp & 1;              // score and value passes: heads 4 quad .. + 3
    const int oct = warp >> 1;              // score pass: keys 8 oct .. + 7 of the tile
    const int vc = warp >> 1;               // value pass: dims 128 vc + 4 lane .. + 3
    float m_run = -INFINITY, l_run = 0.0f;  // softmax pass: head `warp`
    float4 acc[kQuad];
#pragma unroll
    for (int i = 0; i < kQuad; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);

#pragma unroll 1
    for (int64_t j0 = j_begin; j0 < j_end; j0 += kTile) {
        // Warp w stages rows w, w + 8, ...: zeros (and flag 0) past the slice or for a -1. The
        // CSA list values first, all loads in flight together, then the copies.
        int32_t idx[kTile / kWarps];
#pragma unroll
        for (int k = 0; k < kTile / kWarps; ++k) {
            const int64_t j = j0 + warp + k * kWarps;
            idx[k] = j < j_end ? kl.index(j) : 0;
        }
#pragma unroll
        for (int k = 0; k < kTile / kWarps; ++k) {
            const int r = warp + k * kWarps;
            const int64_t j = j0 + r;
            const uint8_t* src = j < j_end ? kl.key(j, idx[k]) : nullptr;
            stage_row<kTyped>(sk + r * hdp, src, kr.codec, hd, hdp, true, lane);
            if (lane == 0) sok[r] = src != nullptr;
        }
        ptx::cp_async_commit();
        ptx::cp_async_wait<0>();
        __syncthreads();               // the tile (and, the first time, the queries) is in
        if (qn.on && j0 == j_begin) {  // (block-uniform)
            norm_queries(sq, a, qn, pre, t, h0, warp, lane);
            __syncthreads();
        }

        {  // Scores: item i * 8 + j = (head 4 quad + i, key 8 oct + j).
            float sc[kQuad * kOct];
#pragma unroll
            for (int k = 0; k < kQuad * kOct; ++k) sc[k] = 0.0f;
            const float* qb = sq + quad * kQuad * hdp + lane * 4;
            const float* kb = sk + oct * kOct * hdp + lane * 4;
#pragma unroll 1
            for (int c = 0; c < nc; ++c) {
                float4 qv[kQuad];
#pragma unroll
                for (int i = 0; i < kQuad; ++i) qv[i] = f4(qb + i * hdp + c * kChunk);
#pragma unroll
                for (int j = 0; j < kOct; ++j) {
                    const float4 kv = f4(kb + j * hdp + c * kChunk);
#pragma unroll
                    for (int i = 0; i < kQuad; ++i)
                        sc[i * kOct + j] = dot4(qv[i], kv, sc[i * kOct + j]);
                }
            }
            dev::warp_reduce_scatter(sc, lane);
            const int key = oct * kOct + (lane & 7);
            ssc[(quad * kQuad + (lane >> 3)) * kTile + key] =
                sok[key] ? sc[0] * a.softmax_scale : -INFINITY;
        }
        __syncthreads();

        {  // Softmax: warp h, lane k.
            const float z = ssc[warp * kTile + lane];
            const float m_new = fmaxf(m_run, dev::warp_max(z));
            const float corr = m_run == -INFINITY ? 0.0f : expf(m_run - m_new);
            const float p = z == -INFINITY ? 0.0f : expf(z - m_new);
            l_run = l_run * corr + dev::warp_sum(p);
            m_run = m_new;
            ssc[warp * kTile + lane] = p;
            if (lane == 0) scorr[warp] = corr;
        }
        __syncthreads();

        if (vc < nc) {  // Values (warp-uniform).
            const float* kb = sk + vc * kChunk + lane * 4;
            const float* pb = ssc + quad * kQuad * kTile;
#pragma unroll
            for (int i = 0; i < kQuad; ++i) {
                const float f = scorr[quad * kQuad + i];
                acc[i].x *= f;
                acc[i].y *= f;
                acc[i].z *= f;
                acc[i].w *= f;
            }
#pragma unroll 1
            for (int k0 = 0; k0 < kTile; k0 += 4) {
                float4 p4[kQuad];
#pragma unroll
                for (int i = 0; i < kQuad; ++i) p4[i] = f4(pb + i * kTile + k0);
#pragma unroll
                for (int kk = 0; kk < 4; ++kk) {
                    const float4 kv = f4(kb + (k0 + kk) * hdp);
#pragma unroll
                    for (int i = 0; i < kQuad; ++i) fma4(acc[i], comp(p4[i], kk), kv);
                }
            }
        }
        __syncthreads();  // the next tile overwrites the keys and the weights
    }

    ptx::cp_async_wait<0>();  // (an empty slice: the queries' copies, never waited for)

    // This block's partial: with kCluster in the key tile's space (free after the loop's last
    // barrier), else in the scratch.
    float* const all = part + static_cast<int64_t>(blockIdx.y) * S * kPartStride;
    float* const mine = kCluster ? sk : all + s * kPartStride;
    if (vc < nc) {
#pragma unroll
        for (int i = 0; i < kQuad; ++i)
            f4(mine + (quad * kQuad + i) * hdp + vc * kChunk + lane * 4) = acc[i];
    }
    if (lane == 0) {
        mine[kHeads * hdp + 2 * warp] = m_run;
        mine[kHeads * hdp + 2 * warp + 1] = l_run;
    }
    if constexpr (kCluster) {
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync();  // every block's partial is written
        // Output float4 o goes to thread o % kThreads of block o / kThreads % S.
        merge_splits<true>(
            a, rope, pre, t, h0, S,
            [&](int r) -> const float* { return cluster.map_shared_rank(sk, r); }, wsplit,
            s* kThreads + static_cast<int>(threadIdx.x), S * kThreads);
        cluster.sync();  // the other blocks have read this block's partial: it may exit
    } else {
        if (!dev::last_to_arrive(arrivals, S)) return;
        __syncthreads();  // (S == 1: this block's own writes)
        merge_splits<false>(
            a, rope, pre, t, h0, S, [&](int r) -> const float* { return all + r * kPartStride; },
            wsplit, static_cast<int>(threadIdx.x), kThreads);
    }
}

}  // namespace

int64_t attention_scratch_bytes(int sm_count) {
    const int64_t blocks = std::max(2 * sm_count, 256);
    return blocks * kPartStride * int64_t{sizeof(float)} + blocks * int64_t{sizeof(unsigned)};
}

AttentionScratch attention_scratch(void* p, int sm_count) {
    AttentionScratch ws;
    ws.max_blocks = std::max(2 * sm_count, 256);
    ws.part = static_cast<float*>(p);
    ws.arrivals = reinterpret_cast<unsigned*>(ws.part + ws.max_blocks * kPartStride);
    ws.sm_count = sm_count;
    return ws;
}

namespace attn {

bool split_norms_queries(const ops::AttentionArgs& a, const ops::RmsNormArgs& n) {
    DSV4_ASSERT(n.x == a.q && n.out == a.q && n.rows == a.step.T * a.H && n.dim == a.hd,
                "attention: q_norm must norm q in place, a row a head");
    // (The rope as the norm kernel fuses it: on float4-aligned trailing dims.)
    return n.weight == nullptr && !n.round_bf16 && n.also == nullptr && a.hd % 4 == 0 &&
           a.hd <= kAttnMaxHeadDim &&
           fuse_rope(n.rope, n.rows, n.dim, true, "attention q_norm").after.inv_freq == nullptr;
}

bool launch_attention_split(const ops::AttentionArgs& a, const KeyRows& kr,
                            const AttentionScratch& ws, bool vec, const ops::RmsNormArgs* q_norm,
                            cudaStream_t stream) {
    const int64_t T = a.step.T;
    if (ws.part == nullptr || !vec || T > kAttnSplitMaxTokens) return false;
    const int64_t G = (a.H + kHeads - 1) / kHeads;
    const int64_t tiles = std::max<int64_t>(1, (max_keys(a) + kTile - 1) / kTile);
    const int64_t by_grid = std::max<int64_t>(1, 2 * ws.sm_count / (T * G));
    const int S = static_cast<int>(std::min<int64_t>({kMaxSplits, tiles, by_grid}));
    if (T * G * S > ws.max_blocks) return false;
    static PerDeviceOnce set_attributes;  // (per device: ranks on several GPUs)
    const cudaError_t attr = set_attributes([] {
        cudaError_t e = cudaSuccess;
        for (auto* k : {attention_split_kernel<false, false>, attention_split_kernel<true, false>,
                        attention_split_kernel<false, true>, attention_split_kernel<true, true>}) {
            if (e == cudaSuccess)
                e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(split_smem(kAttnMaxHeadDim)));
            if (e == cudaSuccess)  // (clusters of up to kMaxSplits = 16 blocks)
                e = cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        }
        return e;
    });
    DSV4_CHECK_CUDA(attr);
    const RopeFusion rope = fuse_rope(a.out_rope, T * a.H, a.hd, true, "attention out");
    ops::AttentionArgs args = a;
    args.out_rope = nullptr;  // (host memory: the kernel takes the rope by value)
    const bool typed = kr.codec.type != CacheType::kF32, cluster = ws.merge_in_cluster;
    auto* kernel =
        typed ? (cluster ? attention_split_kernel<true, true> : attention_split_kernel<true, false>)
              : (cluster ? attention_split_kernel<false, true>
                         : attention_split_kernel<false, false>);
    QueryNorm qn;  // (q_norm: one split_norms_queries took)
    if (q_norm != nullptr) {
        qn.on = true;
        qn.eps = q_norm->eps;
        if (q_norm->rope != nullptr) qn.rope = *q_norm->rope;
    }
    launch_pdl(kernel, dim3(static_cast<unsigned>(S), static_cast<unsigned>(T * G)), kThreads,
               split_smem(a.hd), stream, cluster ? static_cast<unsigned>(S) : 1u, args, kr,
               rope.in_kernel, ws.part, ws.arrivals, S, static_cast<int>(G), qn);
    rope.launch_after(a.out, T * a.H, a.hd, stream);
    return true;
}

}  // namespace attn
}  // namespace dsv4::cuda
