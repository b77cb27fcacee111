#include "quantize/names.h"

#include <string_view>

namespace dsv4::quant {

namespace {

bool starts_with(std::string_view s, std::string_view p) {
    return s.substr(0, p.size()) == p;
}

bool is_expert_projection(std::string_view s) {
    return s == "w1" || s == "w2" || s == "w3";
}

LinearGroup classify_in_block(std::string_view rest) {
    if (starts_with(rest, "ffn.experts.")) {
        std::string_view r = rest.substr(12);
        const size_t dot = r.find('.');
        if (dot == std::string_view::npos) return LinearGroup::kNone;
        return is_expert_projection(r.substr(dot + 1)) ? LinearGroup::kRoutedExpert
                                                       : LinearGroup::kNone;
    }
    if (starts_with(rest, "ffn.shared_experts."))
        return is_expert_projection(rest.substr(19)) ? LinearGroup::kSharedExpert
                                                     : LinearGroup::kNone;
    if (rest == "ffn.gate") return LinearGroup::kRouter;
    if (rest == "attn.indexer.wq_b" || rest == "attn.indexer.weights_proj" ||
        rest == "attn.indexer.compressor.wkv" || rest == "attn.indexer.compressor.wgate")
        return LinearGroup::kIndexer;
    if (rest == "attn.wq_a" || rest == "attn.wq_b" || rest == "attn.wkv" || rest == "attn.wo_a" ||
        rest == "attn.wo_b" || rest == "attn.compressor.wkv" || rest == "attn.compressor.wgate")
        return LinearGroup::kAttention;
    return LinearGroup::kNone;
}

}  // namespace

LinearClass classify_linear(const std::string& prefix) {
    std::string_view rest;
    LinearClass c;
    if (strip_block(prefix, "layers.", &rest)) {
        c.group = classify_in_block(rest);
    } else if (strip_block(prefix, "mtp.", &rest)) {
        c.group = classify_in_block(rest);
        c.mtp = true;
    }
    return c;
}

bool is_selected(const QuantizeSelection& select, const LinearClass& c) {
    if (c.mtp && !select.mtp) return false;
    switch (c.group) {
        case LinearGroup::kNone:
            return false;
        case LinearGroup::kRoutedExpert:
            return select.routed_experts;
        case LinearGroup::kSharedExpert:
            return select.shared_experts;
        case LinearGroup::kAttention:
            return select.attention;
        case LinearGroup::kIndexer:
            return select.indexer;
        case LinearGroup::kRouter:
            return select.router;
    }
    return false;
}

}  // namespace dsv4::quant
