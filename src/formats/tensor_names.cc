#include "formats/tensor_names.h"

#include <string_view>

namespace dsv4 {
namespace {

bool starts_with(std::string_view s, std::string_view p) {
    return s.substr(0, p.size()) == p;
}

// The part after "layers.N." (N all digits); false when `name` is not under a layer.
bool layer_rest(std::string_view name, std::string_view* rest) {
    constexpr std::string_view kHead = "layers.";
    if (!starts_with(name, kHead)) return false;
    const size_t dot = name.find('.', kHead.size());
    if (dot == std::string_view::npos || dot == kHead.size()) return false;
    for (size_t i = kHead.size(); i < dot; ++i)
        if (name[i] < '0' || name[i] > '9') return false;
    *rest = name.substr(dot + 1);
    return true;
}

}  // namespace

std::string release_tensor_name(const std::string& name) {
    std::string n = starts_with(name, "model.") ? name.substr(6) : name;
    if (n == "embed_tokens.weight") return "embed.weight";
    if (n == "lm_head.weight") return "head.weight";
    if (starts_with(n, "hc_head.hc_")) return "hc_head_" + n.substr(11);
    std::string_view rest;
    if (layer_rest(n, &rest) && rest == "attn.norm.weight")
        return n.substr(0, n.size() - rest.size()) + "attn.kv_norm.weight";
    return n;
}

}  // namespace dsv4
