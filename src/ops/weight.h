// Weights as a backend keeps them. The model binds checkpoint tensors (QuantWeight views of
// the mapped file) and hands them to the backend once, at load; what comes back is an opaque
// handle whose `impl` only that backend reads (the CPU backend: the QuantWeight itself, read
// in place; CUDA: repacked tiles and scales, experts stacked with w1|w3 concatenated).
#pragma once

#include <cstdint>

namespace dsv4::ops {

struct Weight {
    int64_t rows = 0, cols = 0;  // logical [out, in]
    const void* impl = nullptr;  // backend-defined
    // Stored in FP8 or FP4 and applied as such by DeepSeek's reference, which first rounds the
    // activations to FP8 per 128 (the reference numerics mode does the same).
    bool fp8_activations = false;
    bool valid() const { return impl != nullptr; }
};

// One layer's routed experts as one object: gate w1 [E, I, D], up w3 [E, I, D], down w2
// [E, D, I]. The MoE op takes it with expert ids in backend memory.
// With ranks (ops/collective.h) a rank holds E of the layer's experts, global ids [first,
// first + E); the expert ids the router writes stay global.
struct ExpertWeights {
    int E = 0, I = 0, D = 0;
    const void* impl = nullptr;    // backend-defined
    bool fp8_activations = false;  // as Weight
    int first = 0;
    bool valid() const { return impl != nullptr; }
};

// Where a weight goes, decided at bind time: a multi-device plan can place each layer's
// experts (or a range of them) on its own device. One device today: informative only.
enum class WeightRole : uint8_t {
    kEmbed,
    kHead,
    kAttention,
    kCompressor,
    kIndexer,
    kRouter,
    kSharedExpert,
    kExperts
};
struct WeightPlacement {
    WeightRole role = WeightRole::kAttention;
    int layer = -1;  // -1: not in a layer (embed, head)
    // Linears read this weight in row ranges of this many rows (wo_a's groups), 0: whole. A
    // backend with a blocked layout checks at load that the ranges fall on its blocks.
    int64_t row_block = 0;
};

// Activation element type where activations cross ops into the weight products.
enum class ActType : uint8_t { kF32, kBF16 };

}  // namespace dsv4::ops
