// The two sub-blocks of a decoder layer: attention (with its compressors and indexer) and
// the MoE feed-forward. Each reads top to bottom as the architecture spec does.
#include <cmath>

#include "model/model.h"

namespace dsv4 {

void Model::attention_block(const LayerWeights& w, const LayerSpec& spec, LayerCache& lc,
                            int64_t pos0, int64_t T, const float* x, float* out) {
    const ModelConfig& c = cfg_;
    const int H = c.num_heads, hd = c.head_dim, rd = c.rope_dim, Rq = c.q_lora_rank;
    const int Hi = c.index_n_heads, hi = c.index_head_dim, m = spec.compress_rate;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const RopeTable& rope = rope_for(spec);
    // Rotates the trailing rd dims of `heads` heads of width `dim` per row, at pos0 + row.
    auto rope_at = [&](float* v, int64_t rows, int heads, int dim, bool inverse) {
        backend_.rope({v, rope.inv_freq, rows, heads, dim, rd, pos0, 1, inverse, rope.scale});
    };
    Backend& b = backend_;

    // Queries: low rank + q_norm, per-head unweighted norm, rope on the trailing rd dims.
    b.linear({x, &w.wq_a, ws_.qa, T, Rq});
    b.rms_norm({ws_.qa, w.q_norm, ws_.qa, T, Rq, eps});
    b.linear({ws_.qa, &w.wq_b, ws_.q, T, int64_t{H} * hd});
    b.rms_norm({ws_.q, nullptr, ws_.q, T * H, hd, eps});
    rope_at(ws_.q, T, H, hd, false);
    // The one shared K=V head.
    b.linear({x, &w.wkv, ws_.kv, T, hd});
    b.rms_norm({ws_.kv, w.kv_norm, ws_.kv, T, hd, eps});
    rope_at(ws_.kv, T, 1, hd, false);

    const float* entries = nullptr;
    const int32_t* topk = nullptr;
    if (spec.kind != LayerKind::kSliding) {
        compressor(w.compressor, lc.main, spec, hd, pos0, T, x);
        entries = lc.main.entries;
    }
    if (spec.kind == LayerKind::kCsa) {
        // Lightning indexer: its own compressed keys, queries from the q latent.
        compressor(w.indexer_compressor, lc.indexer, spec, hi, pos0, T, x);
        b.linear({ws_.qa, &w.indexer_wq_b, ws_.qi, T, int64_t{Hi} * hi});
        rope_at(ws_.qi, T, Hi, hi, false);
        b.linear({x, &w.indexer_weights_proj, ws_.wts, T, Hi});
        b.scale(ws_.wts, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hi) * Hi)), T * Hi);
        b.indexer_topk({ws_.qi, ws_.wts, lc.indexer.entries, ws_.topk, pos0, static_cast<int>(T),
                        Hi, hi, c.index_topk, m});
        topk = ws_.topk;
    }

    b.attention({ws_.q, ws_.kv, lc.ring, entries, topk, w.attn_sink, ws_.o, pos0,
                 static_cast<int>(T), H, hd, c.sliding_window, c.index_topk, m,
                 static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))});
    b.ring_write({ws_.kv, lc.ring, pos0, static_cast<int>(T), c.sliding_window, hd});
    // K = V carries rotated rope dims: de-rotate the output at the query position.
    rope_at(ws_.o, T, H, hd, /*inverse=*/true);

    // Grouped low-rank output: group j maps its H/g heads through rows [j*Ro, (j+1)*Ro) of wo_a.
    const int g = c.o_groups, Ro = c.o_lora_rank;
    const int64_t group_width = int64_t{H} * hd / g;
    for (int j = 0; j < g; ++j)
        b.linear({ws_.o + j * group_width, &w.wo_a, ws_.u + int64_t{j} * Ro, T, Ro, int64_t{j} * Ro,
                  int64_t{H} * hd, int64_t{g} * Ro});
    b.linear({ws_.u, &w.wo_b, out, T, c.hidden_size});
}

// Projects the chunk, pools completed blocks into entries, then norms and ropes the new ones.
void Model::compressor(const CompressorWeights& w, CompressorState& s, const LayerSpec& spec,
                       int width, int64_t pos0, int64_t T, const float* x) {
    const int m = spec.compress_rate, coff = spec.coff();
    Backend& b = backend_;
    b.linear({x, &w.wkv, ws_.ckv, T, int64_t{coff} * width});
    b.linear({x, &w.wgate, ws_.cgate, T, int64_t{coff} * width});
    b.compress({ws_.ckv, ws_.cgate, w.ape, s.kv, s.gate, s.entries, pos0, static_cast<int>(T), m,
                width, coff});
    const int64_t first = pos0 / m, last = (pos0 + T) / m;
    if (last == first) return;
    float* e = s.entries + first * width;
    b.rms_norm({e, w.norm, e, last - first, width, static_cast<float>(cfg_.rms_norm_eps)});
    // Entry b sits at the position of its block's first token, b*m.
    b.rope({e, rope_compress_.inv_freq, last - first, 1, width, cfg_.rope_dim, first * m, m, false,
            rope_compress_.scale});
}

void Model::ffn_block(const LayerWeights& w, int64_t T, const float* x, float* out) {
    const ModelConfig& c = cfg_;
    const int E = c.n_routed_experts, k = c.num_experts_per_tok, I = c.moe_intermediate_size;
    const float limit = static_cast<float>(c.swiglu_limit);
    Backend& b = backend_;
    b.linear({x, &w.gate, ws_.router_logits, T, E});
    b.route({ws_.router_logits, w.gate_bias, w.tid2eid, ws_.ids, ws_.sel, ws_.route_w, T, E, k,
             static_cast<float>(c.routed_scaling_factor)});
    b.moe({x, ws_.sel, ws_.route_w, w.w1.data(), w.w3.data(), w.w2.data(), out, T, c.hidden_size, I,
           E, k, limit});
    if (c.n_shared_experts == 0) return;
    // The shared expert clips like the routed ones.
    b.linear({x, &w.shared_w1, ws_.sh_g, T, I});
    b.linear({x, &w.shared_w3, ws_.sh_u, T, I});
    b.swiglu({ws_.sh_g, ws_.sh_u, ws_.sh_g, T * I, limit});
    b.linear({ws_.sh_g, &w.shared_w2, ws_.sh_out, T, c.hidden_size});
    b.add(out, ws_.sh_out, T * c.hidden_size);
}

}  // namespace dsv4
