// Tensor naming for `dsv4 quantize`: the release layout the output uses (FORMATS §1.2, the
// names NVIDIA's NVFP4 checkpoints and other NVFP4 tools expect), and which linear group a
// weight belongs to.
#pragma once

#include <string>

#include "dsv4/quantize.h"
#include "formats/tensor_names.h"

namespace dsv4::quant {

enum class LinearGroup { kNone, kRoutedExpert, kSharedExpert, kAttention, kIndexer, kRouter };

struct LinearClass {
    LinearGroup group = LinearGroup::kNone;
    bool mtp = false;  // inside the MTP block (`mtp.K.`)
};

// Classifies a release-named module prefix such as "layers.3.attn.wq_a" (no ".weight").
LinearClass classify_linear(const std::string& prefix);

// Whether the selection turns this linear into NVFP4.
bool is_selected(const QuantizeSelection& select, const LinearClass& c);

}  // namespace dsv4::quant
