// The SwiGLU chain of gemv_swiglu_chain.h for sm_90: the GEMV kernel's issue and compute sides
// (gemv_kernel_sm90.cuh) run over a warp's w1|w3 range and then its w2 range, the second with
// activations computed from h in shared memory.
#include <algorithm>
#include <atomic>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/ptx_sm90.cuh"
#include "backend/cuda/kernels/common/swiglu_sm90.cuh"
#include "backend/cuda/kernels/gemv/gemv_kernel_sm90.cuh"
#include "backend/cuda/kernels/gemv/gemv_swiglu_chain.h"
#include "base/check.h"

namespace dsv4::cuda {
namespace gemv_sm90 {

// k-tiles of SwiGLU values a warp holds at once (64 f32 each): a decode-size w2 range is ~7
// units of one quad, so one fill a segment.
inline constexpr int kActTiles = 8;
inline constexpr int kActFloats = kActTiles * 64;

// w2's activation source: the clipped SwiGLU of the group's h row, computed for up to kActTiles
// k-tiles at a time into the warp's shared buffer (one L2 round trip a fill) once the group's
// w1|w3 sums are complete, then read by the compute side like x.
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
            if (lane == 0) {
                // An invariant, not an input error: a count that never arrives (seconds of
                // waiting) traps, so the stream reports an error instead of hanging. (No printf:
                // its argument buffer is local memory, which this build forbids.)
                uint32_t spins = 0;
                while (ptx::ld_acquire_u32(ready + group) < ready_target) {
                    __nanosleep(32);
                    if (++spins == (1u << 22)) __trap();
                }
            }
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

template <GemvFormat F, int kStages>
__global__ void __launch_bounds__(kThreads, 4)
    gemv_swiglu_chain_kernel(const __grid_constant__ GemvSwigluChainArgs c) {
    static_assert(kWarpsPerCta * (kStages * kStageBytes + kActFloats * 4) <= 48 * 1024,
                  "static shared memory");
    __shared__ __align__(128) uint8_t stages[kWarpsPerCta][kStages][kStageBytes];
    __shared__ __align__(16) float act[kWarpsPerCta][kActFloats];
    const GemvArgs& A = c.w13;
    const GemvArgs& B = c.w2;
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

    // The expert ids come from the router, the previous kernel: wait before the first address.
    ptx::griddep_wait();
    UnitStream<F, kStages, true> s(A, ptx::smem_addr(&stages[warp_in_cta][0][0]), lane, a0, a1);
    if (a0 < a1) s.set();
    s.then(B, b0, b1 - b0);
#pragma unroll 1
    for (int i = 0; i < kStages - 1; ++i) s.issue();
    ptx::griddep_launch_dependents();

    bool y_cleared = true;  // (h and the output were cleared before the launch)
    int c_i = 0;            // units consumed, over both ranges
    if (a0 < a1) {
        XFromGlobal xs;
        compute_units<F, true, 1, false, kStages, true>(A, xs, s, a0, a1, A.n_groups, sa, lane,
                                                        y_cleared, c_i);
        // Release this warp's w1|w3 units, per group: its adds (every lane's) before the count.
        __threadfence();
        __syncwarp();
        if (lane == 0) {
            const int per_group = (A.row_blocks / kGemvQuad) * A.k_tiles;
            for (int g = a0 / per_group; g * per_group < a1; ++g) {
                const int lo = max(a0, g * per_group), hi = min(a1, (g + 1) * per_group);
                atomicAdd(c.ready + g, static_cast<uint32_t>(hi - lo));
            }
        }
    }
    if (b0 < b1) {
        XSwiglu xs{&B,
                   B.k,
                   c.limit,
                   c.ready,
                   static_cast<uint32_t>((A.row_blocks / kGemvQuad) * A.k_tiles),
                   &act[warp_in_cta][0],
                   lane};
        compute_units<F, true, 1, false, kStages, true>(B, xs, s, b0, b1, B.n_groups, sb, lane,
                                                        y_cleared, c_i);
        // The last warp of w2's split past its waits resets the counts for the next launch
        // (every group has w2 units, so every w1|w3 count has arrived by then).
        __syncwarp();
        uint32_t* left = c.ready + A.n_groups;
        if (lane == 0 && atomicAdd(left, 1u) == static_cast<uint32_t>(sb.warps - 1)) {
            for (int g = 0; g < A.n_groups; ++g) atomicExch(c.ready + g, 0u);
            atomicExch(left, 0u);
        }
    }
    // Only empty groups can be pending here; drain them before the stages go away.
    ptx::cp_async_wait<0>();
}

using ChainFn = void (*)(GemvSwigluChainArgs);

template <GemvFormat F>
ChainFn chain_kernel(int depth) {
    DSV4_ASSERT(depth == 2 || depth == 4, "gemv chain: depth ", depth, " is not instantiated");
    return depth == 4 ? gemv_swiglu_chain_kernel<F, 4> : gemv_swiglu_chain_kernel<F, 2>;
}

ChainFn chain_kernel(GemvFormat f, int depth) {
    return f == GemvFormat::kNvfp4 ? chain_kernel<GemvFormat::kNvfp4>(depth)
                                   : chain_kernel<GemvFormat::kMxfp4>(depth);
}

// CTAs of the instantiation that fit on one SM, queried once each (host-side, capture-safe).
int chain_ctas_per_sm(GemvFormat f, int depth) {
    static std::atomic<int> cache[4] = {};
    const int i = (f == GemvFormat::kNvfp4 ? 0 : 2) + (depth == 4 ? 1 : 0);
    int n = cache[i].load(std::memory_order_relaxed);
    if (n == 0) {
        DSV4_CHECK_CUDA(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, chain_kernel(f, depth), kThreads, 0));
        DSV4_ASSERT(n > 0, "gemv chain: kernel does not fit on an SM");
        cache[i].store(n, std::memory_order_relaxed);
    }
    return n;
}

}  // namespace gemv_sm90

