// The fused NVFP4 activation quantizer kernel (sm_90). Two passes over x inside one launch:
// (1) every CTA reduces |x| to an amax and merges it with one atomic; a grid barrier publishes
// the tensor amax; (2) every CTA re-reads its blocks (L2-resident: activations are small) and
// encodes them with the scalar steps of formats/nvfp4_quant.h.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/kernels/quant/nvfp4_act_quant.h"
#include "base/check.h"
#include "formats/nvfp4_quant.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;

// Workspace words. The barrier is generation-counted, so it re-arms itself for the next launch
// whatever that launch's grid size; amax alternates between two slots so the last arrival can
// clear the slot of the next launch while this one is still being read.
enum SyncWord : int { kArrived = 0, kGeneration = 1, kAmax0 = 2, kAmax1 = 3, kSyncWords = 4 };

// The 16 values of block b (row-major blocks of 16 along each row) as float32.
__device__ __forceinline__ void load_block(const Nvfp4ActQuantArgs& a, int64_t b, float (&v)[16]) {
    const int64_t per_row = a.cols / 16;
    const int64_t r = b / per_row;
    const int64_t c0 = (b - r * per_row) * 16;
    if (a.x_bf16) {
        const uint4* p =
            reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(a.x) + r * a.ldx + c0);
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const uint4 w = __ldcg(p + q);
            const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                v[8 * q + 2 * i] = __uint_as_float(words[i] << 16);
                v[8 * q + 2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
            }
        }
    } else {
        const float4* p =
            reinterpret_cast<const float4*>(static_cast<const float*>(a.x) + r * a.ldx + c0);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float4 w = __ldcg(p + q);
            v[4 * q] = w.x;
            v[4 * q + 1] = w.y;
            v[4 * q + 2] = w.z;
            v[4 * q + 3] = w.w;
        }
    }
}

__device__ __forceinline__ float block_amax(const float (&v)[16]) {
    float m = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) m = fmaxf(m, fabsf(v[i]));
    return m;
}

__global__ void __launch_bounds__(kThreads)
    nvfp4_act_quant_kernel(const __grid_constant__ Nvfp4ActQuantArgs a) {
    __shared__ float warp_max[kThreads / 32];
    const int64_t blocks = a.rows * (a.cols / 16);
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    volatile uint32_t* sync = a.sync;
    // Read before arriving: the generation only moves once every CTA of this launch arrived.
    const uint32_t generation = threadIdx.x == 0 ? sync[kGeneration] : 0u;

    // Pass 1: amax. fmaxf ignores NaN like the reference's std::max(m, |x|) does.
    float m = 0.0f;
    for (int64_t b = first; b < blocks; b += stride) {
        float v[16];
        load_block(a, b, v);
        m = fmaxf(m, block_amax(v));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
    __syncthreads();

    __shared__ float amax_shared;
    if (threadIdx.x == 0) {
        float cta = 0.0f;
        for (int w = 0; w < kThreads / 32; ++w) cta = fmaxf(cta, warp_max[w]);
        const int slot = kAmax0 + static_cast<int>(generation & 1u);
        // Non-negative floats order like their bit patterns.
        atomicMax(a.sync + slot, __float_as_uint(cta));
        __threadfence();
        const uint32_t arrived = atomicAdd(a.sync + kArrived, 1u);
        if (arrived == gridDim.x - 1) {
            sync[kArrived] = 0u;
            sync[kAmax0 + static_cast<int>((generation + 1u) & 1u)] = 0u;
            __threadfence();
            atomicExch(a.sync + kGeneration, generation + 1u);
        } else {
            while (sync[kGeneration] == generation) __nanosleep(64);
        }
        __threadfence();
        amax_shared = __uint_as_float(sync[slot]);
    }
    __syncthreads();

    // Pass 2: the scalar steps of nvfp4_quantize, element for element.
    const float global = nvfp4_global_scale(amax_shared);
    if (blockIdx.x == 0 && threadIdx.x == 0) *a.global_scale = global;
    const int64_t per_row = a.cols / 16;
    for (int64_t b = first; b < blocks; b += stride) {
        float v[16];
        load_block(a, b, v);
        const uint8_t code = nvfp4_block_scale_code(block_amax(v), global);
        const float divisor = nvfp4_block_divisor(code, global);
        uint32_t lo = 0u, hi = 0u;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const uint32_t byte = static_cast<uint32_t>(nvfp4_encode(v[2 * i], divisor)) |
                                  (static_cast<uint32_t>(nvfp4_encode(v[2 * i + 1], divisor)) << 4);
            if (i < 4) {
                lo |= byte << (8 * i);
            } else {
                hi |= byte << (8 * (i - 4));
            }
        }
        const int64_t r = b / per_row;
        const int64_t cb = b - r * per_row;
        *reinterpret_cast<uint2*>(a.packed + r * (a.cols / 2) + cb * 8) = make_uint2(lo, hi);
        a.scales[r * per_row + cb] = code;
    }
}

}  // namespace

size_t nvfp4_act_quant_workspace_bytes() {
    return kSyncWords * sizeof(uint32_t);
}

void launch_nvfp4_act_quant(const Nvfp4ActQuantArgs& a, int sm_count, cudaStream_t stream) {
    DSV4_ASSERT(a.rows >= 1 && a.cols >= 16 && a.cols % 16 == 0, "nvfp4_act_quant: shape [", a.rows,
                ", ", a.cols, "]");
    const int64_t esize = a.x_bf16 ? 2 : 4;
    DSV4_ASSERT(a.x != nullptr && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
                    (a.ldx * esize) % 16 == 0 && a.ldx >= a.cols,
                "nvfp4_act_quant: x must be 16-byte aligned with 16-byte aligned rows");
    DSV4_ASSERT(a.packed != nullptr && reinterpret_cast<uintptr_t>(a.packed) % 8 == 0 &&
                    a.scales != nullptr && a.global_scale != nullptr && a.sync != nullptr,
                "nvfp4_act_quant: outputs / workspace not set");
    DSV4_ASSERT(sm_count > 0, "nvfp4_act_quant: sm_count");
    const int64_t blocks = a.rows * (a.cols / 16);
    const int64_t ctas =
        std::max<int64_t>(1, std::min<int64_t>(sm_count, (blocks + kThreads - 1) / kThreads));
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(ctas));
    cfg.blockDim = dim3(kThreads);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = ctas > 1 ? 1 : 0;
    DSV4_CHECK_CUDA(cudaLaunchKernelEx(&cfg, nvfp4_act_quant_kernel, a));
    DSV4_CHECK_LAUNCH(stream);
}

}  // namespace dsv4::cuda
