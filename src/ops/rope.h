// Op contract: interleaved-pair RoPE on the trailing rope dims of each head.
#pragma once

#include <cstdint>

namespace dsv4::ops {

// A RoPE applied to another op's output rows (RmsNormArgs::rope, AttentionArgs::out_rope), what
// that op then rope() on its output give: the rows read as [rows / heads, heads, head_dim], row
// r at position pos[r / heads].
struct FusedRope {
    const float* inv_freq = nullptr;  // [rope_dim / 2]; nullptr: no rope
    const int64_t* pos = nullptr;     // [rows / heads] (backend memory)
    int heads = 1, rope_dim = 0;
    float scale = 1.0f;
    bool inverse = false;
};

struct RopeArgs {
    float* x = nullptr;  // [rows, heads, head_dim]; dims [head_dim - rd, head_dim) rotate
    const float* inv_freq = nullptr;  // [rd / 2] per-pair frequencies (YaRN already folded in)
    const int64_t* pos = nullptr;     // [rows] position of each row (backend memory)
    int64_t rows = 0;
    int heads = 0, head_dim = 0, rope_dim = 0;
    bool inverse = false;  // rotate by -angle (de-rotation of the attention output)
    float scale = 1.0f;    // cos and sin multiplier (RopeParams::attention_factor)
    // The rotated dims rounded to bf16 afterwards (the bf16 reference mode ropes bf16 tensors in
    // place, in fp32 inside).
    bool round_bf16 = false;
};

}  // namespace dsv4::ops
