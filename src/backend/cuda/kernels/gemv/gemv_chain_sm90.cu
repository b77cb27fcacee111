// The GEMV chains of gemv_chain.h for sm_90: the GEMV kernel's issue and compute sides
// (gemv_kernel_sm90.cuh) run over a warp's range of the first GEMV and then its range of the
// second, whose activations come from one of the two links' sources below.
#include <algorithm>
#include <atomic>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/ptx_sm90.cuh"
#include "backend/cuda/kernels/common/swiglu_sm90.cuh"
#include "backend/cuda/kernels/gemv/gemv_chain.h"
#include "backend/cuda/kernels/gemv/gemv_kernel_sm90.cuh"
#include "backend/cuda/kernels/gemv/gemv_split.h"
#include "base/check.h"

namespace dsv4::cuda {
namespace gemv_sm90 {

// Spins (lane by lane) until *count reaches target. An invariant, not an input error: a count
// that never arrives (seconds of waiting) traps, so the stream reports an error instead of
// hanging. (No printf: its argument buffer is local memory, which this build forbids.)
__device__ __forceinline__ void wait_count(const uint32_t* count, uint32_t target) {
    uint32_t spins = 0;
    while (ptx::ld_acquire_u32(count) < target) {
        __nanosleep(32);
        if (++spins == (1u << 22)) __trap();
    }
}

// kRows: the second GEMV's x is the first's y as written, read through L2 once the 64-row
// quads of the first's output that a segment's k-tiles cover are complete (each quad's count
// is the first's k-tiles).
struct XRows {
    const uint32_t* ready;  // [first's quads, all groups]
    uint32_t target;        // the first's k-tiles
    int quads;              // the first's quads, all groups
    int tile_k;             // the second's
    int lane;
    int lo = 0, hi = -1;  // the quads waited for

    __device__ __forceinline__ void segment(int /*group*/, int t0, int t_end) {
        int q_lo, q_hi;
        chain_rows_counts(t0, t_end, tile_k, quads, &q_lo, &q_hi);
        if (q_lo >= lo && q_hi <= hi) return;
        for (int q = q_lo + lane; q <= q_hi; q += 32) wait_count(ready + q, target);
        __syncwarp();
        lo = q_lo;
        hi = q_hi;
    }
    __device__ __forceinline__ void before(int /*t*/) {}
    template <GemvFormat F, bool kXF32>
    __device__ __forceinline__ void load(bool pred, const char* p, int /*t*/,
                                         uint32_t (&raw)[XChunk<F, kXF32>::kRawWords]) {
        static_assert(kXF32, "f32 activations (the first GEMV's f32 output)");
        load_x<F, kXF32, true>(pred, p, raw);
    }
};

// k-tiles of SwiGLU values a warp holds at once (64 f32 each): a decode-size w2 range is ~7
// units of one quad, so one fill a segment.
inline constexpr int kActTiles = 8;
inline constexpr int kActFloats = kActTiles * 64;

// kSwiglu: w2's activation source, the clipped SwiGLU of the group's h row, computed for up to
// kActTiles k-tiles at a time into the warp's shared buffer (one L2 round trip a fill) once the
// group's w1|w3 sums are complete, then read by the compute side like x.
struct XSwiglu {
    const GemvArgs* w2;
    int I;  // w2.k: offset of the up half in an h row
    float limit;
    const uint32_t* ready;  // [groups] w1|w3 units done
    uint32_t ready_target;  // w1|w3 units a group
    float* buf;             // [kActFloats] this warp's, shared
    int lane;
    int waited = -1;  // the group whose sums this warp has waited for
    const float* h_row = nullptr;
    int t0 = 0;     // buf holds k-tiles [t0, t0 + kActTiles)
    int t_end = 0;  // of the segment

