// Sink attention in the bf16 reference mode (ops::AttentionArgs::round_bf16: DeepSeek's
// sparse_attn on bf16 q and K=V), a checking mode: the kernel follows the CPU reference
// (backend/cpu/ref/attention.cc, attend_bf16 and its caller) step by step rather than fast, so
// the probabilities and the outputs round to the same bf16 values:
//  - one block per (token, head); the token's keys walked in the CPU's order (the ring, the
//    step's own rows, then the compressed entries: every valid one for HCA, the top-k list with
//    its -1s left out for CSA), 64 at a time: warp 0 gathers the next 64 present keys, so the
//    blocks of 64 are the CPU's even where a CSA list has holes; they are decoded into shared
//    memory (stage_row: typed rows in the kernel's typed instantiation) for both passes;
//  - the scores as cpu_ref::dot makes them: four double partial sums over dims i = 0, 1, 2, 3
//    mod 4 (the tail in the first), each in dim order (a float product is exact in double, so
//    the FMA is the CPU's add), added (s0 + s1) + (s2 + s3), rounded to float, times the scale
//    in float: bit-identical scores;
//  - exp in double rounded to float (the CPU's float std::exp is glibc's expf, correctly rounded
//    but for rare inputs); every fp32 operation the CPU does in its order, explicitly rounded
//    (no FMA contraction: the CPU build has none): the running max, the block's fp32 sum of
//    unrounded p, P·V in double over bf16(p) in key order (exact products again), the rescale
//    acc · alpha + block, the sink in the denominator at the end, the output rounded to bf16;
//  - the fused output rope (AttentionArgs::out_rope) on the row in shared memory, its rotated
//    dims rounded to bf16 (RopeArgs::round_bf16), as the CPU's rope().
// So the CUDA outputs differ from the CPU's only where the two exps differ by a float ulp next to
// a bf16 rounding boundary (tests/cuda/bf16_attention_gpu_test.cc). The ring write
// (AttentionArgs::ring_out) is launch_attention's, after this kernel.
#include <cstdint>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/attention/attention_keys_sm90.cuh"
#include "backend/cuda/kernels/basic/basic.h"
#include "backend/cuda/kernels/common/cache_row_sm90.cuh"
#include "backend/cuda/kernels/common/rope_sm90.cuh"
#include "base/check.h"
#include "base/fp_codes.h"

namespace dsv4::cuda {
namespace attn {
namespace {

constexpr int kThreads = 256;
constexpr int kBlock = 64;                         // keys a softmax block (the CPU's kBlock)
constexpr int kParts = 4;                          // cpu_ref::dot's partial sums
constexpr int kDims = kAttnMaxHeadDim / kThreads;  // output dims a thread
static_assert(kBlock * kParts == kThreads, "the score pass: one partial sum a thread");
static_assert(kAttnMaxHeadDim % kThreads == 0, "whole output dims a thread");

// The CPU's std::exp(float) (glibc's expf: correctly rounded but for rare inputs): the double exp
// (within an ulp of double) rounded to float. CUDA's expf is within 2 float ulps, which would put
// p on the other side of a bf16 boundary more often.
__device__ __forceinline__ float exp_as_cpu(float x) {
    return static_cast<float>(exp(static_cast<double>(x)));
}

// Shared memory of the key block (dynamic): kBlock rows of padded_hd(hd) floats, kRowPad apart
// beyond that so the score pass's 8 keys a warp fall in different banks (a stride of 4 mod 32).
constexpr int kRowPad = 4;
__host__ __device__ constexpr int key_stride(int hd) {
    return padded_hd(hd) + kRowPad;
}
size_t bf16_smem(int hd) {
    return sizeof(float) * kBlock * key_stride(hd);
}

// Grid (T, H): block (t, h) writes out[t, h, :]. The key rows come through kr (typed rows
// decoded as staged, in the kTyped instantiation); rope: the output rope (inv_freq null: none;
// pos and inv_freq device memory).
template <bool kTyped>
__global__ void __launch_bounds__(kThreads)
    attention_bf16_kernel(ops::AttentionArgs a, KeyRows kr, ops::FusedRope rope) {
    dev::pdl_enter();
    extern __shared__ float4 smem4[];
    float* keys = reinterpret_cast<float*>(smem4);  // the block's keys [n][key_stride(hd)]
    __shared__ float q[kAttnMaxHeadDim];            // the query row [hd]
    __shared__ float o[kAttnMaxHeadDim];            // the output row [hd] (for the rope's pairs)
    __shared__ const uint8_t* rows[kBlock];         // the block's key rows, the CPU's order [n]
    __shared__ float z[kBlock];                     // their scores [n]
    __shared__ float p[kBlock];                     // exp(z - max) [n]
    __shared__ float pb[kBlock];                    // p rounded to bf16 [n]
    __shared__ int n_block;                         // keys in this block (0: past the list)
    const int t = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y);
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int hd = a.hd, hdp = padded_hd(hd), stride = key_stride(hd);
    const int64_t row = static_cast<int64_t>(t) * a.H + h;
    for (int d = tid; d < hd; d += kThreads) q[d] = a.q[row * hd + d];
    const KeyList kl = key_list(a, kr, t);

