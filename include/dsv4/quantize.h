// `dsv4 quantize`: rewrites a DeepSeek-V4 checkpoint (BF16 / F32 / FP8-block / MXFP4 linears)
// with a chosen set of linears in NVFP4, ModelOpt layout (FORMATS §3.1, §3.3): `weight` U8
// [out, in/2], `weight_scale` F8_E4M3 [out, in/16], `weight_scale_2` F32, `input_scale` F32.
// Everything else is copied unchanged under release-layout names. One output shard per input
// shard, streamed: one shard's output in memory at a time.
//
// Public API (cli/ sees only include/dsv4); implemented in src/quantize/.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dsv4/status.h"

namespace dsv4 {

// Which linears become NVFP4. The default matches NVIDIA's release: routed experts of the
// decoder layers only.
struct QuantizeSelection {
    bool routed_experts = true;   // layers.N.ffn.experts.E.w{1,2,3}
    bool shared_experts = false;  // layers.N.ffn.shared_experts.w{1,2,3}
    bool attention = false;       // attn.{wq_a,wq_b,wkv,wo_a,wo_b}, attn.compressor.{wkv,wgate}
    bool indexer = false;  // attn.indexer.{wq_b,weights_proj,compressor.wkv,compressor.wgate}
    bool router = false;   // ffn.gate
    // Also apply the groups above inside the MTP block (`mtp.K.`). Off by default: NVIDIA
    // keeps MTP experts MXFP4 and engines route MTP to the MXFP4 path (FORMATS §3.1).
    bool mtp = false;
};

struct QuantizeOptions {
    std::string model_dir;
    std::string out_dir;
    QuantizeSelection select;
    // Activation amax assumed for the static `input_scale` = input_amax / (6 * 448) that
    // ModelOpt-layout readers expect. dsv4 itself quantizes activations dynamically and
    // ignores it; 448 makes other engines' per-16 activation scales equal the block amax.
    float input_amax = 448.0f;
    bool progress = true;  // progress bar on stderr
    int threads = 0;       // worker threads (0 = DSV4_THREADS or all cores)
    // An existing non-empty output folder is an error unless force (then it is replaced).
    bool force = false;
    // Checks a finished output folder (e.g. dsv4::check_model_folder) before it is moved into
    // place; the input is checked with it first. Unset: no check.
    std::function<Status(const std::string& dir)> validate;
};

struct QuantizeSummary {
    int64_t tensors_in = 0;
    int64_t quantized = 0;   // linears written as NVFP4 by this run
    int64_t kept_nvfp4 = 0;  // selected linears that already were NVFP4 (copied)
    int64_t skipped = 0;     // selected linears left as they were (width not a multiple of 16)
    uint64_t bytes_in = 0;   // tensor bytes read
    uint64_t bytes_out = 0;  // tensor bytes written
    int shards = 0;
    std::vector<std::string> warnings;
};

Expected<QuantizeSummary> quantize_model(const QuantizeOptions& options);

}  // namespace dsv4
