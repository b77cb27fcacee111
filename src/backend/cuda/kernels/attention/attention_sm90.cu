// Sink attention (attention.h), the cluster kernel: prefill chunks and steps of more than
// kAttnSplitMaxTokens tokens (smaller steps with float4 rows take attention_split_sm90.cu when the
// backend passes its scratch; docs/perf.md, session 12). A token's work is its keys (its slot's
// ring positions before the chunk, the chunk's own tokens, then the compressed entries: all valid
// ones for HCA, the top-k list for CSA) times its heads. A V4-Flash decode token has up to 640 keys
// x 64 heads of 512 dims, ~42 M FMAs (scores and values): too much for a few SMs and too little to
// amortise a fixed cost per block. The previous kernel (a cluster of 8 blocks of all 64 heads per
// token) ran 25.9 / 38 / 76 us a call for sliding / HCA / CSA at batch 1 on an H200: 8 of 132 SMs
// working, each bound by shared-memory reads (2 FMAs per float read). This one spreads a token over
// more, lighter blocks:
//  - head groups (grid.y): 16 heads a block, or 8 when 16-head groups split 16 ways would still
//    give fewer than 128 blocks (a batch-1 step of 64 heads: 8 groups, not 4);
//  - key splits: a cluster of C blocks (up to 16, a non-portable size allowed by an attribute)
//    cuts the token's keys into C contiguous slices of whole batches of 8 keys, one per block
//    (the last ones empty for a short list); C is the largest power of two <= 16 with
//    T x groups x C <= 2 x the SM count (two blocks fit an SM) and (C - 1) x 8 < the most keys
//    a token can have (W + K for CSA, W + the entry capacity for HCA, W for sliding).
// Everything comes from host-known values (T, H, W, K, n_entries, the SM count), never from the
// positions in device memory: every decode step of a shape launches alike, so a CUDA graph
// replays it. At H = 64, hd = 512, W = 128, K = 512: batch 1 is 8 groups x 16 splits = 128
// blocks of 8 heads (CSA: 40 keys a block; sliding 8; HCA at 8K context 16 in 12 blocks, 4
// empty); batch 8 is 4 groups x 8 splits a token (256 blocks of 16 heads, CSA 80 keys); batch
// 32 is 4 groups x 2 splits (256 blocks, CSA 320 keys); from 64 tokens on one block per
// (token, group). Each key is read from L2 by every head group (4 or 8 times a token: <= 10 MB a
// batch-1 step, which the L2 serves in a few us spread over the SMs).
//
// A block is 4 warps; warp = (quad, key group): the queries of its 4 heads stay in registers
// (lane l holds dims 4l..4l+3 + 128c, c < 4), and so do their output accumulators. 16-head
// blocks are 4 quads x 1 key group, 8-head blocks 2 quads x 2 key groups (each group a
// separate online softmax over its half of every tile). Keys come through shared memory, read
// from global memory once per block for all its heads (V4 has one K=V head shared by every query
// head), in tiles of 8 keys per key group, double-buffered with cp.async: tile i+1 is in flight
// while tile i is computed, one __syncthreads a tile, and CSA's top-k indices are read a tile
// ahead of the copies that need them. Each warp takes its 8 keys of a tile:
//  1. scores: lane partial dots of 4 heads x 8 keys over its 16 dims (each key value read from
//     shared memory feeds 4 FMAs, the queries being in registers), then a reduce-scatter over
//     the warp (31 shuffles) completes score (head l / 8, key l % 8) on lane l;
//  2. softmax, one score per lane: the batch max per head (3 shuffles) and the running max m;
//     the accumulators and the lane's share of the denominator are rescaled only when m grows
//     (a warp-uniform branch: otherwise the factor would be exactly 1); p = exp(z - m);
//  3. values: acc[head] += p * key, the batch's p read back as broadcast float4s; a key's values
//     are read from shared memory a second time (4 FMAs per float again).
// So a warp does 1,024 FMAs per 256 floats read from shared memory (the old kernel: 2 per float)
// plus ~250 other instructions per batch, with no barrier inside a tile; < 256 registers, two
// blocks (8 warps) an SM. Missing keys (a CSA -1, past the slice end) are zero rows with
// z = -inf: p = 0. After the keys the two key groups of an 8-head block merge in shared memory,
// each block leaves its partial (m, l, acc) per head in its own shared memory, and the cluster
// merges through distributed shared memory, every thread one float4 of the outputs:
// M = max(sink, m_i), L = e^(sink - M) + sum l_i e^(m_i - M), out = sum acc_i e^(m_i - M) / L
// (the sink in the denominator only; an empty slice, m = -inf, weighs 0 and is not read).
// FP32 throughout; the reference (backend/cpu/ref/attention.cc) accumulates in double: tolerance
// in docs/numerics-cuda.md. round_bf16 (the bf16 reference mode) takes attention_bf16_sm90.cu.
#include <cooperative_groups.h>

