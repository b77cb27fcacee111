#include "formats/tensor_names.h"

#include <string_view>

namespace dsv4 {
namespace {

bool starts_with(std::string_view s, std::string_view p) {
    return s.substr(0, p.size()) == p;
}

}  // namespace

bool strip_block(std::string_view name, std::string_view head, std::string_view* rest) {
    if (!starts_with(name, head)) return false;
    const size_t dot = name.find('.', head.size());
    if (dot == std::string_view::npos || dot == head.size()) return false;
    for (size_t i = head.size(); i < dot; ++i)
        if (name[i] < '0' || name[i] > '9') return false;
    *rest = name.substr(dot + 1);
    return true;
}

std::string release_tensor_name(const std::string& name) {
    std::string n = starts_with(name, "model.") ? name.substr(6) : name;
    if (n == "embed_tokens.weight") return "embed.weight";
    if (n == "lm_head.weight") return "head.weight";
    if (starts_with(n, "hc_head.hc_")) return "hc_head_" + n.substr(11);
    std::string_view rest;
    if (strip_block(n, "layers.", &rest) && rest == "attn.norm.weight")
        return n.substr(0, n.size() - rest.size()) + "attn.kv_norm.weight";
    return n;
}

}  // namespace dsv4
