// Thin wrappers over the PTX instructions the sm_90 kernels use and CUDA C++ does not expose
// directly: streaming and predicated loads, cp.async pipelines, L2 reductions, bf16 MMA
// fragments on raw registers, packed bf16 multiply, byte permute, and programmatic dependent
// launch (PDL) control.
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

// Loads 16 bytes only when `pred` holds; otherwise `v` keeps its value.
__device__ __forceinline__ void ldg_v4_if(bool pred, const void* p, uint4& v) {
    asm volatile(
        "{ .reg .pred p; setp.ne.b32 p, %5, 0;\n"
        "  @p ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4]; }"
        : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
        : "l"(p), "r"(static_cast<uint32_t>(pred)));
}

__device__ __forceinline__ void ldg_v2_if(bool pred, const void* p, uint2& v) {
    asm volatile(
        "{ .reg .pred p; setp.ne.b32 p, %3, 0;\n"
        "  @p ld.global.nc.v2.u32 {%0,%1}, [%2]; }"
        : "+r"(v.x), "+r"(v.y)
        : "l"(p), "r"(static_cast<uint32_t>(pred)));
}

// Requests the L2 line holding p (no register written, nothing waited for): data a kernel will
// load after its programmatic-launch wait, fetched while the grid before it still runs.
__device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Asynchronous global -> shared copies (LDGSTS). Completion is per thread and counted in commit
// groups, so a pipeline's depth is explicit (wait_group N) instead of being left to the
// compiler's scoreboard allocation, which serialises deep register-ring prefetches.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes, L2 only (weights are read once), 256-byte L2 prefetch.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(dst), "l"(src)
                 : "memory");
}

// Predicated form: no copy (and no branch) when `pred` is false.
__device__ __forceinline__ void cp_async_16_if(bool pred, uint32_t dst, const void* src) {
    asm volatile(
        "{ .reg .pred p; setp.ne.b32 p, %2, 0;\n"
        "  @p cp.async.cg.shared.global.L2::256B [%0], [%1], 16; }" ::"r"(dst),
        "l"(src), "r"(static_cast<uint32_t>(pred))
        : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Fire-and-forget float add in L2 (no return value, so no round trip on the issuing warp).
__device__ __forceinline__ void red_add_f32(float* p, float v) {
    asm volatile("red.global.add.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory");
}

// A 32-bit load through L2 (bypassing L1) that the compiler keeps after every earlier asm
// volatile, such as griddep_wait: for values the previous kernel writes (expert ids, router
// weights). __ldg is a non-coherent load the compiler treats as invariant and may hoist above
// the wait, reading the previous step's values while the predecessor still runs.
__device__ __forceinline__ uint32_t ld_cg_u32(const void* p) {
    uint32_t v;
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Loads through L2 (bypassing L1), kept after every earlier asm volatile: values other warps
// of the same launch added with red_add_f32 (L1 would not see them), read after the acquire
// that orders them.
__device__ __forceinline__ float2 ld_cg_v2_f32(const float* p) {
    float2 v;
    asm volatile("ld.global.cg.v2.f32 {%0,%1}, [%2];" : "=f"(v.x), "=f"(v.y) : "l"(p) : "memory");
    return v;
}
// (16 bytes only when `pred` holds; otherwise `v` keeps its value.)
__device__ __forceinline__ void ldcg_v4_if(bool pred, const void* p, uint4& v) {
    asm volatile(
        "{ .reg .pred p; setp.ne.b32 p, %5, 0;\n"
        "  @p ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4]; }"
        : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
        : "l"(p), "r"(static_cast<uint32_t>(pred))
        : "memory");
}

// A load with acquire semantics at GPU scope: what the releasing writer wrote before its
// release (a fence and the atomic this load observes) is visible after it.
__device__ __forceinline__ uint32_t ld_acquire_u32(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
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
__device__ __forceinline__ void griddep_wait() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
}

// PDL: allow the next kernel in the stream to start launching (it still waits in its own
// griddep_wait for this grid to finish before touching what this grid writes).
__device__ __forceinline__ void griddep_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

}  // namespace dsv4::cuda::ptx