#include <cstdint>

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

namespace cg = cooperative_groups;
using namespace attn;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kQuad = 4;       // heads per warp
constexpr int kBatch = 8;      // keys per warp per tile: 4 heads x 8 keys = one score a lane
constexpr int kMaxGroups = 2;  // key groups per block (8-head blocks)
constexpr int kMaxRows = kBatch * kMaxGroups;         // keys per tile
constexpr int kMaxHeads = kWarps * kQuad;             // 16
constexpr int kMaxCluster = 16;                       // non-portable: allowed by attribute
constexpr int kMaxChunks = kAttnMaxHeadDim / kChunk;  // 4
static_assert(kQuad * kBatch == 32, "one score of the batch per lane");
static_assert(kAttnMaxHeadDim % kChunk == 0, "head_dim limit in whole chunks");

// Shared memory (floats): the key tiles [2 buffers][8 x groups keys][hdp] (after the keys: the
// partials [Hb][hdp], then the second key group's [8][hdp]), the partial (m, l) [16][2], the
// second key group's (m, l) [8][2], each warp's batch weights [4][32], then the tiles'
// key-present flags [2][16] (int). hd 512: 33 KB (16 heads) or 65 KB (8 heads): two blocks fit
// an SM.
struct Smem {
    float* tiles;
    float* part;
    float* xpart;
    float* ml;
    float* xml;
    float* pw;
    int* ok;
};

__host__ __device__ inline size_t smem_floats_before_ok(int hd, int groups) {
    return static_cast<size_t>(2) * kBatch * groups * padded_hd(hd) + kMaxHeads * 2 + kBatch * 2 +
           kWarps * 32;
}

size_t attention_smem(int hd, int groups) {
    return smem_floats_before_ok(hd, groups) * sizeof(float) + 2 * kMaxRows * sizeof(int);
}

__device__ inline Smem carve(float* base, int hd, int groups) {
    const int hdp = padded_hd(hd);
    Smem s;
    s.tiles = base;
    s.part = base;
    s.xpart = base + kBatch * hdp;  // groups == 2 only: Hb = 8 rows of part before it
    s.ml = base + 2 * kBatch * groups * hdp;
    s.xml = s.ml + kMaxHeads * 2;
    s.pw = s.xml + kBatch * 2;
    s.ok = reinterpret_cast<int*>(s.pw + kWarps * 32);
    return s;
}

__device__ __forceinline__ float pick(const float (&v)[kQuad], int i) {
    return i == 0 ? v[0] : i == 1 ? v[1] : i == 2 ? v[2] : v[3];
}

// A 4-head part of a head's row for lane `lane`: dims 128 c + 4 lane .. + 3 of row `src` (hd
// floats), zeros past hd.
__device__ __forceinline__ float4 load_q(const float* src, int c, int hd, bool vec, int lane) {
    const int d = c * kChunk + lane * 4;
    if (vec) return d < hd ? f4(src + d) : make_float4(0.f, 0.f, 0.f, 0.f);
    float4 v;
    v.x = d < hd ? src[d] : 0.0f;
    v.y = d + 1 < hd ? src[d + 1] : 0.0f;
    v.z = d + 2 < hd ? src[d + 2] : 0.0f;
    v.w = d + 3 < hd ? src[d + 3] : 0.0f;
    return v;
}

