// Thin wrappers over the PTX instructions the sm_90 kernels use and CUDA C++ does not expose
// directly: streaming loads that skip L1, bf16 MMA fragments on raw registers, packed bf16
// multiply, byte permute, and programmatic dependent launch (PDL) control.
#pragma once

#include <cstdint>

namespace dsv4::cuda::ptx {

// Weights are read exactly once per launch: read-only path, no L1 allocation (so activations
// and partial sums keep L1), 256-byte L2 prefetch to keep DRAM bursts long.
__device__ __forceinline__ uint4 ld_stream_v4(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t ld_stream_u16(const void* p) {
    unsigned short v;
    asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t ld_stream_u32(const void* p) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

// Selects bytes of {b:a} by the four selector nibbles of `sel` (PRMT).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// Packed bf16 multiply, round to nearest. bf16 has no flush-to-zero mode, so subnormal inputs
// are honoured (the E2M1 decode relies on it).
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

// d += A(16x16, row) * B(16x8, col), bf16 inputs, f32 accumulators. Fragment ownership for lane
// l (g = l / 4, c = l % 4): a0 = A[g][2c..2c+1], a1 = A[g+8][2c..], a2 = A[g][2c+8..],
// a3 = A[g+8][2c+8..]; b0 = B[2c..2c+1][g], b1 = B[2c+8..2c+9][g]; d0,d1 = D[g][2c..2c+1],
// d2,d3 = D[g+8][2c..2c+1].
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// PDL: wait until the grids this one depends on have completed and their writes are visible.
// A no-op when the kernel was launched without the programmatic-serialisation attribute.
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// PDL: allow the next kernel in the stream to start launching (it still waits in its own
// griddep_wait for this grid to finish before touching what this grid writes).
__device__ __forceinline__ void griddep_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

}  // namespace dsv4::cuda::ptx