    __device__ __forceinline__ void segment(int group, int t_first, int t_last) {
        if (group != waited) {
            if (lane == 0) wait_count(ready + group, ready_target);
            __syncwarp();
            waited = group;
            h_row =
                static_cast<const float*>(w2->x) + static_cast<int64_t>(group) * w2->x_group_stride;
        }
        t_end = t_last;
        fill(t_first);
    }
    __device__ __forceinline__ void before(int t) {
        if (t < t_end && t == t0 + kActTiles) fill(t);
    }
    // Tiles [t, min(t + kActTiles, t_end)): lane l computes values 2l and 2l + 1 of each; past
    // I (the weights' zero padding), zeros.
    __device__ __forceinline__ void fill(int t) {
        __syncwarp();  // every lane's reads of the previous contents are done
        t0 = t;
        float2 g[kActTiles], u[kActTiles];
#pragma unroll
        for (int j = 0; j < kActTiles; ++j) {
            const int k = (t + j) * 64 + 2 * lane;
            const bool in = t + j < t_end && k < I;
            g[j] = in ? ptx::ld_cg_v2_f32(h_row + k) : make_float2(0.0f, 0.0f);
            u[j] = in ? ptx::ld_cg_v2_f32(h_row + I + k) : make_float2(0.0f, 0.0f);
        }
#pragma unroll
        for (int j = 0; j < kActTiles; ++j) {
            const int k = (t + j) * 64 + 2 * lane;
            float2 v = make_float2(0.0f, 0.0f);
            if (k < I) {
                v.x = dev::clipped_swiglu(g[j].x, u[j].x, limit);
                v.y = dev::clipped_swiglu(g[j].y, u[j].y, limit);
            }
            *reinterpret_cast<float2*>(buf + j * 64 + 2 * lane) = v;
        }
        __syncwarp();
    }
    template <GemvFormat F, bool kXF32>
    __device__ __forceinline__ void load(bool pred, const char* /*p*/, int t,
                                         uint32_t (&raw)[XChunk<F, kXF32>::kRawWords]) {
        static_assert(kXF32 && gemv_lane_k(F) == 16, "f32 chunks of 16 values");
        if (!pred) return;
        const float4* q =
            reinterpret_cast<const float4*>(buf + (t - t0) * 64 + (lane & 3) * gemv_lane_k(F));
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            const float4 f = q[v];
            raw[4 * v + 0] = __float_as_uint(f.x);
            raw[4 * v + 1] = __float_as_uint(f.y);
            raw[4 * v + 2] = __float_as_uint(f.z);
            raw[4 * v + 3] = __float_as_uint(f.w);
        }
    }
};

// The counts a launch uses: per quad of the first's output (kRows) or per group (kSwiglu).
__host__ __device__ inline int64_t chain_counts(const GemvChainArgs& c) {
    return c.link == GemvChainLink::kSwiglu
               ? c.first.n_groups
               : static_cast<int64_t>(c.first.n_groups) * (c.first.row_blocks / kGemvQuad);
}

template <GemvFormat F, int kStages, GemvChainLink kLink>
__global__ void __launch_bounds__(kThreads, 4)
    gemv_chain_kernel(const __grid_constant__ GemvChainArgs c) {
    constexpr bool kSwiglu = kLink == GemvChainLink::kSwiglu;
    constexpr int kAct = kSwiglu ? kActFloats : 4;  // SwiGLU floats a warp
    static_assert(kWarpsPerCta * (kStages * kStageBytes + kAct * 4) <= 48 * 1024,
                  "static shared memory");
    __shared__ __align__(128) uint8_t stages[kWarpsPerCta][kStages][kStageBytes];
    __shared__ __align__(16) float act[kWarpsPerCta][kAct];
    const GemvArgs& A = c.first;
    const GemvArgs& B = c.second;
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int warp_in_cta = static_cast<int>(threadIdx.x) >> 5;
    const int warp = static_cast<int>(blockIdx.x) * kWarpsPerCta + warp_in_cta;
    const Split sa = split_units(A, A.n_groups);
    const Split sb = split_units(B, B.n_groups);
    const int a0 = warp < sa.warps ? sa.first(warp) : 0;
    const int a1 = warp < sa.warps ? sa.first(warp + 1) : 0;
    const int b0 = warp < sb.warps ? sb.first(warp) : 0;
    const int b1 = warp < sb.warps ? sb.first(warp + 1) : 0;
    if (a0 == a1 && b0 == b1) return;

    // As the GEMV kernel: expert ids from the previous kernel (the router) are waited for
    // before the first address; fixed weights are requested before the wait.
    const bool ids_from_device = A.expert_ids != nullptr && !A.ids_ready;
    if (ids_from_device) ptx::griddep_wait();
    UnitStream<F, kStages, true> s(A, ptx::smem_addr(&stages[warp_in_cta][0][0]), lane, a0, a1);
    if (a0 < a1) s.set();
    s.then(B, b0, b1 - b0);
#pragma unroll 1
    for (int i = 0; i < kStages - 1; ++i) s.issue();
    if (!ids_from_device) ptx::griddep_wait();
    ptx::griddep_launch_dependents();

    bool y_cleared = true;  // (both outputs were cleared before the launch)
    int c_i = 0;            // units consumed, over both ranges
    if (a0 < a1) {
        XFromGlobal xs;
        compute_units<F, true, 1, false, kStages, true>(A, xs, s, a0, a1, A.n_groups, sa, lane,
                                                        y_cleared, c_i);
        // Release this warp's units: its adds (every lane's) before the counts. kSwiglu counts
        // per group, kRows per quad (units run group, quad, k-tile: unit / k_tiles is the quad
        // over all groups).
        __threadfence();
        __syncwarp();
        if (lane == 0) {
            const int per = chain_units_per_count(kSwiglu, A.row_blocks / kGemvQuad, A.k_tiles);
            for (int u = a0; u < a1;) {
                const int i = u / per, end = min(a1, (i + 1) * per);
                atomicAdd(c.ready + i, static_cast<uint32_t>(end - u));
                u = end;
            }
        }
    }
    if (b0 < b1) {
        if constexpr (kSwiglu) {
            XSwiglu xs{&B,
                       B.k,
                       c.limit,
                       c.ready,
                       static_cast<uint32_t>(
                           chain_units_per_count(true, A.row_blocks / kGemvQuad, A.k_tiles)),
                       &act[warp_in_cta][0],
                       lane};
            compute_units<F, true, 1, false, kStages, true>(B, xs, s, b0, b1, B.n_groups, sb, lane,
                                                            y_cleared, c_i);
        } else {
            XRows xs{c.ready,
                     static_cast<uint32_t>(
                         chain_units_per_count(false, A.row_blocks / kGemvQuad, A.k_tiles)),
                     static_cast<int>(chain_counts(c)), gemv_tile_k(F), lane};
            compute_units<F, true, 1, false, kStages, true>(B, xs, s, b0, b1, B.n_groups, sb, lane,
                                                            y_cleared, c_i);
        }
        // The last warp of the second's split past its waits resets the counts for the next
        // launch (every count is waited for by some warp, so all have arrived by then).
        const int64_t n = chain_counts(c);
        uint32_t last = 0;
        __syncwarp();
        if (lane == 0) last = atomicAdd(c.ready + n, 1u) == static_cast<uint32_t>(sb.warps - 1);
        if (__shfl_sync(0xffffffffu, last, 0) != 0) {
            for (int64_t i = lane; i <= n; i += 32) c.ready[i] = 0u;
        }
    }
    // Only empty groups can be pending here; drain them before the stages go away.
    ptx::cp_async_wait<0>();
}

using ChainFn = void (*)(GemvChainArgs);

template <GemvFormat F, GemvChainLink kLink>
ChainFn chain_kernel(int depth) {
    return depth == 4 ? gemv_chain_kernel<F, 4, kLink> : gemv_chain_kernel<F, 2, kLink>;
}

ChainFn chain_kernel(GemvChainLink link, GemvFormat f, int depth) {
    DSV4_ASSERT(depth == 2 || depth == 4, "gemv chain: depth ", depth, " is not instantiated");
    if (link == GemvChainLink::kSwiglu) {
        DSV4_ASSERT(f == GemvFormat::kNvfp4 || f == GemvFormat::kMxfp4,
                    "gemv chain: the SwiGLU link takes FP4 weights");
        return f == GemvFormat::kNvfp4
                   ? chain_kernel<GemvFormat::kNvfp4, GemvChainLink::kSwiglu>(depth)
                   : chain_kernel<GemvFormat::kMxfp4, GemvChainLink::kSwiglu>(depth);
    }
    switch (f) {
        case GemvFormat::kNvfp4:
            return chain_kernel<GemvFormat::kNvfp4, GemvChainLink::kRows>(depth);
        case GemvFormat::kMxfp4:
            return chain_kernel<GemvFormat::kMxfp4, GemvChainLink::kRows>(depth);
        case GemvFormat::kFp8:
            return chain_kernel<GemvFormat::kFp8, GemvChainLink::kRows>(depth);
        case GemvFormat::kBf16:
            return chain_kernel<GemvFormat::kBf16, GemvChainLink::kRows>(depth);
    }
    DSV4_UNREACHABLE("gemv format ", static_cast<int>(f));
}

// CTAs of the instantiation that fit on one SM, queried once each (host-side, capture-safe).
int chain_ctas_per_sm(GemvChainLink link, GemvFormat f, int depth) {
    static std::atomic<int> cache[2][4][2] = {};
    std::atomic<int>& slot =
        cache[link == GemvChainLink::kSwiglu][static_cast<int>(f)][depth == 4 ? 1 : 0];
    int n = slot.load(std::memory_order_relaxed);
    if (n == 0) {
        DSV4_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &n, chain_kernel(link, f, depth), kThreads, 0));
        DSV4_ASSERT(n > 0, "gemv chain: kernel does not fit on an SM");
        slot.store(n, std::memory_order_relaxed);
    }
    return n;
}

}  // namespace gemv_sm90

