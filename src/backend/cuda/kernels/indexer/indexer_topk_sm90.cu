// Indexer top-k (indexer_topk.h): several blocks per token (below). Scores are computed
// exactly as the reference does (backend/cpu/ref/indexer.cc): each q_h . key dot in double with
// the same four interleaved partial sums s_j (j = k mod 4, each in increasing k) and the same
// final pairing (s0 + s1) + (s2 + s3), then s += w_h * max(d, 0) in head order, every step an
// explicitly rounded double operation, so the float scores are bitwise those of the CPU and the
// selection matches exactly, ties included. Each block of the cluster scores a contiguous slice
// of the token's valid entries; block 0 then selects the keep = min(K, valid) largest scores
// with ties to the lower index (dev::block_topk_threshold's radix select over order-preserving
// keys, then a scan in index order that also yields the output sorted by entry index), padded
// with -1. Keys of any cache format are decoded as loaded (cache_row_sm90.cuh); with fp4 keys
// q is Hadamard-rotated after its rope, unless q_rotated. A fused
// rope on q (IndexerTopkArgs::q_rope) rotates the staged queries with the rope kernel's arithmetic
// (rope_sm90.cuh), the pairs' cos and sin computed once a block, and the weights' w_scale is one
// rounded multiply, as the scale op's: the scores are those of rope, scale, then this kernel.
//
// V4 shapes (64 heads x 128 dims, both V4-Flash and V4-Pro): indexer_topk_v4_kernel, bound by
// FP64 FMA throughput (2048 entries x 64 heads x 128 dims per token at 8K context: 1M FMAs per
// block, ~8 us at the 64 DFMA/clock of an SM). 256 threads: warp w computes the partial sum
// j = w % 4 for entry group g = w / 4, lane l for heads 2l and 2l + 1, whose 2 x 32 query terms
// of partial sum j stay in registers as doubles (converted once per block). Keys are staged a
// tile of 32 entries at a time in shared memory as doubles (converted once when stored), split
// by partial sum ([entry][j][term]), so every key read is a warp-wide broadcast (one address,
// two terms per 128-bit load) feeding four FMAs per lane; each warp runs 4 entries x 2 heads
// of independent sums. Each multiply-add is one DFMA: the operands are floats, whose product
// (24 + 24 significant bits, exponents far inside double's range) is exact in double, so
// fma(a, b, s) = round(a * b + s) = round(round(a * b) + s), bit for bit the reference's
// separately rounded multiply and add. A tile's partial sums go to shared memory; after a
// barrier each thread pairs them, (s0 + s1) + (s2 + s3), and applies the ReLU and the weight
// (w_h * max(d, 0): a separately rounded double multiply and add, as in the reference, since
// d is a double and that product is not exact) for some (entry, head). The head-order sum of each
// entry (64 dependent adds) is done by lanes 0-7 of warps 0-3 at the start of the next tile,
// overlapping the FMAs of warps 4-7 (which share the SM sub-partitions), and written straight into
// block 0's scores through distributed shared memory (no gather). The next key tile's global loads
// are issued before a tile's FMAs and converted and stored after them. Shared memory: keys 32 KB,
// partial sums 64 KB (also the q staging area and the selection's scratch), weighted terms 16.5 KB,
// then the slot's scores: at most 29168 entries (~116K tokens at m = 4).
//
// The blocks of a token: a cluster of kCluster (16), the scores gathered in block 0's shared
// memory, or, for decode steps (at most kSplitMaxTokens tokens, with the backend's scratch),
// S blocks without a cluster (kSplit): kSplitMinEntries (16, half a tile) or more each, one wave
// of the GPU (at 8K context and batch 1, 128 blocks of 16 entries instead of 16 of 128: the FP64
// work on 8x the SMs; blocks of a whole tile, 64 of them, measured ~1.5% slower a step:
// docs/perf.md, session 27). Each writes its scores into the token's row of the scratch; the last
// block to finish (dev::last_to_arrive) copies the row into its shared memory and selects. Larger
// steps keep the cluster (T x 16 blocks fill the GPU already).
//
// Other shapes (test models): indexer_topk_kernel, 512 threads, one dot per lane in double from
// float shared memory (queries [Hi][hi + 1], key tiles of 32 entries), block 0 pulling the other
// blocks' scores; exact the same way, and slow: it took 122 us a call at V4-Flash's shapes and
// 8K context (one block per token without the cluster: 8.9 ms).
//
// The bf16 reference mode (IndexerTopkArgs::round_bf16) takes the generic kernel at every shape,
// its own instantiation (kBf16; the float kernels' code is unchanged): the same double dots, then
// the reference's bf16 steps in its order, d rounded to float then bf16, the ReLU, the product
// with the weight in float rounded to bf16, the head-order sum in double (as the CPU's, which adds
// the float terms to a double), rounded to float then bf16. Every step is an explicitly rounded
// operation on the reference's operands, so the scores, and with the same tie rule the selection,
// are bitwise the CPU's. (A reference mode: the V4 kernels' speed is not needed there.)
#include <cooperative_groups.h>

