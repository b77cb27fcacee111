// The samplers' random numbers: xoshiro256** (one 64-bit state of four words per sequence),
// [0, 1) doubles with 53 random bits. Shared by the CPU reference and the CUDA kernel so both
// draw the same numbers for a seed.
#pragma once

#include <cstdint>

#include "base/host_device.h"

namespace dsv4 {

DSV4_HD uint64_t xoshiro_rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

// Advances the state and returns a uniform draw in [0, 1).
DSV4_HD double xoshiro_uniform(uint64_t* s) {
    const uint64_t result = xoshiro_rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = xoshiro_rotl(s[3], 45);
    return static_cast<double>(result >> 11) * 0x1.0p-53;
}

}  // namespace dsv4