int64_t gemv_chain_counts(const GemvChainArgs& args) {
    return gemv_sm90::chain_counts(args);
}

size_t gemv_chain_workspace_bytes(int64_t max_counts) {
    return static_cast<size_t>(max_counts + 1) * sizeof(uint32_t);
}

bool gemv_chain_supports(const GemvChainArgs& c) {
    const GemvArgs &A = c.first, &B = c.second;
    const bool both = A.format == B.format && A.m == B.m && A.m >= 1 && A.m <= 4 && A.x_f32 &&
                      B.x_f32 && A.x_split && B.x_split && !A.y_bf16 && !B.y_bf16 &&
                      A.n_segments == 0 && B.n_segments == 0 && A.n_groups_dev == nullptr &&
                      B.n_groups_dev == nullptr && A.y_accumulate && B.y_accumulate && !A.y_zero &&
                      !B.y_zero && A.n_clears == 0 && B.n_clears == 0 && B.x == A.y;
    if (!both) return false;
    if (c.link == GemvChainLink::kSwiglu) {
        return (A.format == GemvFormat::kNvfp4 || A.format == GemvFormat::kMxfp4) && A.m == 1 &&
               A.n == 2 * B.k && A.y_group_stride == A.n && B.x_group_stride == A.n &&
               A.n_groups == B.n_groups && A.expert_ids == B.expert_ids;
    }
    return A.n % 64 == 0 && (A.n_groups == 1 || A.y_group_stride == A.n) && B.n_groups == 1 &&
           B.expert_ids == nullptr && B.k == static_cast<int64_t>(A.n_groups) * A.n &&
           (B.m == 1 || B.ldx == A.ldy);
}

