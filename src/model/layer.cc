// The two sub-blocks of a decoder layer: attention (with its compressors and indexer) and
// the MoE feed-forward. Each reads top to bottom as the architecture spec does; positions,
// slots and block completions come from the step descriptor inside the ops.
#include <cmath>

#include "model/model.h"

namespace dsv4 {

// a, its output cleared earlier in the step (LinearArgs::y_cleared).
static ops::LinearArgs cleared(ops::LinearArgs a) {
    a.y_cleared = true;
    return a;
}

// a, then writing the step's K=V rows into `ring` (AttentionArgs::ring_out).
static ops::AttentionArgs writing_ring(ops::AttentionArgs a, float* ring) {
    a.ring_out = ring;
    return a;
}

// a, then `next` reading a's output (LinearArgs::then).
static ops::LinearArgs then(ops::LinearArgs a, const ops::LinearArgs* next) {
    a.then = next;
    return a;
}

// a, its queries normed by `norm` first (AttentionArgs::q_norm).
static ops::AttentionArgs with_q_norm(ops::AttentionArgs a, const ops::RmsNormArgs* norm) {
    a.q_norm = norm;
    return a;
}

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
    Backend& b = backend_;
    const ops::ActType f32 = ops::ActType::kF32;
    const bool csa = spec.kind == LayerKind::kCsa, hca = spec.kind == LayerKind::kHca;

    // Every projection of x in one group (x_projections' order): q latent, the shared K=V,
    // compressor inputs. The compressors' projections stay fp32 in every mode (the reference runs
    // them on the upcast x).
    float* const proj_out[] = {ws.qa, ws.kv, ws.ckv, ws.cgate, ws.ikv, ws.igate, ws.wts};
    const bool fp32_out[] = {false, false, true, true, true, true, false};
    const Weight* xp[kMaxXProjections];
    ops::LinearGroupArgs proj{x, {}, x_projections(w, spec.kind, xp), T};
    for (int i = 0; i < proj.n_out; ++i)
        proj.out[i] = {xp[i], proj_out[i], fp8_act(*xp[i]), bf16 && !fp32_out[i]};
    proj.packed = w.x_proj_packed.valid() ? &w.x_proj_packed : nullptr;
    // The group also clears the outputs the block's later linears add into (LinearArgs::
    // y_cleared): on CUDA inside its own launch.
    proj.clear[0] = {ws.q, T * H * hd};
    proj.clear[1] = {ws.u, T * c.o_groups * c.o_lora_rank};
    proj.clear[2] = {out, T * c.hidden_size};
    if (csa) proj.clear[3] = {ws.qi, T * Hi * hi};
    proj.clear[4] = {ws.router_logits, T * c.n_routed_experts};  // (the FFN's router)
    b.linear_group(proj);

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

    // The compressors and CSA's lightning indexer need nothing of the query and K=V chain below
    // until attention: a branch that may run beside it (Backend::branch_begin). On CSA layers
    // the branch is the indexer, from here: its compressor needs only x's projections (beside
    // the q-lora norm: the branch pauses), its queries the normed q latent (the branch resumes
    // after the norm); then top-k, the longer side, so the main compressor stays beside the
    // query chain. On HCA layers the branch is the main compressor, after the norm.
    if (csa) {
        // fp4 keys are the Hadamard + FP4 round trip itself (stored rotated): no second rotation.
        const bool fp4_keys = lc.key_format.type == CacheType::kFp4;
        b.branch_begin();
        compress(w.indexer_compressor, lc.indexer, ws.ikv, ws.igate, hi, 2,
                 fp4_keys ? ops::RoundTrip::kNone : hadamard_fp4, lc.key_format);
        b.branch_pause();
    }

    // Queries: low rank + q_norm, per-head unweighted norm, rope on the trailing rd dims. The
    // one shared K=V head's norm (and rope) rides along (independent rows: one launch on CUDA).
    const int g = c.o_groups, Ro = c.o_lora_rank;
    const ops::FusedRope kv_rope{rope.inv_freq, st.tok_pos, 1, rd, rope.scale};
    const ops::RmsNormArgs kv_norm{ws.kv, w.kv_norm, ws.kv, T, hd, eps, bf16, &kv_rope};
    ops::RmsNormArgs q_lora_norm{ws.qa, w.q_norm, ws.qa, T, Rq, eps, bf16};
    q_lora_norm.also = &kv_norm;
    b.rms_norm(q_lora_norm);
    // Reference numerics: the NoPE dims of K=V round-trip FP8 per 64 (the cache's format). An
    // fp8 cache does this on write, bit for bit, and attention reads the step's own keys
    // through it too, so here and on the main entries the round trip is redundant. (The fp8
    // entry also keeps the RoPE dims in bf16, which the fp32 round trip leaves alone.)
    const bool fp8_kv = lc.kv_format.type == CacheType::kFp8;
    if (reference() && !fp8_kv) b.round_trip({ws.kv, T, hd, hd - rd, 64, ops::RoundTrip::kFp8});

