// config.json and hf_quant_config.json of a `dsv4 quantize` output.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dsv4/quantize.h"
#include "dsv4/status.h"

namespace dsv4::quant {

// Module patterns (release names, `*` wildcards) that are not NVFP4 in the output: the groups
// not selected plus `skipped` (selected modules left as they were).
std::vector<std::string> ignore_patterns(const QuantizeSelection& select,
                                         const std::vector<std::string>& skipped);

// The input config with every field kept, release-style fields (`compress_ratios`,
// `num_hash_layers`, `rope_scaling`, `rope_theta`, `compress_rope_theta`, `qk_rope_head_dim`)
// derived from HF-style ones where missing (FORMATS §1.6), and `quantization_config` in the
// ModelOpt form of NVIDIA's release (FORMATS §3.1). Errors name the malformed field.
Expected<nlohmann::ordered_json> output_config(const nlohmann::ordered_json& in,
                                               const QuantizeSelection& select,
                                               const std::vector<std::string>& skipped);

// ModelOpt's hf_quant_config.json: NVFP4, group 16, `exclude_modules` = ignore_patterns.
nlohmann::ordered_json hf_quant_config(const QuantizeSelection& select,
                                       const std::vector<std::string>& skipped);

}  // namespace dsv4::quant