void launch_gemv_chain(const GemvChainArgs& c, const GemvLaunchConfig& config,
                       cudaStream_t stream) {
    const GemvArgs &A = c.first, &B = c.second;
    gemv_check_args(A, config);
    gemv_check_args(B, config);
    DSV4_ASSERT(gemv_chain_supports(c), "gemv chain: GEMVs the chain does not take");
    DSV4_ASSERT(c.ready != nullptr, "gemv chain: workspace not bound");
    const int depth = config.depth > 0 ? config.depth : 2;
    int per_sm = gemv_sm90::chain_ctas_per_sm(c.link, A.format, depth);
    if (config.ctas_per_sm > 0) per_sm = std::min(per_sm, config.ctas_per_sm);
    // Every CTA resident at once (the waits of gemv_chain.h rely on it), and at least
    // min_tiles_per_warp units (default 2) a warp of the larger range.
    const int64_t units = std::max<int64_t>(
        static_cast<int64_t>(A.n_groups) * (A.row_blocks / kGemvQuad) * A.k_tiles,
        static_cast<int64_t>(B.n_groups) * (B.row_blocks / kGemvQuad) * B.k_tiles);
    const int64_t min_units = config.min_tiles_per_warp > 0 ? config.min_tiles_per_warp : 2;
    const int64_t max_ctas = static_cast<int64_t>(config.sm_count) * per_sm;
    const int64_t per_cta = min_units * gemv_sm90::kWarpsPerCta;
    const int64_t want = (units + per_cta - 1) / per_cta;
    const int ctas = static_cast<int>(std::max<int64_t>(1, std::min(max_ctas, want)));
    launch_kernel(A.pdl, gemv_sm90::chain_kernel(c.link, A.format, depth),
                  dim3(static_cast<unsigned>(ctas)), dim3(gemv_sm90::kThreads), 0, stream, 1, c);
}

}  // namespace dsv4::cuda
