// Launchers of DeepSeek's reference-numerics round trips (ops/quant.h), bitwise equal to the CPU
// reference (backend/cpu/ref/quant.cc): the same float operations per value (base/fp_codes.h),
// the block amax a max (order-free) and the Hadamard butterflies in the reference's stage order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/quant.h"

namespace dsv4::cuda {

// In place, one block per row. kHadamardFp4 needs dims == width a power of two.
void launch_round_trip(const ops::RoundTripArgs& a, cudaStream_t stream);

// LinearArgs::act_fp8: out = x rounded to FP8 E4M3 per 128 along K (the last block of a row may
// be shorter), as cpu_ref::fp8_activations.
void launch_act_fp8_copy(const float* x,  // [M, K] rows ldx apart
                         int64_t ldx,
                         float* out,  // [M, K] dense
                         int64_t M, int64_t K, cudaStream_t stream);

}  // namespace dsv4::cuda