template <bool kTyped>
__global__ void __launch_bounds__(kThreads, 2)
    attention_kernel(ops::AttentionArgs a, KeyRows kr, bool vec, int groups, ops::FusedRope rope) {
    dev::pdl_enter();
    extern __shared__ float4 smem4[];
    cg::cluster_group cluster = cg::this_cluster();
    const int C = static_cast<int>(cluster.dim_blocks().x);
    const int rank = static_cast<int>(cluster.block_rank());
    const int t = static_cast<int>(blockIdx.x) / C;
    const int hd = a.hd, hdp = padded_hd(hd), nc = hdp / kChunk;
    const int quads = kWarps / groups, hb = quads * kQuad;  // heads of this block
    const int h0 = static_cast<int>(blockIdx.y) * hb;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int quad = warp % quads, grp = warp / quads;
    const int hq = h0 + quad * kQuad;  // the warp's first head
    const int rows = kBatch * groups;  // keys per tile
    const Smem sm = carve(reinterpret_cast<float*>(smem4), hd, groups);

    // The warp's queries first (they need no step descriptor; zeros for heads >= H), and the
    // softmax state: acc[i][c] holds dims 128 c + 4 lane .. + 3 of head hq + i; lpart: the
    // lane's share of the denominator of head lane / 8.
    float4 q[kQuad][kMaxChunks], acc[kQuad][kMaxChunks];
    float mrun[kQuad];
    float lpart = 0.0f;
#pragma unroll
    for (int i = 0; i < kQuad; ++i) {
        mrun[i] = -INFINITY;
        const float* qrow = a.q + (static_cast<int64_t>(t) * a.H + hq + i) * hd;
#pragma unroll
        for (int c = 0; c < kMaxChunks; ++c) {
            acc[i][c] = make_float4(0.f, 0.f, 0.f, 0.f);
            q[i][c] = hq + i < a.H && c < nc ? load_q(qrow, c, hd, vec, lane)
                                             : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }

    const KeyList kl = key_list(a, kr, t);
    // This block's slice: a multiple of 8 keys (whole batches), empty for the last ranks of a
    // short list.
    const int64_t per = ((kl.n_total + C - 1) / C + kBatch - 1) / kBatch * kBatch;
    const int64_t j_begin = rank * per < kl.n_total ? rank * per : kl.n_total;
    const int64_t j_end = j_begin + per < kl.n_total ? j_begin + per : kl.n_total;
    const int64_t n_tiles = (j_end - j_begin + rows - 1) / rows;
    const bool computes = hq < a.H && n_tiles > 0;  // warp-uniform

    // Warp w stages rows w, w + 4, ... of each tile; idx: their CSA list values, one tile ahead.
    const int my_rows = rows / kWarps;  // 2 or 4
    int32_t idx[kMaxRows / kWarps];
    auto fetch = [&](int64_t j0) {
#pragma unroll
        for (int k = 0; k < kMaxRows / kWarps; ++k) {
            const int64_t j = j0 + warp + k * kWarps;
            idx[k] = k < my_rows && j < j_end ? kl.index(j) : 0;
        }
    };
    auto stage = [&](int64_t j0, int buf) {
#pragma unroll
        for (int k = 0; k < kMaxRows / kWarps; ++k) {
            if (k >= my_rows) break;
            const int r = warp + k * kWarps;
            const int64_t j = j0 + r;
            const uint8_t* src = j < j_end ? kl.key(j, idx[k]) : nullptr;
            stage_row<kTyped>(sm.tiles + (buf * rows + r) * hdp, src, kr.codec, hd, hdp, vec, lane);
            if (lane == 0) sm.ok[buf * kMaxRows + r] = src != nullptr;
        }
        ptx::cp_async_commit();
    };
    if (n_tiles > 0) {
        fetch(j_begin);
        stage(j_begin, 0);
        if (n_tiles > 1) fetch(j_begin + rows);
    }

    const int ih = lane >> 3, jk = lane & 7;  // the score this lane completes

    for (int64_t it = 0; it < n_tiles; ++it) {
        const int buf = static_cast<int>(it & 1);
        const int64_t j0 = j_begin + it * rows;
        ptx::cp_async_wait<0>();
        __syncthreads();  // tile `it` is in; everyone is done with the other buffer
        if (it + 1 < n_tiles) {
            stage(j0 + rows, buf ^ 1);
            if (it + 2 < n_tiles) fetch(j0 + 2 * rows);
        }
        if (!computes || j0 + grp * kBatch >= j_end) continue;  // warp-uniform
        const float* kb = sm.tiles + (buf * rows + grp * kBatch) * hdp + lane * 4;

        // 1. Partial dots, then the reduce-scatter: s[k] holds items (bits of lane above the
        // step) + k; at the end s[0] is item lane = (head lane / 8, key lane % 8), complete.
        float s[kQuad * kBatch];
#pragma unroll
        for (int k = 0; k < kQuad * kBatch; ++k) s[k] = 0.0f;
#pragma unroll
        for (int c = 0; c < kMaxChunks; ++c) {
            if (c >= nc) break;
#pragma unroll
            for (int j = 0; j < kBatch; ++j) {
                const float4 kv = f4(kb + j * hdp + c * kChunk);
#pragma unroll
                for (int i = 0; i < kQuad; ++i)
                    s[i * kBatch + j] = dot4(q[i][c], kv, s[i * kBatch + j]);
            }
        }
        dev::warp_reduce_scatter(s, lane);

        // 2. Softmax update.
        const bool ok = sm.ok[buf * kMaxRows + grp * kBatch + jk] != 0;
        const float z = ok ? s[0] * a.softmax_scale : -INFINITY;
        float bmax = z;
#pragma unroll
        for (int o = 1; o < kBatch; o <<= 1)
            bmax = fmaxf(bmax, __shfl_xor_sync(0xffffffffu, bmax, o));
#pragma unroll
        for (int i = 0; i < kQuad; ++i) {
            const float m_new = fmaxf(mrun[i], __shfl_sync(0xffffffffu, bmax, i * kBatch));
            if (m_new > mrun[i]) {  // warp-uniform; else the factor would be exactly 1
                const float corr = expf(mrun[i] - m_new);  // 0 while the state is empty
#pragma unroll
                for (int c = 0; c < kMaxChunks; ++c) {
                    acc[i][c].x *= corr;
                    acc[i][c].y *= corr;
                    acc[i][c].z *= corr;
                    acc[i][c].w *= corr;
                }
                if (ih == i) lpart *= corr;
                mrun[i] = m_new;
            }
        }
        const float m_own = pick(mrun, ih);
        const float e = m_own == -INFINITY ? 0.0f : expf(z - m_own);  // 0 for a missing key
        lpart += e;
        float* pw = sm.pw + warp * 32;
        pw[lane] = e;
        __syncwarp();

        // 3. Values: the batch's weights per head as broadcast float4s (keys 0-3, 4-7).
        float4 w[kQuad][2];
#pragma unroll
        for (int i = 0; i < kQuad; ++i) {
            w[i][0] = f4(pw + i * kBatch);
            w[i][1] = f4(pw + i * kBatch + 4);
        }
#pragma unroll
        for (int c = 0; c < kMaxChunks; ++c) {
            if (c >= nc) break;
#pragma unroll
            for (int j = 0; j < kBatch; ++j) {
                const float4 kv = f4(kb + j * hdp + c * kChunk);
#pragma unroll
                for (int i = 0; i < kQuad; ++i) fma4(acc[i][c], comp(w[i][j >> 2], j & 3), kv);
            }
        }
        // (pw is written again only after the next tile's __syncthreads.)
    }

    // The denominator of head lane / 8 on each of its 8 lanes.
    float lsum = lpart;
#pragma unroll
    for (int o = 1; o < kBatch; o <<= 1) lsum += __shfl_xor_sync(0xffffffffu, lsum, o);

    // Partials into shared memory (over the dead key tiles). With two key groups, group 1 hands
    // its state to group 0, which merges it in registers.
    __syncthreads();  // every warp is done with the tiles
    auto write_partial = [&](float* part, float* ml) {
#pragma unroll
        for (int i = 0; i < kQuad; ++i) {
            const int h = quad * kQuad + i;
#pragma unroll
            for (int c = 0; c < kMaxChunks; ++c)
                if (c < nc) f4(part + h * hdp + c * kChunk + lane * 4) = acc[i][c];
            if (lane == i * kBatch) {
                ml[2 * h] = mrun[i];
                ml[2 * h + 1] = lsum;
            }
        }
    };
    if (groups == 2 && grp == 1 && hq < a.H) write_partial(sm.xpart, sm.xml);
    __syncthreads();
    if (grp == 0 && hq < a.H) {
        if (groups == 2) {
#pragma unroll
            for (int i = 0; i < kQuad; ++i) {
                const int h = quad * kQuad + i;
                const float m1 = sm.xml[2 * h], l1 = sm.xml[2 * h + 1];
                const float m = fmaxf(mrun[i], m1);
                const float a0 = m == -INFINITY ? 0.0f : expf(mrun[i] - m);
                const float a1 = m == -INFINITY ? 0.0f : expf(m1 - m);
#pragma unroll
                for (int c = 0; c < kMaxChunks; ++c) {
                    if (c >= nc) break;
                    const float4 v = f4(sm.xpart + h * hdp + c * kChunk + lane * 4);
                    acc[i][c].x = acc[i][c].x * a0 + v.x * a1;
                    acc[i][c].y = acc[i][c].y * a0 + v.y * a1;
                    acc[i][c].z = acc[i][c].z * a0 + v.z * a1;
                    acc[i][c].w = acc[i][c].w * a0 + v.w * a1;
                }
                if (ih == i) lsum = lsum * a0 + l1 * a1;
                mrun[i] = m;
            }
        }
        write_partial(sm.part, sm.ml);
    }
    cluster.sync();  // every block's partials are written

    // The merge: float4 o of the cluster's hb x n4 outputs goes to thread o % 128 of block
    // o / 128 % C. Empty partials (m = -inf) weigh e^-inf = 0 and are not read.
    const int n4 = (hd + 3) / 4;
    for (int o = rank * kThreads + static_cast<int>(threadIdx.x); o < hb * n4; o += C * kThreads) {
        const int h = o / n4, d = (o % n4) * 4;
        if (h0 + h >= a.H) break;  // o only grows
        const float sink = a.sink[h0 + h];
        // Every rank's loads are issued before any is used (ranks past C read rank 0 again and
        // are not used): a load under `r < C`, or under the weight's test, waited for each
        // distributed-shared-memory round trip in turn.
        float wr[kMaxCluster], lr[kMaxCluster];
        float4 pr[kMaxCluster];
#pragma unroll
        for (int r = 0; r < kMaxCluster; ++r) {
            const int rr = r < C ? r : 0;
            const float2 ml =
                *reinterpret_cast<const float2*>(cluster.map_shared_rank(sm.ml, rr) + 2 * h);
            wr[r] = ml.x;
            lr[r] = ml.y;
            pr[r] = f4(cluster.map_shared_rank(sm.part, rr) + h * hdp + d);
        }
        attn::merge_weights<kMaxCluster>(sink, wr, lr, C, wr);
        float4 out = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int r = 0; r < kMaxCluster; ++r) {
            if (r >= C) break;
            // An empty slice (or one fully outweighed) weighs 0; its partial (never written for
            // an empty slice: garbage, maybe NaN) is not added.
            if (wr[r] != 0.0f) fma4(out, wr[r], pr[r]);
        }
        const int64_t row = static_cast<int64_t>(t) * a.H + h0 + h;
        out = dev::rope_float4(out, rope, row, d, hd);  // (launch_attention: vec when present)
        float* dst = a.out + row * hd + d;
        if (vec) {
            f4(dst) = out;
        } else {
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (d + e < hd) dst[e] = comp(out, e);
        }
    }
    cluster.sync();  // the other blocks have read this block's partials: it may exit
}

