// The weight layout the GEMV kernels read, shared by the host repack (load time), the device
// decode and the host model of the kernel used in tests. docs/kernels/gemv.md explains why.
//
// A matrix W [n, k] (or a stack of experts [e][n, k]) is cut into row blocks of 16 rows and
// k-tiles. Each (row block, k-tile) is one 512-byte tile: 32 lanes x 16 bytes, so one warp-wide
// 16-byte load reads a whole tile, fully coalesced. Lane l = 4g + c (g = l / 4, c = l % 4) owns
// rows g and g + 8 of the block and the k-range [tile_k * t + lane_k * c, + lane_k), which is
// exactly what mma.m16n8k16 wants lane l to hold after a fixed permutation of k (the MMA sums
// over k, so any permutation shared by A and B is free):
//
//   k-step j of the tile pairs MMA k {2c, 2c+1} with local k {4j, 4j+1} and MMA k {2c+8, 2c+9}
//   with local k {4j+2, 4j+3}, local k counted inside the lane's range.
//
// Then the activations a lane needs for one tile are lane_k contiguous values of one token row,
// and for the 4-bit formats the lane's 16 k values of a row fall in exactly one scale block.
//
//   format  tile_k  lane_k  k-steps  lane bytes
//   NVFP4     64      16       4     4 words; word j = the 8 E2M1 codes of k-step j, bit-placed
//                                    for e2m1x8_to_bf16x2 (rows g, g+8 x local k 4j..4j+3)
//   MXFP4     64      16       4     same as NVFP4
//   FP8       32       8       2     word 2j: row g, local k 4j..4j+3 (one E4M3 byte each);
//                                    word 2j+1: row g+8, same k
//   BF16      16       4       1     words a0..a3: (g, k0-1), (g+8, k0-1), (g, k2-3), (g+8, k2-3)
//
// Row blocks come in quads (64 rows; n is padded to a multiple of 64): the kernel's unit of work
// is one quad x one k-tile, four tiles stored back to back (2 KB), so a warp step reads 2 KB of
// contiguous weights and shares one activation chunk among four tiles. Tile (rb, t) of an expert
// is number ((rb / 4) * k_tiles + t) * 4 + rb % 4 (gemv_tile_index); tiles are stored
// [expert][tile number][lane][16 bytes]. Each tile has a scale chunk, stored
// [expert][tile number][scale bytes]:
//   NVFP4: 64 B = [lane][2] codes: (row g, row g+8) of block 4t + c
//   MXFP4: 32 B = [g][c/2][2] codes: (row g, row g+8) of block 2t + c/2
//   FP8:    4 B = the tile's 128x128 block scale, float32 (repeated per tile)
//   BF16:   none
// and every format has out_scale [expert][row block] (float32) applied to the f32 sums.
//
// Values: e2m1x8_to_bf16x2 yields bf16 words holding e2m1 * 2^-126 (bf16 subnormals for the
// codes 0.5 and 0). The decode multiplies them by a per-lane bf16 scale S = block_scale * 2^c
// (packed bf16 multiply, exact: 2 + 4 significant bits fit bf16, and every product is a normal
// number), and out_scale = 2^(126 - c) (times the NVFP4 global scale) undoes the shift. NVFP4
// uses c = 118 for every tensor; MXFP4 picks c per tensor from its exponent range.
#pragma once

#include <cstdint>

#include "base/fp_codes.h"

