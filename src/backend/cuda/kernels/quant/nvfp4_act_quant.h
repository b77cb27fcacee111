// Launcher tier of the fused NVFP4 activation quantizer: amax -> global scale -> per-16 block
// E4M3 scales -> E2M1 codes in one kernel launch, the global scale kept on the device (no host
// round trip, so it can sit inside a captured decode step). Bit-exact with nvfp4_quantize()
// of formats/nvfp4_quant.h: the kernel calls the same scalar steps.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dsv4::cuda {

struct Nvfp4ActQuantArgs {
    const void* x = nullptr;  // [rows, cols] rows ldx elements apart, 16-byte aligned
    bool x_bf16 = false;      // false: f32
    int64_t rows = 0;
    int64_t cols = 0;  // multiple of 16
    int64_t ldx = 0;
    uint8_t* packed = nullptr;      // [rows, cols / 2], low nibble = even element
    uint8_t* scales = nullptr;      // [rows, cols / 16] E4M3
    float* global_scale = nullptr;  // [1], written by the kernel
    uint32_t* sync = nullptr;       // nvfp4_act_quant_workspace_bytes(), zeroed once
};

size_t nvfp4_act_quant_workspace_bytes();

// One launch; grid-wide amax through a software grid barrier, so grids of more than one CTA
// are launched cooperative (co-resident). No allocation, no host synchronisation.
void launch_nvfp4_act_quant(const Nvfp4ActQuantArgs& args, int sm_count, cudaStream_t stream);

}  // namespace dsv4::cuda