size_t gemv_swiglu_chain_workspace_bytes(int max_groups) {
    return static_cast<size_t>(max_groups + 1) * sizeof(uint32_t);
}

bool gemv_swiglu_chain_supports(const GemvArgs& w13, const GemvArgs& w2) {
    const bool fp4 = w13.format == GemvFormat::kNvfp4 || w13.format == GemvFormat::kMxfp4;
    return fp4 && w2.format == w13.format && w13.m == 1 && w2.m == 1 && w13.x_f32 && w2.x_f32 &&
           w13.x_split && w2.x_split && w13.n_segments == 0 && w2.n_segments == 0 &&
           w13.n_groups_dev == nullptr && w2.n_groups_dev == nullptr && !w13.y_bf16 && !w2.y_bf16;
}

void launch_gemv_swiglu_chain(const GemvSwigluChainArgs& c, const GemvLaunchConfig& config,
                              cudaStream_t stream) {
    const GemvArgs &A = c.w13, &B = c.w2;
    gemv_check_args(A, config);
    gemv_check_args(B, config);
    DSV4_ASSERT(gemv_swiglu_chain_supports(A, B), "gemv chain: unsupported GEMVs");
    DSV4_ASSERT(A.y_accumulate && B.y_accumulate && !A.y_zero && !B.y_zero,
                "gemv chain: both GEMVs accumulate into outputs cleared before the launch");
    DSV4_ASSERT(A.n_groups == B.n_groups && A.expert_ids == B.expert_ids,
                "gemv chain: w1|w3 and w2 run the same groups");
    DSV4_ASSERT(A.n == 2 * B.k && B.x == A.y && B.x_group_stride == A.y_group_stride &&
                    A.y_group_stride == A.n,
                "gemv chain: w2 reads w1|w3's [gate | up] rows (n ", A.n, ", k ", B.k, ")");
    DSV4_ASSERT(c.ready != nullptr, "gemv chain: workspace not bound");
    const int depth = config.depth > 0 ? config.depth : 2;
    int per_sm = gemv_sm90::chain_ctas_per_sm(A.format, depth);
    if (config.ctas_per_sm > 0) per_sm = std::min(per_sm, config.ctas_per_sm);
    // Every CTA resident at once (the waits of gemv_swiglu_chain.h rely on it), and at least
    // min_tiles_per_warp units (default 2) a warp of the larger range.
    const int64_t units = std::max<int64_t>(
        static_cast<int64_t>(A.n_groups) * (A.row_blocks / kGemvQuad) * A.k_tiles,
        static_cast<int64_t>(B.n_groups) * (B.row_blocks / kGemvQuad) * B.k_tiles);
    const int64_t min_units = config.min_tiles_per_warp > 0 ? config.min_tiles_per_warp : 2;
    const int64_t max_ctas = static_cast<int64_t>(config.sm_count) * per_sm;
    const int64_t per_cta = min_units * gemv_sm90::kWarpsPerCta;
    const int64_t want = (units + per_cta - 1) / per_cta;
    const int ctas = static_cast<int>(std::max<int64_t>(1, std::min(max_ctas, want)));

    launch_kernel(A.pdl, gemv_sm90::chain_kernel(A.format, depth),
                  dim3(static_cast<unsigned>(ctas)), dim3(gemv_sm90::kThreads), 0, stream, 1, c);
}

}  // namespace dsv4::cuda
