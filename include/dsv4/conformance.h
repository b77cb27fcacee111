// `dsv4 check`: recompute a golden fixture (expected.safetensors from transformers or from
// DeepSeek's reference code) and compare: full-pass logits, cached logits fed in the file's
// chunks, per-layer hidden states, MTP logits, and the greedy continuation of gen_prompt.
#pragma once

#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "dsv4/status.h"

namespace dsv4 {

struct CheckItem {
    std::string name;
    double max_abs_error = 0;  // for token items: number of mismatching tokens
    double tolerance = 0;      // bound on max_abs_error
    bool pass = false;
    std::string detail;
    double mean_abs_error = 0;  // tensors only
    double mean_tolerance = 0;  // bound on mean_abs_error; 0 = not checked
};

struct CheckReport {
    std::vector<CheckItem> items;
    double seconds = 0;
    std::string device;  // the backend it ran on
    bool pass() const {
        for (const auto& i : items)
            if (!i.pass) return false;
        return !items.empty();
    }
};

// `options.model_dir` is the model; `expected_path` the fixture's expected.safetensors.
// Bounds on the logits (docs/numerics.md), <= 0 for the mode's default: max-abs 1e-4 on the
// CPU reference, 1e-3 on CUDA (docs/numerics-cuda.md), 0.5 in --numerics reference; mean-abs
// 2e-2 in --numerics reference, unchecked otherwise.
Expected<CheckReport> run_conformance_check(EngineOptions options, const std::string& expected_path,
                                            double logits_tolerance, double mean_tolerance = 0);

}  // namespace dsv4