    // The softmax state, the same on every thread (each computes it from shared memory); acc:
    // dims tid + kThreads c of the output, unnormalised.
    float run_max = -INFINITY, run_sum = 0.0f;
    float acc[kDims];
#pragma unroll
    for (int c = 0; c < kDims; ++c) acc[c] = 0.0f;
    int64_t cursor = 0;  // (warp 0) the next raw index of the key list to look at
    for (;;) {
        __syncthreads();  // q is in; the previous block's keys, p and pb are read
        // 1. Warp 0 gathers the next (up to) 64 present keys, 32 raw list entries a pass; a
        // pass that would overfill the block stops after the lane holding its 64th key.
        if (warp == 0) {
            int n = 0;
            while (n < kBlock && cursor < kl.n_total) {  // (warp-uniform)
                const int64_t j = cursor + lane;
                const uint8_t* key = j < kl.n_total ? kl.key(j, kl.index(j)) : nullptr;
                const unsigned present = __ballot_sync(0xffffffffu, key != nullptr);
                const int at = n + __popc(present & ((1u << lane) - 1u));
                if (key != nullptr && at < kBlock) rows[at] = key;
                if (n + __popc(present) <= kBlock) {
                    n += __popc(present);
                    cursor += 32;
                } else {
                    const unsigned last =
                        __ballot_sync(0xffffffffu, key != nullptr && at == kBlock - 1);
                    cursor += __ffs(static_cast<int>(last));  // past that lane
                    n = kBlock;
                }
            }
            if (lane == 0) n_block = n;
        }
        __syncthreads();
        const int n = n_block;
        if (n == 0) break;  // (block-uniform)
        // 2. The keys decoded into shared memory, a warp a row (plain loads: vec = false).
        for (int k = warp; k < n; k += kThreads / 32)
            stage_row<kTyped>(keys + k * stride, rows[k], kr.codec, hd, hdp, false, lane);
        __syncthreads();

        // 3. Scores: thread (key k, part m) sums dims m, m + 4, ... below hd rounded down to 4
        // (part 0 then the tail), then the four parts of a key (adjacent lanes) add as
        // (s0 + s1) + (s2 + s3) (an IEEE sum is commutative, so every lane gets that value).
        {
            const int k = tid / kParts, m = tid % kParts;
            const int hd4 = hd / kParts * kParts;
            const float* key = keys + k * stride;
            double s = 0.0;
            if (k < n) {
                for (int i = m; i < hd4; i += kParts)
                    s = fma(static_cast<double>(q[i]), static_cast<double>(key[i]), s);
                if (m == 0)
                    for (int i = hd4; i < hd; ++i)
                        s = fma(static_cast<double>(q[i]), static_cast<double>(key[i]), s);
            }
            s = __dadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 1));
            s = __dadd_rn(s, __shfl_xor_sync(0xffffffffu, s, 2));
            if (k < n && m == 0) z[k] = __fmul_rn(static_cast<float>(s), a.softmax_scale);
        }
        __syncthreads();