namespace dsv4::cuda {

enum class GemvFormat : uint8_t { kNvfp4, kMxfp4, kFp8, kBf16 };

inline constexpr int kGemvRowBlock = 16;
inline constexpr int kGemvQuad = 4;  // row blocks per unit of work
inline constexpr int kGemvLanes = 32;
inline constexpr int kGemvLaneBytes = 16;
inline constexpr int kGemvTileBytes = kGemvLanes * kGemvLaneBytes;

DSV4_HD constexpr int gemv_tile_k(GemvFormat f) {
    return f == GemvFormat::kFp8 ? 32 : f == GemvFormat::kBf16 ? 16 : 64;
}
DSV4_HD constexpr int gemv_lane_k(GemvFormat f) {
    return gemv_tile_k(f) / 4;
}
DSV4_HD constexpr int gemv_ksteps(GemvFormat f) {
    return gemv_lane_k(f) / 4;
}
// Scale bytes stored per (row block, k-tile).
DSV4_HD constexpr int gemv_tile_scale_bytes(GemvFormat f) {
    return f == GemvFormat::kNvfp4   ? 64
           : f == GemvFormat::kMxfp4 ? 32
           : f == GemvFormat::kFp8   ? 4
                                     : 0;
}
// Number of tile (rb, t) inside its expert (row-block quads, then k-tiles, then the 4 blocks).
DSV4_HD constexpr int64_t gemv_tile_index(int64_t rb, int64_t t, int64_t k_tiles) {
    return ((rb / kGemvQuad) * k_tiles + t) * kGemvQuad + rb % kGemvQuad;
}

// Byte offset of lane l's scale inside its tile's scale bytes (FP4: two codes, rows g and g+8;
// FP8: the tile's float32, shared by all lanes).
DSV4_HD constexpr int gemv_lane_scale_offset(GemvFormat f, int lane) {
    return f == GemvFormat::kNvfp4   ? 2 * lane
           : f == GemvFormat::kMxfp4 ? 2 * (2 * (lane >> 2) + ((lane & 3) >> 1))
                                     : 0;
}

// ---- E2M1 x 8 -> 4 bf16x2 words (the A-fragment registers a0..a3 of one k-step).
// Shifts and one rotation place each code's sign at bit 15 (31) and its 3 magnitude bits at bits
// 8..6 (24..22); the repack put every code's bits where these moves pick them up. The words
// hold value * 2^-126: exponent bits 8..7 then read as the bf16 exponent 0..3.
inline constexpr uint32_t kE2m1Mask = 0x81C081C0u;

DSV4_HD uint32_t gemv_rotl(uint32_t x, int n) {
#if defined(__CUDA_ARCH__)
    return __funnelshift_l(x, x, n);
#else
    return (x << n) | (x >> (32 - n));
#endif
}

// NOTE: words 0 and 1 need no wrap-around, so they are written as multiplies (IMAD on the FMA
// pipe) rather than shifts: the integer pipe is the kernel's bottleneck.
DSV4_HD void e2m1x8_to_bf16x2(uint32_t q, uint32_t (&out)[4]) {
    out[0] = (q * 64u) & kE2m1Mask;
    out[1] = (q * 4u) & kE2m1Mask;
    out[2] = gemv_rotl(q, 12) & kE2m1Mask;
    out[3] = (q & 0x81808180u) | ((q >> 8) & 0x00400040u);
}

// Where the repack stores bit `bit` (0 = mantissa, 1..2 = exponent, 3 = sign) of the code that
// e2m1x8_to_bf16x2 returns in word `o` (0..3), half `h` (0 = low bf16, 1 = high).
DSV4_HD constexpr int e2m1_source_bit(int o, int h, int bit) {
    const int target = (bit == 3 ? 15 : 6 + bit) + 16 * h;
    if (o == 3) return bit == 0 ? target + 8 : target;
    const int rot = o == 0 ? 6 : o == 1 ? 2 : 12;
    return (target - rot + 32) % 32;
}

// ---- Scale codes (one byte per block, decoded to the bf16 multiplier S in two instructions).
// NVFP4: bf16 bits of S = E4M3 scale * 2^118 are (code << 4) + 0x7600; code 0 = 2^-9 (the least
// E4M3 scale), code 142 = 448. MXFP4: bf16 bits of S = 2^(e - 127 + c) are code << 7, code = e + c.
inline constexpr int kNvfp4ScaleExp = 118;
inline constexpr uint32_t kNvfp4CodeBase = 0x7600u;

DSV4_HD constexpr uint32_t nvfp4_code_bits(uint32_t code) {
    return (code << 4) + kNvfp4CodeBase;
}
DSV4_HD constexpr uint32_t mxfp4_code_bits(uint32_t code) {
    return code << 7;
}

}  // namespace dsv4::cuda