#include <algorithm>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/common/cache_row_sm90.cuh"
#include "backend/cuda/kernels/common/rope_sm90.cuh"
#include "backend/cuda/kernels/indexer/indexer_topk.h"
#include "base/check.h"
#include "base/fp_codes.h"

namespace dsv4::cuda {
namespace {

namespace cg = cooperative_groups;

// Blocks per token: 16, a non-portable cluster size (allowed by an attribute at the first
// launch): the scores are FP64 (bitwise the reference's), so the more SMs the better.
constexpr int kCluster = 16;
constexpr size_t kMaxSmem = 227 * 1024;  // H100/H200 opt-in per block
// Steps of at most this many tokens take the split V4 kernel (beyond it T x kCluster blocks
// fill the GPU already).
constexpr int64_t kSplitMaxTokens = 8;
// The split kernel's blocks take at least this many entries (half a tile: two of its four rounds
// of FMAs), as many blocks as that makes up to one an SM.
constexpr int kSplitMinEntries = 16;
constexpr size_t kV4StaticBytes = 64;  // static shared memory of the V4 kernels, at most

// Block 0, after every score of the token is in `score`: the top min(K, valid) indices in
// index order, then -1. `hist` is 256 unsigned, `red` 32 ints of shared memory.
__device__ void select_topk(const float* score, int64_t valid, int K, int32_t* out, unsigned* hist,
                            int* red) {
    const int64_t keep = K < valid ? K : valid;
    if (keep > 0) {
        auto key = [&](int64_t i) { return dev::order_key(score[i]); };
        int64_t above = 0;
        const uint32_t thr = dev::block_topk_threshold(key, valid, keep, hist, red, &above);
        dev::block_topk_collect(key, valid, thr, above, keep, red, [&](int64_t i, int64_t rank_i) {
            out[rank_i] = static_cast<int32_t>(i);
        });
    }
    for (int64_t j = keep + threadIdx.x; j < K; j += blockDim.x) out[j] = -1;
}

// ---- V4 shapes ------------------------------------------------------------------------------

constexpr int kHeads = 64, kDim = 128;
constexpr int kTerms = kDim / 4;  // terms of one partial sum
constexpr int kV4Threads = 256;   // 4 partial sums x 2 entry groups, a lane per head pair
constexpr int kTile = 32;         // entries staged per tile
constexpr int kChunk = 4;         // entries a warp computes at once
constexpr int kRound = 2 * kChunk;
constexpr int kQStride = kHeads + 2;  // q staging rows (floats): conflict-free both ways
constexpr int kPStride = kHeads + 2;  // weighted-term rows (doubles): 8 rows hit 8 bank groups
static_assert(kHeads == 2 * 32 && kTile % kRound == 0 && kTile == 4 * 8);

// Shared memory, in doubles: key tile [kTile][4][kTerms], partial sums [kTile][4][kHeads],
// weighted terms [kTile][kPStride], weights [kHeads]; then the scores (floats).
constexpr int kKeyDoubles = kTile * kDim;
constexpr int kPartDoubles = kTile * 4 * kHeads;
constexpr int kPDoubles = kTile * kPStride;
constexpr size_t kV4Fixed = (kKeyDoubles + kPartDoubles + kPDoubles + kHeads) * sizeof(double);
// The partial-sum buffer doubles as the q staging area ([4][kTerms][kQStride] floats) before the
// first tile and as the selection's scratch after the last.
static_assert(4 * kTerms * kQStride * sizeof(float) <= kPartDoubles * sizeof(double));
static_assert((256 + 32) * sizeof(int) <= kPartDoubles * sizeof(double));

constexpr int kTileF4 = kTile * kDim / 4 / kV4Threads;  // float4 of a key tile per thread
static_assert(kTile * kDim / 4 % kV4Threads == 0);

// kSplit = false: a cluster of kCluster blocks per token (grid T x kCluster), the scores
// gathered in block 0's shared memory. kSplit = true: S blocks per token (grid S x T, no
// cluster), the scores through `scores` ([T][n_entries] floats of global scratch), the last
// block of the token to finish (dev::last_to_arrive on `arrivals`, [T] zeros) copies them into
// its shared memory and selects.
template <bool kSplit, bool kTyped>
__global__ void __launch_bounds__(kV4Threads, 1)
    indexer_topk_v4_kernel(ops::IndexerTopkArgs a, RowCodec c, bool rotate_q_arg, float* scores,
                           unsigned* arrivals, int S) {
    // (Instantiated per kTyped: the f32 kernels carry no decoding or rotation code.)
    const bool rotate_q = kTyped && rotate_q_arg;
    dev::pdl_enter();
    extern __shared__ __align__(16) double smem[];
    const int blocks = kSplit ? S : kCluster;
    int rank = static_cast<int>(blockIdx.x);
    int64_t t = blockIdx.y;
    if constexpr (!kSplit) {
        // Distributed shared memory may be written only once every block of the cluster runs:
        // this arrival is waited for just before the first remote write.
        cg::this_cluster().barrier_arrive();
        rank = static_cast<int>(cg::this_cluster().block_rank());
        t = blockIdx.x / kCluster;
    }
    const ops::StepDesc& st = a.step;
    const int64_t valid = (st.tok_pos[t] + 1) / a.m;
    const uint8_t* keys = reinterpret_cast<const uint8_t*>(a.keys) +
                          st.row_slot[st.tok_row[t]] * a.n_entries * c.bytes;
    double* key_s = smem;
    double* part = key_s + kKeyDoubles;
    double* p_s = part + kPartDoubles;
    double* w_s = p_s + kPDoubles;
    float* score = reinterpret_cast<float*>(w_s + kHeads);
    // Where this block's scores go: block 0's shared memory, or the token's row of the scratch.
    float* score0 = nullptr;
    if constexpr (kSplit)
        score0 = scores + t * a.n_entries;
    else
        score0 = cg::this_cluster().map_shared_rank(score, 0);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int j = warp & 3, g = warp >> 2;
    // This block's slice of the entries.
    const int64_t per = (valid + blocks - 1) / blocks, e_begin = rank * per;
    const int n_b =
        static_cast<int>(valid < e_begin ? 0 : (valid < e_begin + per ? valid - e_begin : per));
    const int n_tiles = (n_b + kTile - 1) / kTile;

    // Key tiles: thread tid holds float4 f = tid + kV4Threads * m of the tile (entry f / kTerms,
    // terms 4c..4c+3 with c = f % kTerms) between the load and the store.
    float4 pre[kTileF4];
    auto load_tile = [&](int tile) {
        const int e0 = tile * kTile, n = n_b - e0 < kTile ? n_b - e0 : kTile;
        const uint8_t* src = keys + (e_begin + e0) * c.bytes;
        if constexpr (!kTyped) {
#pragma unroll
            for (int m = 0; m < kTileF4; ++m) {
                const int f = tid + kV4Threads * m;
                pre[m] = f / kTerms < n ? __ldg(reinterpret_cast<const float4*>(src) + f)
                                        : make_float4(0.f, 0.f, 0.f, 0.f);
            }
        } else {  // (typed keys: decoded as loaded; the launcher checked c.vec4)
#pragma unroll
            for (int m = 0; m < kTileF4; ++m) {
                const int f = tid + kV4Threads * m;
                pre[m] = f / kTerms < n
                             ? dev::decode4(c, src + (f / kTerms) * c.bytes, 4 * (f % kTerms))
                             : make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
    };
    auto store_tile = [&] {
#pragma unroll
        for (int m = 0; m < kTileF4; ++m) {
            const int f = tid + kV4Threads * m;
            double* d = key_s + (f / kTerms) * kDim + f % kTerms;  // [e][j][c], j = 0
            d[0] = pre[m].x;
            d[kTerms] = pre[m].y;
            d[2 * kTerms] = pre[m].z;
            d[3 * kTerms] = pre[m].w;
        }
    };
    // Warps 0-3, lanes 0-7: the head-order sum of an entry of a finished tile, into block 0.
    auto finish = [&](int tile, int n) {
        const int e = warp * 8 + lane;
        if (lane < 8 && e < n) {
            const double* pr = p_s + e * kPStride;
            double s = 0;
#pragma unroll 8
            for (int h = 0; h < kHeads; h += 2) {
                const double2 v = *reinterpret_cast<const double2*>(pr + h);
                s = __dadd_rn(s, v.x);
                s = __dadd_rn(s, v.y);
            }
            score0[e_begin + tile * kTile + e] = static_cast<float>(s);
        }
    };

    double q0[kTerms], q1[kTerms];  // terms j, j + 4, ... of heads 2 * lane and 2 * lane + 1
    if (n_tiles > 0) {
        load_tile(0);
        // q staged as floats, [j][c][h] (h = head, c = term of partial sum j), through the
        // partial-sum buffer: warp-wide stores hit 32 banks (two heads x 16 terms), and each
        // lane reads its two heads with one 64-bit load.
        float* qs = reinterpret_cast<float*>(part);
        const float* qg = a.q + t * kHeads * kDim;
        // A fused rope (IndexerTopkArgs::q_rope): the pairs' cos and sin once, in the
        // weighted-term buffer (unused until the first tile).
        const bool roped = a.q_rope.inv_freq != nullptr;
        auto* cs = reinterpret_cast<dev::RopeCs*>(p_s);
        if (roped) {
            dev::rope_table(a.q_rope, a.q_rope.pos[t], cs);
            __syncthreads();
        }
        auto load_q = [&](int h, int c) {
            // (A plain load: q comes from the previous kernel, and an __ldg, which the compiler
            // treats as invariant, could be hoisted above the PDL wait.)
            float4 v = reinterpret_cast<const float4*>(qg + h * kDim)[c];
            if (roped)
                v = dev::rope_float4_by(v, a.q_rope.rope_dim, 4 * c, kDim,
                                        [&](int i) { return cs[i]; });
            return v;
        };
        // fp4 keys are Hadamard-rotated: q too (after its rope), [head][dim] in the key tile's
        // buffer (unused until the first tile is stored).
        float* const qr = reinterpret_cast<float*>(key_s);
        if (rotate_q) {
            for (int x = tid; x < kHeads * kTerms; x += kV4Threads)
                *reinterpret_cast<float4*>(qr + (x / kTerms) * kDim + 4 * (x % kTerms)) =
                    load_q(x / kTerms, x % kTerms);
            dev::block_hadamard(qr, kDim, kHeads, kDim);
        }
        for (int x = tid; x < kHeads * kTerms; x += kV4Threads) {
            const int wx = x >> 5, lx = x & 31;
            const int h = 2 * (wx >> 1) + (lx >> 4), c = 16 * (wx & 1) + (lx & 15);
            const float4 v =
                rotate_q ? *reinterpret_cast<const float4*>(qr + h * kDim + 4 * c) : load_q(h, c);
            qs[(0 * kTerms + c) * kQStride + h] = v.x;
            qs[(1 * kTerms + c) * kQStride + h] = v.y;
            qs[(2 * kTerms + c) * kQStride + h] = v.z;
            qs[(3 * kTerms + c) * kQStride + h] = v.w;
        }
        for (int h = tid; h < kHeads; h += kV4Threads)
            w_s[h] = __fmul_rn(a.w[t * kHeads + h], a.w_scale);
        __syncthreads();
#pragma unroll
        for (int c = 0; c < kTerms; ++c) {
            const float2 v =
                *reinterpret_cast<const float2*>(qs + (j * kTerms + c) * kQStride + 2 * lane);
            q0[c] = v.x;
            q1[c] = v.y;
        }
        store_tile();     // (its loads were in flight meanwhile)
        __syncthreads();  // q read out of the partial-sum buffer; the first key tile in
    }
    if constexpr (!kSplit) cg::this_cluster().barrier_wait();

    for (int tile = 0; tile < n_tiles; ++tile) {
        const int n = n_b - tile * kTile < kTile ? n_b - tile * kTile : kTile;
        if (tile + 1 < n_tiles) load_tile(tile + 1);
        if (tile > 0 && warp < 4) finish(tile - 1, kTile);
        // This warp's partial sum j of heads 2l, 2l + 1 for kChunk entries at a time.
        for (int r = 0; r < kTile / kRound; ++r) {
            const int e0 = r * kRound + g * kChunk;
            if (e0 >= n) break;
            const double* kb = key_s + e0 * kDim + j * kTerms;
            double acc0[kChunk], acc1[kChunk];
#pragma unroll
            for (int c = 0; c < kChunk; ++c) acc0[c] = acc1[c] = 0.0;
#pragma unroll
            for (int i = 0; i < kTerms; i += 2) {
#pragma unroll
                for (int c = 0; c < kChunk; ++c) {
                    const double2 kv = *reinterpret_cast<const double2*>(kb + c * kDim + i);
                    acc0[c] = __fma_rn(q0[i], kv.x, acc0[c]);
                    acc1[c] = __fma_rn(q1[i], kv.x, acc1[c]);
                    acc0[c] = __fma_rn(q0[i + 1], kv.y, acc0[c]);
                    acc1[c] = __fma_rn(q1[i + 1], kv.y, acc1[c]);
                }
            }
#pragma unroll
            for (int c = 0; c < kChunk; ++c)
                *reinterpret_cast<double2*>(part + ((e0 + c) * 4 + j) * kHeads + 2 * lane) =
                    make_double2(acc0[c], acc1[c]);
        }
        __syncthreads();  // the tile's partial sums are in; its keys are consumed
        for (int x = tid; x < n * kHeads; x += kV4Threads) {
            const int e = x / kHeads, h = x % kHeads;
            const double* s = part + e * 4 * kHeads + h;
            const double d =
                __dadd_rn(__dadd_rn(s[0], s[kHeads]), __dadd_rn(s[2 * kHeads], s[3 * kHeads]));
            p_s[e * kPStride + h] = __dmul_rn(w_s[h], d < 0.0 ? 0.0 : d);
        }
        if (tile + 1 < n_tiles) store_tile();
        __syncthreads();  // weighted terms and the next keys are in
    }
    if (n_tiles > 0 && warp < 4) finish(n_tiles - 1, n_b - (n_tiles - 1) * kTile);
    if constexpr (kSplit) {
        if (!dev::last_to_arrive(arrivals, S)) return;
        // The token's scores, written by the S blocks (read through L2: never a stale L1 line).
        for (int64_t i = tid; i < valid; i += kV4Threads)
            score[i] = __uint_as_float(ptx::ld_cg_u32(score0 + i));
        __syncthreads();
    } else {
        cg::this_cluster().sync();  // every score is in block 0; the others may exit
        if (rank != 0) return;
    }
    select_topk(score, valid, a.K, a.topk + t * a.K, reinterpret_cast<unsigned*>(part),
                reinterpret_cast<int*>(part) + 256);
}

// ---- Other shapes ---------------------------------------------------------------------------

constexpr int kThreads = 512;
constexpr int kKeyTile = 32;  // entries staged per round: one per lane

// Static shared memory of the generic kernel (selection scratch), out of the same budget.
constexpr size_t kStaticBytes = (256 + 32) * sizeof(int);

// Shared memory: the dots of a tile [kKeyTile][Hi + 1] (double, first for alignment), the queries
// [Hi][hi + 1], the weights [Hi], a key tile [kKeyTile][hi + 1], then the scores [n_entries].
size_t fixed_bytes(int Hi, int hi) {
    return static_cast<size_t>(kKeyTile) * (Hi + 1) * sizeof(double) +
           (static_cast<size_t>(Hi) * (hi + 1) + Hi + static_cast<size_t>(kKeyTile) * (hi + 1)) *
               sizeof(float);
}

// The reference's dot (cpu_ref::dot): four interleaved double partial sums, (s0+s1)+(s2+s3).
__device__ __forceinline__ double dot_ref(const float* a, const float* b, int n) {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 = __dadd_rn(s0, __dmul_rn(a[i], b[i]));
        s1 = __dadd_rn(s1, __dmul_rn(a[i + 1], b[i + 1]));
        s2 = __dadd_rn(s2, __dmul_rn(a[i + 2], b[i + 2]));
        s3 = __dadd_rn(s3, __dmul_rn(a[i + 3], b[i + 3]));
    }
    for (; i < n; ++i) s0 = __dadd_rn(s0, __dmul_rn(a[i], b[i]));
    return __dadd_rn(__dadd_rn(s0, s1), __dadd_rn(s2, s3));
}

// kBf16: the bf16 reference mode's scores (above); false: the float scores.
template <bool kBf16>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kThreads)
    indexer_topk_kernel(ops::IndexerTopkArgs a, RowCodec c, bool rotate_q) {
    dev::pdl_enter();
    extern __shared__ double dyn[];
    __shared__ int red[32];
    __shared__ unsigned hist[256];
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = static_cast<int>(cluster.block_rank());
    const ops::StepDesc& st = a.step;
    const int64_t t = blockIdx.x / kCluster;
    const int64_t valid = (st.tok_pos[t] + 1) / a.m;
    const uint8_t* keys = reinterpret_cast<const uint8_t*>(a.keys) +
                          st.row_slot[st.tok_row[t]] * a.n_entries * c.bytes;
    const int Hi = a.Hi, hi = a.hi, ld = hi + 1;
    const int ldd = Hi + 1;                                       // (rows padded: banks)
    double* d_s = dyn;                                            // [kKeyTile][ldd]
    float* q_s = reinterpret_cast<float*>(d_s + kKeyTile * ldd);  // [Hi][ld]
    float* w_s = q_s + static_cast<int64_t>(Hi) * ld;             // [Hi]
    float* k_s = w_s + Hi;                                        // [kKeyTile][ld]
    float* score = k_s + kKeyTile * ld;                           // [n_entries]
    for (int i = threadIdx.x; i < Hi * hi; i += blockDim.x)
        q_s[(i / hi) * ld + i % hi] = a.q[t * Hi * hi + i];
    for (int i = threadIdx.x; i < Hi; i += blockDim.x)
        w_s[i] = __fmul_rn(a.w[t * Hi + i], a.w_scale);
    if (const ops::FusedRope& r = a.q_rope; r.inv_freq != nullptr) {  // (a test-shape path)
        __syncthreads();
        const int half = r.rope_dim / 2;
        for (int i = threadIdx.x; i < Hi * half; i += blockDim.x) {
            const int h = i / half, p = i % half;
            dev::rope_rotate(q_s + h * ld + hi - r.rope_dim + 2 * p,
                             dev::rope_cos_sin(r.pos[t], r.inv_freq[p], r.scale, r.inverse));
        }
    }
    if (rotate_q) dev::block_hadamard(q_s, hi, Hi, ld);  // (fp4 keys are rotated)
    // This block's slice of the entries.
    const int64_t per = (valid + kCluster - 1) / kCluster;
    const int64_t e_begin = rank * per, e_end = valid < e_begin + per ? valid : e_begin + per;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int64_t e0 = e_begin; e0 < e_end; e0 += kKeyTile) {
        const int n = static_cast<int>(e_end - e0 < kKeyTile ? e_end - e0 : kKeyTile);
        __syncthreads();  // the previous tile's keys and dots are consumed
        for (int i = threadIdx.x; i < n * hi; i += blockDim.x)
            k_s[(i / hi) * ld + i % hi] =
                dev::decode_value(c, keys + (e0 + i / hi) * c.bytes, i % hi);
        __syncthreads();
        if (lane < n)
            for (int h = warp; h < Hi; h += warps)
                d_s[lane * ldd + h] = dot_ref(q_s + h * ld, k_s + lane * ld, hi);
        __syncthreads();
        if (threadIdx.x < n) {
            double s = 0;
            for (int h = 0; h < Hi; ++h) {
                const double d = d_s[threadIdx.x * ldd + h];
                if constexpr (kBf16) {
                    // bf16(w * max(bf16(float(d)), 0)) added to the double sum (cpu_ref's order;
                    // `x < 0 ? 0 : x` keeps a -0 as std::max does).
                    const float db = bf16_round(__double2float_rn(d));
                    const float term = bf16_round(__fmul_rn(w_s[h], db < 0.0f ? 0.0f : db));
                    s = __dadd_rn(s, static_cast<double>(term));
                } else {
                    s = __dadd_rn(s, __dmul_rn(static_cast<double>(w_s[h]), d < 0.0 ? 0.0 : d));
                }
            }
            score[e0 + threadIdx.x] =
                kBf16 ? bf16_round(__double2float_rn(s)) : static_cast<float>(s);
        }
    }
    cluster.sync();  // every slice scored
    if (rank == 0) {
        for (int r = 1; r < kCluster; ++r) {
            const float* remote = cluster.map_shared_rank(score, r);
            const int64_t b = r * per, e = valid < b + per ? valid : b + per;
            for (int64_t i = b + threadIdx.x; i < e; i += blockDim.x) score[i] = remote[i];
        }
    }
    cluster.sync();  // the other blocks' scores are read: they may exit
    if (rank != 0) return;
    select_topk(score, valid, a.K, a.topk + t * a.K, hist, red);
}

bool v4_shapes(int Hi, int hi) {
    return Hi == kHeads && hi == kDim;
}

size_t smem_bytes(int Hi, int hi, int64_t n_entries) {
    const size_t fixed = v4_shapes(Hi, hi) ? kV4Fixed : fixed_bytes(Hi, hi);
    return fixed + static_cast<size_t>(n_entries) * sizeof(float);
}

}  // namespace

