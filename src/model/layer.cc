// The two sub-blocks of a decoder layer: attention (with its compressors and indexer) and
// the MoE feed-forward. Each reads top to bottom as the architecture spec does; positions,
// slots and block completions come from the step descriptor inside the ops.
#include <cmath>

#include "model/model.h"

namespace dsv4 {

void Model::attention_block(const Workspace& ws, const ops::StepDesc& st, const LayerWeights& w,
                            const LayerSpec& spec, const LayerCache& lc, const float* x,
                            float* out) {
    const int64_t T = st.T;
    const ModelConfig& c = cfg_;
    const int H = c.num_heads, hd = c.head_dim, rd = c.rope_dim, Rq = c.q_lora_rank;
    const int Hi = c.index_n_heads, hi = c.index_head_dim, m = spec.compress_rate;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const RopeTable& rope = rope_for(spec);
    // bf16: DeepSeek's bf16 configuration rounds each op's output to bf16 (ops' round_bf16).
    const bool bf16 = this->bf16();
    // Rotates the trailing rd dims of `heads` heads of width `dim` of each token at its position.
    auto rope_at = [&](float* v, int heads, int dim, bool inverse) {
        backend_.rope({v, rope.inv_freq, st.tok_pos, T, heads, dim, rd, inverse, rope.scale, bf16});
    };
    Backend& b = backend_;
    const ops::ActType f32 = ops::ActType::kF32;

    // Every projection of x in one group: q latent, the shared K=V, compressor inputs. The
    // compressors' projections stay fp32 in every mode (the reference runs them on the upcast x).
    ops::LinearGroupArgs proj{x, {}, 0, T};
    auto project = [&](const Weight& wt, float* y, bool fp32_out = false) {
        proj.out[proj.n_out++] = {&wt, y, fp8_act(wt), bf16 && !fp32_out};
    };
    project(w.wq_a, ws.qa);
    project(w.wkv, ws.kv);
    if (spec.kind != LayerKind::kSliding) {
        project(w.compressor.wkv, ws.ckv, /*fp32_out=*/true);
        project(w.compressor.wgate, ws.cgate, /*fp32_out=*/true);
    }
    if (spec.kind == LayerKind::kCsa) {
        project(w.indexer_compressor.wkv, ws.ikv, /*fp32_out=*/true);
        project(w.indexer_compressor.wgate, ws.igate, /*fp32_out=*/true);
        project(w.indexer_weights_proj, ws.wts);
    }
    b.linear_group(proj);

    // Queries: low rank + q_norm, per-head unweighted norm, rope on the trailing rd dims.
    b.rms_norm({ws.qa, w.q_norm, ws.qa, T, Rq, eps, bf16});
    b.linear({ws.qa, &w.wq_b, ws.q, T, int64_t{H} * hd, 0, 0, 0, f32, f32, fp8_act(w.wq_b), bf16});
    b.rms_norm({ws.q, nullptr, ws.q, T * H, hd, eps, bf16});
    rope_at(ws.q, H, hd, false);
    // The one shared K=V head.
    b.rms_norm({ws.kv, w.kv_norm, ws.kv, T, hd, eps, bf16});
    rope_at(ws.kv, 1, hd, false);
    // Reference numerics: the NoPE dims of K=V round-trip FP8 per 64 (the cache's format). An
    // fp8 cache does this on write, bit for bit, and attention reads the step's own keys
    // through it too, so here and on the main entries the round trip is redundant. (The fp8
    // entry also keeps the RoPE dims in bf16, which the fp32 round trip leaves alone.)
    const bool fp8_kv = lc.kv_format.type == CacheType::kFp8;
    if (reference() && !fp8_kv) b.round_trip({ws.kv, T, hd, hd - rd, 64, ops::RoundTrip::kFp8});

    // Compressors: pool completed blocks into entries (normed and roped at their position).
    auto compress = [&](const CompressorWeights& cw, const CompressorCache& cc, const float* kv,
                        const float* gate, int width, int coff, ops::RoundTrip entry_rt,
                        const CacheRowFormat& format) {
        b.compress({kv, gate, cw.ape, cw.norm, rope_compress_.inv_freq, cc.kv, cc.gate, cc.entries,
                    st, cc.n_entries, m, width, coff, rd, eps, rope_compress_.scale,
                    reference() ? entry_rt : ops::RoundTrip::kNone, format, bf16});
    };
    // The indexer's Hadamard returns bf16 in the bf16 configuration, before the FP4 rounding.
    const ops::RoundTrip hadamard_fp4 =
        bf16 ? ops::RoundTrip::kHadamardBf16Fp4 : ops::RoundTrip::kHadamardFp4;
    const float* entries = nullptr;
    const int32_t* topk = nullptr;
    if (spec.kind != LayerKind::kSliding) {
        compress(w.compressor, lc.main, ws.ckv, ws.cgate, hd, spec.coff(),
                 fp8_kv ? ops::RoundTrip::kNone : ops::RoundTrip::kFp8, lc.kv_format);
        entries = lc.main.entries;
    }
    if (spec.kind == LayerKind::kCsa) {
        // Lightning indexer: its own compressed keys, queries from the q latent. fp4 keys are
        // the Hadamard + FP4 round trip itself (stored rotated): no second rotation.
        const bool fp4_keys = lc.key_format.type == CacheType::kFp4;
        compress(w.indexer_compressor, lc.indexer, ws.ikv, ws.igate, hi, 2,
                 fp4_keys ? ops::RoundTrip::kNone : hadamard_fp4, lc.key_format);
        b.linear({ws.qa, &w.indexer_wq_b, ws.qi, T, int64_t{Hi} * hi, 0, 0, 0, f32, f32,
                  fp8_act(w.indexer_wq_b), bf16});
        rope_at(ws.qi, Hi, hi, false);
        if (reference()) b.round_trip({ws.qi, T * Hi, hi, hi, 32, hadamard_fp4});
        b.scale(ws.wts, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hi) * Hi)), T * Hi);
        if (bf16) b.round_trip({ws.wts, T, Hi, Hi, 1, ops::RoundTrip::kBf16});
        b.indexer_topk({ws.qi, ws.wts, lc.indexer.entries, ws.topk, st, lc.indexer.n_entries, Hi,
                        hi, c.index_topk, m, lc.key_format, /*q_rotated=*/reference(), bf16});
        topk = ws.topk;
    }

    b.attention({ws.q, ws.kv, lc.ring, entries, topk, w.attn_sink, ws.o, st, H, hd,
                 c.sliding_window, c.index_topk, m, lc.main.n_entries,
                 static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))), lc.kv_format, bf16});
    b.ring_write({ws.kv, lc.ring, st, c.sliding_window, hd, lc.kv_format});
    // K = V carries rotated rope dims: de-rotate the output at the query position.
    rope_at(ws.o, H, hd, /*inverse=*/true);

    // Grouped low-rank output: group j maps its H/g heads through rows [j*Ro, (j+1)*Ro) of wo_a.
    const int g = c.o_groups, Ro = c.o_lora_rank;
    b.linear({ws.o, &w.wo_a, ws.u, T, Ro, 0, int64_t{H} * hd, int64_t{g} * Ro, f32, f32,
              fp8_act(w.wo_a), bf16, g});
    b.linear({ws.u, &w.wo_b, out, T, c.hidden_size, 0, 0, 0, f32, f32, fp8_act(w.wo_b), bf16});
}

void Model::ffn_block(const Workspace& ws, const ops::StepDesc& st, const LayerWeights& w,
                      const float* x, float* out) {
    const int64_t T = st.T;
    const ModelConfig& c = cfg_;
    const int E = c.n_routed_experts, k = c.num_experts_per_tok, I = c.moe_intermediate_size;
    const bool shared = c.n_shared_experts > 0;
    Backend& b = backend_;
    b.router({x, &w.gate, w.gate_bias, w.tid2eid, st.ids, ws.router_logits, ws.sel, ws.route_w, T,
              E, k, static_cast<float>(c.routed_scaling_factor)});
    b.moe({x, ws.sel, ws.route_w, &w.experts, shared ? &w.shared_w1 : nullptr,
           shared ? &w.shared_w3 : nullptr, shared ? &w.shared_w2 : nullptr, ws.shared, ws.routed,
           out, T, c.hidden_size, I, E, k, static_cast<float>(c.swiglu_limit),
           reference() && w.experts.fp8_activations, bf16()});
}

}  // namespace dsv4
