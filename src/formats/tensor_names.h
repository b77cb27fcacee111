// Checkpoint tensor naming: the release layout (FORMATS §1.2) is dsv4's canonical spelling;
// transformers-saved files use the same per-layer names with a few differences (ARCHITECTURE
// §12.3) that this maps away.
#pragma once

#include <string>
#include <string_view>

namespace dsv4 {

// No `model.` prefix, `embed_tokens` -> `embed`, `lm_head` -> `head`, `hc_head.hc_fn` ->
// `hc_head_fn`, `layers.N.attn.norm.weight` -> `layers.N.attn.kv_norm.weight` (but not
// `attn.compressor.norm`); release names pass through unchanged.
std::string release_tensor_name(const std::string& name);

// The part of `name` after a numbered block "<head>N." (head "layers." or "mtp.", N all digits);
// false when `name` is not under such a block.
bool strip_block(std::string_view name, std::string_view head, std::string_view* rest);

}  // namespace dsv4