    auto compress_main = [&] {
        compress(w.compressor, lc.main, ws.ckv, ws.cgate, hd, spec.coff(),
                 fp8_kv ? ops::RoundTrip::kNone : ops::RoundTrip::kFp8, lc.kv_format);
    };
    const bool branch = csa || hca;
    if (csa) b.branch_resume();
    if (hca) {
        b.branch_begin();
        compress_main();
    }
    const int32_t* topk = nullptr;
    if (csa) {
        b.linear(cleared({ws.qa, &w.indexer_wq_b, ws.qi, T, int64_t{Hi} * hi, 0, 0, 0, f32, f32,
                          fp8_act(w.indexer_wq_b), bf16}));
        const float w_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hi) * Hi));
        ops::IndexerTopkArgs top{
            ws.qi, ws.wts, lc.indexer.entries, ws.topk, st,           lc.indexer.n_entries,
            Hi,    hi,     c.index_topk,       m,       lc.key_format};
        top.q_rotated = reference();
        top.round_bf16 = bf16;
        if (!reference()) {  // (no rounding between them: q's rope and w's scale fused in)
            top.q_rope = {rope.inv_freq, st.tok_pos, Hi, rd, rope.scale};
            top.w_scale = w_scale;
        } else {
            b.rope({ws.qi, rope.inv_freq, st.tok_pos, T, Hi, hi, rd, false, rope.scale, bf16});
            b.round_trip({ws.qi, T * Hi, hi, hi, 32, hadamard_fp4});
            b.scale(ws.wts, w_scale, T * Hi);
            if (bf16) b.round_trip({ws.wts, T, Hi, Hi, 1, ops::RoundTrip::kBf16});
        }
        b.indexer_topk(top);
        topk = ws.topk;
    }
    if (branch) b.branch_end();

    b.linear(cleared(
        {ws.qa, &w.wq_b, ws.q, T, int64_t{H} * hd, 0, 0, 0, f32, f32, fp8_act(w.wq_b), bf16}));

    if (csa) compress_main();
    if (branch) b.branch_join();
    const float* entries = spec.kind != LayerKind::kSliding ? lc.main.entries : nullptr;

    // K = V carries rotated rope dims: the output is de-rotated at the query position (an
    // inverse rope fused into attention).
    // The queries' per-head norm and rope run inside the attention op (AttentionArgs::q_norm:
    // rms_norm then attention).
    const ops::FusedRope o_rope{rope.inv_freq, st.tok_pos, H, rd, rope.scale, /*inverse=*/true};
    const ops::FusedRope q_rope{rope.inv_freq, st.tok_pos, H, rd, rope.scale};
    const ops::RmsNormArgs q_norm{ws.q, nullptr, ws.q, T * H, hd, eps, bf16, &q_rope};
    b.attention(
        with_q_norm(writing_ring({ws.q, ws.kv, lc.ring, entries, topk, w.attn_sink, ws.o, st, H, hd,
                                  c.sliding_window, c.index_topk, m, lc.main.n_entries,
                                  static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))),
                                  lc.kv_format, bf16, &o_rope, lc.ring_rows},
                                 lc.ring),
                    &q_norm));

    // Grouped low-rank output: group j maps its H/g heads through rows [j*Ro, (j+1)*Ro) of wo_a;
    // then wo_b (one op: a backend may run the pair as one launch).
    const ops::LinearArgs wo_b =
        cleared({ws.u, &w.wo_b, out, T, c.hidden_size, 0, 0, 0, f32, f32, fp8_act(w.wo_b), bf16});
    b.linear(then(cleared({ws.o, &w.wo_a, ws.u, T, Ro, 0, int64_t{H} * hd, int64_t{g} * Ro, f32,
                           f32, fp8_act(w.wo_a), bf16, g}),
                  &wo_b));
}

void Model::ffn_block(const Workspace& ws, const ops::StepDesc& st, const LayerWeights& w,
                      const float* x, float* out) {
    const int64_t T = st.T;
    const ModelConfig& c = cfg_;
    const int E = c.n_routed_experts, k = c.num_experts_per_tok, I = c.moe_intermediate_size;
    // With ranks (ops/collective.h) each rank adds its own experts' outputs, rank 0 the shared
    // expert's, and the sum over the ranks makes the output whole.
    const bool shared = c.n_shared_experts > 0 && backend_.rank() == 0;
    Backend& b = backend_;
    // The routing runs inside the moe op (MoeArgs::route); the attention block's projections
    // cleared its logits.
    const float scale = static_cast<float>(c.routed_scaling_factor);
    ops::RouterArgs route{x,      &w.gate,    w.gate_bias, w.tid2eid, st.ids, ws.router_logits,
                          ws.sel, ws.route_w, T,           E,         k,      scale};
    route.logits_cleared = true;
    b.moe({x, ws.sel, ws.route_w, &w.experts, shared ? &w.shared_w1 : nullptr,
           shared ? &w.shared_w3 : nullptr, shared ? &w.shared_w2 : nullptr, ws.shared, ws.routed,
           out, T, c.hidden_size, I, E, k, static_cast<float>(c.swiglu_limit),
           reference() && w.experts.fp8_activations, bf16(), &route});
    b.all_reduce_sum(out, T * c.hidden_size);
}

}  // namespace dsv4
