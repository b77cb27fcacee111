// Per-pair RoPE frequencies for one rope parameter set (plain or YaRN without mscale).
#pragma once

#include <vector>

#include "model/config.h"

namespace dsv4 {

// [rope_dim / 2] frequencies, computed in float32 as transformers does.
std::vector<float> rope_inv_freq(const RopeParams& p, int rope_dim);

}  // namespace dsv4