// One block per token (or row of x); only each row's last min(len, W) tokens are written, in
// the ring's format.
constexpr int kRowThreads = 128;

// The block stores the global row src [c.width] at out in the cache format, through sx
// [c.width] (shared memory).
__device__ __forceinline__ void block_store_row(const RowCodec& c, const float* src, float* sx,
                                                uint8_t* out) {
    for (int k = threadIdx.x; k < c.width; k += blockDim.x) sx[k] = src[k];
    dev::block_encode_row(c, sx, out);
}

__global__ void __launch_bounds__(kRowThreads) ring_write_kernel(ops::RingWriteArgs a, RowCodec c) {
    dev::pdl_enter();
    __shared__ float row[kAttnMaxHeadDim];
    const ops::StepDesc& st = a.step;
    const int t = blockIdx.x;
    const int b = st.tok_row[t];
    const int i = t - st.row_start[b];
    if (i < st.row_len[b] - a.W) return;  // (block-uniform)
    const int64_t R = a.ring_rows > 0 ? a.ring_rows : a.W;
    uint8_t* dst = reinterpret_cast<uint8_t*>(a.ring) +
                   (static_cast<int64_t>(st.row_slot[b]) * R + (st.row_pos0[b] + i) % R) * c.bytes;
    block_store_row(c, a.kv + static_cast<int64_t>(t) * a.hd, row, dst);
}

