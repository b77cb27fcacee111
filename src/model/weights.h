// Binding checkpoint tensors to the model by name (release layout, or the same names as
// transformers writes them), with every shape checked against the config. Small float
// tensors (norms, mHC, sinks, biases) are converted to float32 in backend memory; matrices
// are handed to the backend (ops::Weight handles: the CPU reads them in place in their stored
// format, CUDA repacks them), each layer's routed experts as one stacked object.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/quant_weight.h"
#include "formats/safetensors.h"
#include "model/config.h"
#include "ops/backend.h"

namespace dsv4 {

struct HcWeights {
    const float* fn = nullptr;     // [(2+n)n, n*D] (or [n, n*D] for the head)
    const float* base = nullptr;   // [(2+n)n]
    const float* scale = nullptr;  // [3] (or [1])
};

using ops::ExpertWeights;
using ops::Weight;

struct CompressorWeights {
    Weight wkv;                   // [coff*width, D]
    Weight wgate;                 // [coff*width, D]
    const float* ape = nullptr;   // [m, coff*width]
    const float* norm = nullptr;  // [width]
};

struct LayerWeights {
    const float* attn_norm = nullptr;  // [D]
    const float* ffn_norm = nullptr;   // [D]
    HcWeights hc_attn, hc_ffn;
    Weight wq_a;                             // [Rq, D]
    const float* q_norm = nullptr;           // [Rq]
    Weight wq_b;                             // [H*hd, Rq]
    Weight wkv;                              // [hd, D]
    const float* kv_norm = nullptr;          // [hd]
    Weight wo_a;                             // [g*Ro, H*hd/g]
    Weight wo_b;                             // [D, g*Ro]
    const float* attn_sink = nullptr;        // [H]
    CompressorWeights compressor;            // CSA / HCA layers
    CompressorWeights indexer_compressor;    // CSA layers
    Weight indexer_wq_b;                     // [Hi*hi, Rq]
    Weight indexer_weights_proj;             // [Hi, D]
    Weight gate;                             // [E, D]
    const float* gate_bias = nullptr;        // [E] score-routed layers
    const int32_t* tid2eid = nullptr;        // [V, k] hash-routed layers
    Weight shared_w1, shared_w2, shared_w3;  // [I, D], [D, I], [I, D]; invalid: none
    ExpertWeights experts;                   // E routed experts
    // Backend::pack_rows of x_projections (invalid: the backend did not pack them).
    Weight x_proj_packed;
    // Bytes as stored: everything a token reads in this layer but the routed experts, and one
    // routed expert's w1 + w2 + w3 (decode bandwidth accounting, `dsv4 bench`).
    size_t bytes_dense = 0, bytes_expert = 0;
};

// The MTP block (release `mtp.0.*`): a decoder block plus the projections that merge the main
// model's last streams h with the next token's embedding, and its own hc head and norm. It
// shares the model's embedding and head.
struct MtpWeights {
    LayerWeights block;
    Weight e_proj, h_proj;         // [D, D]
    size_t bytes_proj = 0;         // e_proj + h_proj as stored
    const float* enorm = nullptr;  // [D]
    const float* hnorm = nullptr;  // [D]
    const float* norm = nullptr;   // [D]
    HcWeights hc_head;
};

struct ModelWeights {
    Weight embed;                 // [V, D]
    Weight head;                  // [V, D]
    const float* norm = nullptr;  // [D]
    HcWeights hc_head;
    std::vector<LayerWeights> layers;
    std::vector<MtpWeights> mtp;  // 0 or 1 block (mtp.0; further blocks are not used)
    size_t bytes = 0;             // checkpoint bytes bound
    size_t bytes_head = 0;        // the head matrix and the final norms, as stored
    // "group: format[, format]" lines (embed, head, attention, compressors, indexer, router,
    // shared experts, routed experts) for `dsv4 info`, recorded while binding.
    std::vector<std::string> formats;
};

// The projections of a layer's attention input x, in the order the layer runs them as one
// linear group: wq_a, wkv; then (CSA, HCA) the compressor's wkv, wgate; then (CSA) the indexer
// compressor's wkv, wgate and the indexer's weights_proj. Each kind's list is a prefix of the
// CSA list. Writes them to out (kMaxXProjections entries) and returns how many.
inline constexpr int kMaxXProjections = 7;
int x_projections(const LayerWeights& w, LayerKind kind, const Weight** out);

// Binds every tensor the config calls for. Missing, mis-shaped, wrongly typed or unexpected
// tensors are errors naming the tensor. The MTP block `mtp.0.*` is bound when the config has
// one and the checkpoint carries it (a transformers-saved folder has none); other `mtp.*`
// tensors are accepted and not used.
// `progress` (may be empty) is called after each layer with (layers done, layers in all).
// With `synth`, the tensors are drawn by it (a synthetic model) and `store` is not read.
using LoadProgress = std::function<void(int, int)>;
class SynthSource;
Expected<ModelWeights> bind_weights(TensorStore& store, const ModelConfig& cfg, Backend& backend,
                                    const LoadProgress& progress = {},
                                    SynthSource* synth = nullptr);

}  // namespace dsv4