int64_t indexer_max_entries(int Hi, int hi) {
    // The kernels' static shared memory comes out of the same budget (the V4 split kernel's:
    // dev::last_to_arrive's flag).
    const size_t budget = kMaxSmem - (v4_shapes(Hi, hi) ? kV4StaticBytes : kStaticBytes);
    return (static_cast<int64_t>(budget) - static_cast<int64_t>(smem_bytes(Hi, hi, 0))) /
           static_cast<int64_t>(sizeof(float));
}

int64_t indexer_scratch_bytes() {
    return kSplitMaxTokens * indexer_max_entries(kHeads, kDim) * int64_t{sizeof(float)} +
           kSplitMaxTokens * int64_t{sizeof(unsigned)};
}

IndexerScratch indexer_scratch(void* p, int sm_count) {
    IndexerScratch ws;
    ws.scores = static_cast<float*>(p);
    ws.arrivals = reinterpret_cast<unsigned*>(ws.scores +
                                              kSplitMaxTokens * indexer_max_entries(kHeads, kDim));
    ws.sm_count = sm_count;
    return ws;
}

void launch_indexer_topk(const ops::IndexerTopkArgs& a, const IndexerScratch& ws,
                         cudaStream_t stream) {
    DSV4_ASSERT(a.n_entries <= indexer_max_entries(a.Hi, a.hi), "indexer_topk: ", a.n_entries,
                " entries per slot; the CUDA kernel holds at most ",
                indexer_max_entries(a.Hi, a.hi), " scores in shared memory");
    DSV4_ASSERT(a.m >= 1 && a.K >= 0, "indexer_topk: m ", a.m, " K ", a.K);
    const bool roped = a.q_rope.inv_freq != nullptr;
    DSV4_ASSERT(!roped || (a.q_rope.heads == a.Hi && a.q_rope.rope_dim <= a.hi &&
                           a.q_rope.rope_dim % 2 == 0),
                "indexer_topk: a fused rope of ", a.q_rope.heads, " heads x ", a.q_rope.rope_dim,
                " dims on ", a.Hi, " x ", a.hi);
    const RowCodec c = row_codec(a.key_format, a.hi);
    const bool typed = c.type != CacheType::kF32;
    const bool rotate_q = c.type == CacheType::kFp4 && !a.q_rotated;
    DSV4_ASSERT(!v4_shapes(a.Hi, a.hi) || c.vec4, "indexer_topk: keys of ", a.hi, " values");
    if (a.step.T == 0) return;
    static PerDeviceOnce set_attributes;  // (per device: ranks on several GPUs)
    const cudaError_t attr = set_attributes([] {
        cudaError_t e = cudaSuccess;
        for (auto* k : {indexer_topk_v4_kernel<false, false>, indexer_topk_v4_kernel<true, false>,
                        indexer_topk_v4_kernel<false, true>, indexer_topk_v4_kernel<true, true>}) {
            // The opt-in limit counts static and dynamic shared memory together.
            cudaFuncAttributes fa{};
            if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, k);
            DSV4_ASSERT(e != cudaSuccess || fa.sharedSizeBytes <= kV4StaticBytes,
                        "indexer_topk: ", fa.sharedSizeBytes, " bytes of static shared memory");
            if (e == cudaSuccess)
                e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kMaxSmem - kV4StaticBytes));
        }
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(indexer_topk_v4_kernel<false, false>,
                                     cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(indexer_topk_v4_kernel<false, true>,
                                     cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        for (auto* k : {indexer_topk_kernel<false>, indexer_topk_kernel<true>}) {
            if (e == cudaSuccess)
                e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kMaxSmem - kStaticBytes));
            if (e == cudaSuccess)
                e = cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
        }
        return e;
    });
    DSV4_CHECK_CUDA(attr);
    const int64_t T = a.step.T;
    if (a.round_bf16) {
        // The bf16 reference mode: the generic kernel at every shape (header). At V4 shapes its
        // shared memory is less than the V4 kernels' for the same n_entries (checked above
        // against indexer_max_entries); asserted for any shape all the same (a host check).
        const size_t smem =
            fixed_bytes(a.Hi, a.hi) + static_cast<size_t>(a.n_entries) * sizeof(float);
        DSV4_ASSERT(smem <= kMaxSmem - kStaticBytes, "indexer_topk: ", a.n_entries,
                    " entries in the bf16 mode's kernel");
        launch_pdl(indexer_topk_kernel<true>, static_cast<unsigned>(T * kCluster), kThreads, smem,
                   stream, 1, a, c, rotate_q);
        return;
    }
    const size_t smem = smem_bytes(a.Hi, a.hi, a.n_entries);
    // (The V4 kernel ropes whole float4s, the cos and sin in its weighted-term buffer.)
    DSV4_ASSERT(!roped || !v4_shapes(a.Hi, a.hi) ||
                    (a.q_rope.rope_dim % 4 == 0 &&
                     a.q_rope.rope_dim / 2 * sizeof(dev::RopeCs) <= kPDoubles * sizeof(double)),
                "indexer_topk: a fused rope of ", a.q_rope.rope_dim, " dims");
    if (!v4_shapes(a.Hi, a.hi)) {
        // (Compile-time cluster dims: the grid is a whole number of clusters.)
        launch_pdl(indexer_topk_kernel<false>, static_cast<unsigned>(T * kCluster), kThreads, smem,
                   stream, 1, a, c, rotate_q);
        return;
    }
    if (T <= kSplitMaxTokens && ws.scores != nullptr) {
        // Decode: half a tile of entries a block or more, one wave of blocks (one block an SM).
        const int64_t by_entries =
            std::max<int64_t>(1, (a.n_entries + kSplitMinEntries - 1) / kSplitMinEntries);
        const int64_t by_grid = std::max<int64_t>(1, ws.sm_count / T);
        const int S = static_cast<int>(std::min(by_entries, by_grid));
        launch_pdl(typed ? indexer_topk_v4_kernel<true, true> : indexer_topk_v4_kernel<true, false>,
                   dim3(static_cast<unsigned>(S), static_cast<unsigned>(T)), kV4Threads, smem,
                   stream, 1, a, c, rotate_q, ws.scores, ws.arrivals, S);
        return;
    }
    launch_pdl(typed ? indexer_topk_v4_kernel<false, true> : indexer_topk_v4_kernel<false, false>,
               static_cast<unsigned>(T * kCluster), kV4Threads, smem, stream,
               static_cast<unsigned>(kCluster), a, c, rotate_q, static_cast<float*>(nullptr),
               static_cast<unsigned*>(nullptr), kCluster);
}

}  // namespace dsv4::cuda