// x [T, width] -> out [T, c.bytes], a block a row (the step's own keys as the cache stores them).
__global__ void __launch_bounds__(kRowThreads)
    encode_rows_kernel(const float* x, uint8_t* out, RowCodec c) {
    dev::pdl_enter();
    __shared__ float row[kAttnMaxHeadDim];
    const int64_t t = blockIdx.x;
    block_store_row(c, x + t * c.width, row, out + t * c.bytes);
}

bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

int sm_count() {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return 132;
    return n;
}

}  // namespace

bool launch_attention(const ops::AttentionArgs& a_in, const AttentionScratch& ws,
                      cudaStream_t stream, bool ring_in_kernel) {
    // a: what the kernels see; a.ring_out stays set only for a split kernel's fused write.
    ops::AttentionArgs a = a_in;
    if (!ring_in_kernel || a.step.T != a.step.B) a.ring_out = nullptr;
    // The queries' norm: a launch of its own (norm_first) unless the split kernel takes it.
    a.q_norm = nullptr;  // (host memory)
    const ops::RmsNormArgs* q_norm = a_in.q_norm;
    auto norm_first = [&] {
        if (q_norm != nullptr) launch_rms_norm(*q_norm, stream);
        q_norm = nullptr;
    };
    if (q_norm != nullptr && (!ws.norm_in_kernel || !attn::split_norms_queries(a, *q_norm)))
        norm_first();
    auto ring_after = [&] {
        if (a_in.ring_out != nullptr)
            launch_ring_write({a_in.kv, a_in.ring_out, a_in.step, a_in.W, a_in.hd, a_in.kv_format,
                               a_in.ring_rows},
                              stream);
    };
    DSV4_ASSERT(a.hd >= 1 && a.hd <= kAttnMaxHeadDim, "attention: head_dim ", a.hd, " (at most ",
                kAttnMaxHeadDim, ")");
    DSV4_ASSERT(a.entries == nullptr || a.compress_rate > 0, "attention: compress_rate 0");
    if (a.step.T == 0) {
        norm_first();
        return false;
    }
    // Typed rows: the step's own rows encoded first (into the scratch), read back like the ring's.
    attn::KeyRows kr;
    kr.codec = row_codec(a.kv_format, a.hd);
    const bool typed = kr.codec.type != CacheType::kF32;
    if (typed) {
        DSV4_ASSERT(a.step.T * kr.codec.bytes <= ws.rows_bytes, "CUDA attention: ", a.step.T,
                    " typed rows of ", kr.codec.bytes, " bytes need more scratch than ",
                    ws.rows_bytes, " (prepare_steps)");
        launch_pdl(encode_rows_kernel, static_cast<unsigned>(a.step.T), kRowThreads, 0, stream, 1,
                   a.kv, ws.rows, kr.codec);
        kr.chunk = ws.rows;
    } else {
        kr.chunk = reinterpret_cast<const uint8_t*>(a.kv);
    }
    if (a.round_bf16) {  // the bf16 reference mode: its own kernel, then the ring write
        norm_first();
        attn::launch_attention_bf16(a, kr, stream);
        ring_after();
        return false;
    }
    // The row loads and the output stores go 16 bytes at a time when every row is aligned.
    const bool vec = a.hd % 4 == 0 && aligned16(a.q) && aligned16(a.out) &&
                     (typed || (aligned16(a.kv) && aligned16(a.ring) && aligned16(a.entries)));
    if (attn::launch_attention_split(a, kr, ws, vec, q_norm, stream)) {
        if (a.ring_out == nullptr) ring_after();
        return true;
    }
    norm_first();
    a.ring_out = nullptr;  // (the cluster kernel does not write the ring)
    static const int sms = sm_count();
    const int64_t T = a.step.T;
    // Head groups of 16, or of 8 (two key groups per block) when 16-head groups split 16 ways
    // would still leave most SMs idle (a batch-1 step of 64 heads: 64 blocks -> 128).
    const int64_t groups16 = (a.H + kMaxHeads - 1) / kMaxHeads;
    const int key_groups = T * groups16 * kMaxCluster < 128 ? 2 : 1;
    const int hb = kMaxHeads / key_groups;
    const int64_t groups = (a.H + hb - 1) / hb;
    // Key splits: up to two blocks per SM in all (they fit: <= 65 KB of shared memory, <= 255
    // registers x 128 threads), at least 8 keys of the longest possible list per split.
    int cluster = kMaxCluster;
    while (cluster > 1 && (T * groups * cluster > 2 * sms ||
                           static_cast<int64_t>(cluster - 1) * kBatch >= max_keys(a)))
        cluster /= 2;
    // The attributes are host-side settings (not stream operations): allowed during capture.
    static PerDeviceOnce set_attributes;  // (per device: ranks on several GPUs)
    const cudaError_t attr = set_attributes([] {
        cudaError_t e = cudaSuccess;
        for (auto* k : {attention_kernel<false>, attention_kernel<true>}) {
            if (e == cudaSuccess)
                e = cudaFuncSetAttribute(
                    k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                    static_cast<int>(attention_smem(kAttnMaxHeadDim, kMaxGroups)));
            if (e == cudaSuccess)
                e = cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        }
        return e;
    });
    DSV4_CHECK_CUDA(attr);
    ops::AttentionArgs args = a;
    args.out_rope = nullptr;  // (host memory: the kernel takes the rope by value)
    const RopeFusion rope = fuse_rope(a.out_rope, T * a.H, a.hd, vec, "attention out");
    launch_pdl(typed ? attention_kernel<true> : attention_kernel<false>,
               dim3(static_cast<unsigned>(T * cluster), static_cast<unsigned>(groups)), kThreads,
               attention_smem(a.hd, key_groups), stream, static_cast<unsigned>(cluster), args, kr,
               vec, key_groups, rope.in_kernel);
    rope.launch_after(a.out, T * a.H, a.hd, stream);
    ring_after();
    return false;
}

void launch_ring_write(const ops::RingWriteArgs& a, cudaStream_t stream) {
    if (a.step.T == 0) return;
    DSV4_ASSERT(a.hd <= kAttnMaxHeadDim, "ring_write: head_dim ", a.hd);
    launch_pdl(ring_write_kernel, static_cast<unsigned>(a.step.T), kRowThreads, 0, stream, 1, a,
               row_codec(a.kv_format, a.hd));
}

}  // namespace dsv4::cuda