        // 4. The block's max (std::max's order: a NaN-free max either way), its probabilities.
        float new_max = run_max;
        for (int k = 0; k < n; ++k) new_max = new_max < z[k] ? z[k] : new_max;
        const float alpha = exp_as_cpu(__fsub_rn(run_max, new_max));  // 0 for the first block
        if (tid < n) {
            const float pk = exp_as_cpu(__fsub_rn(z[tid], new_max));
            p[tid] = pk;
            pb[tid] = bf16_round(pk);
        }
        __syncthreads();

        // 5. The block's fp32 sum (key order), P·V in double, the rescaled state.
        float block_sum = 0.0f;
        for (int k = 0; k < n; ++k) block_sum = __fadd_rn(block_sum, p[k]);
#pragma unroll
        for (int c = 0; c < kDims; ++c) {
            const int d = tid + c * kThreads;
            if (d >= hd) break;
            double pv = 0.0;
            for (int k = 0; k < n; ++k)
                pv = fma(static_cast<double>(pb[k]), static_cast<double>(keys[k * stride + d]), pv);
            acc[c] = __fadd_rn(__fmul_rn(acc[c], alpha), static_cast<float>(pv));
        }
        run_sum = __fadd_rn(__fmul_rn(run_sum, alpha), block_sum);
        run_max = new_max;
    }

    // The sink in the denominator only; the output rounded to bf16, then the rope.
    const float denom = __fadd_rn(run_sum, exp_as_cpu(__fsub_rn(a.sink[h], run_max)));
#pragma unroll
    for (int c = 0; c < kDims; ++c) {
        const int d = tid + c * kThreads;
        if (d < hd) o[d] = bf16_round(__fdiv_rn(acc[c], denom));
    }
    if (rope.inv_freq != nullptr) {  // (block-uniform)
        __syncthreads();
        const int off = hd - rope.rope_dim;
        const int64_t pos = rope.pos[row / rope.heads];
        for (int i = tid; i < rope.rope_dim / 2; i += kThreads) {
            float* pair = o + off + 2 * i;
            dev::rope_rotate(pair,
                             dev::rope_cos_sin(pos, rope.inv_freq[i], rope.scale, rope.inverse));
            pair[0] = bf16_round(pair[0]);
            pair[1] = bf16_round(pair[1]);
        }
    }
    __syncthreads();
    for (int d = tid; d < hd; d += kThreads) a.out[row * hd + d] = o[d];
}

}  // namespace

void launch_attention_bf16(const ops::AttentionArgs& a, const KeyRows& kr, cudaStream_t stream) {
    const int64_t T = a.step.T;
    DSV4_ASSERT(a.H >= 1 && a.H <= 65535, "CUDA bf16 attention: ", a.H, " heads");
    // (fuse_rope for its shape check; the rope is applied in this kernel, whatever `vec`.)
    const RopeFusion rope = fuse_rope(a.out_rope, T * a.H, a.hd, false, "attention out");
    ops::AttentionArgs args = a;
    args.out_rope = nullptr;  // (host memory: the kernel takes the rope by value)
    args.ring_out = nullptr;  // (launch_attention writes the ring after this kernel)
    // The attributes are host-side settings (not stream operations): allowed during capture.
    static PerDeviceOnce set_attributes;  // (per device: ranks on several GPUs)
    const cudaError_t attr = set_attributes([] {
        cudaError_t e = cudaSuccess;
        for (auto* k : {attention_bf16_kernel<false>, attention_bf16_kernel<true>})
            if (e == cudaSuccess)
                e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bf16_smem(kAttnMaxHeadDim)));
        return e;
    });
    DSV4_CHECK_CUDA(attr);
    launch_pdl(kr.codec.type == CacheType::kF32 ? attention_bf16_kernel<false>
                                                : attention_bf16_kernel<true>,
               dim3(static_cast<unsigned>(T), static_cast<unsigned>(a.H)), kThreads,
               bf16_smem(a.hd), stream, 1, args, kr, rope.after);
}

}  // namespace attn
}  // namespace dsv4::cuda
