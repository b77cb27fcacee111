#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "base/log.h"
#include "model/rope_table.h"

namespace dsv4 {

Model::Model(ModelConfig cfg, TensorStore store, Backend& backend, int max_chunk)
    : cfg_(std::move(cfg)), store_(std::move(store)), backend_(backend), max_chunk_(max_chunk) {}

Expected<std::unique_ptr<Model>> Model::load(const std::string& dir, Backend& backend,
                                             int max_chunk) {
    namespace fs = std::filesystem;
    if (max_chunk <= 0) return error("max_chunk must be > 0");
    DSV4_ASSIGN_OR_RETURN(ModelConfig cfg,
                          load_model_config((fs::path(dir) / "config.json").string()));
    DSV4_ASSIGN_OR_RETURN(TensorStore store, TensorStore::open(dir));
    std::unique_ptr<Model> m(new Model(std::move(cfg), std::move(store), backend, max_chunk));
    DSV4_ASSIGN_OR_RETURN(m->w_, bind_weights(m->store_, m->cfg_, backend));
    DSV4_LOG_INFO("loaded ", dir, ": ", m->cfg_.summary());

    const ModelConfig& c = m->cfg_;
    auto upload_freq = [&](const RopeParams& p) {
        std::vector<float> f = rope_inv_freq(p, c.rope_dim);
        float* d = backend.alloc_array<float>(static_cast<int64_t>(f.size()));
        backend.upload(d, f.data(), f.size() * sizeof(float));
        return RopeTable{d, static_cast<float>(p.attention_factor)};
    };
    m->rope_main_ = upload_freq(c.rope_main);
    m->rope_compress_ = upload_freq(c.rope_compress);

    const int64_t T = max_chunk, D = c.hidden_size, n = c.hc_mult;
    const int64_t cw = 2 * std::max(c.head_dim, std::max(c.index_head_dim, 1));
    auto f = [&](int64_t count) { return backend.alloc_array<float>(count); };
    Workspace& ws = m->ws_;
    ws.ids = backend.alloc_array<int32_t>(T);
    ws.streams = f(T * n * D);
    ws.streams_next = f(T * n * D);
    ws.y = f(T * D);
    ws.xn = f(T * D);
    ws.post = f(T * n);
    ws.comb = f(T * n * n);
    ws.qa = f(T * c.q_lora_rank);
    ws.q = f(T * c.num_heads * c.head_dim);
    ws.kv = f(T * c.head_dim);
    ws.o = f(T * c.num_heads * c.head_dim);
    ws.u = f(T * c.o_groups * c.o_lora_rank);
    ws.sub_out = f(T * D);
    ws.ckv = f(T * cw);
    ws.cgate = f(T * cw);
    ws.qi = f(T * std::max(1, c.index_n_heads * c.index_head_dim));
    ws.wts = f(T * std::max(1, c.index_n_heads));
    ws.topk = backend.alloc_array<int32_t>(T * std::max(1, c.index_topk));
    ws.router_logits = f(T * c.n_routed_experts);
    ws.sel = backend.alloc_array<int32_t>(T * c.num_experts_per_tok);
    ws.route_w = f(T * c.num_experts_per_tok);
    ws.sh_g = f(T * c.moe_intermediate_size);
    ws.sh_u = f(T * c.moe_intermediate_size);
    ws.sh_out = f(T * D);
    ws.logits = f(T * c.vocab_size);
    return m;
}

Status Model::validate_ids(const int32_t* ids, int64_t T) const {
    for (int64_t i = 0; i < T; ++i)
        if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
            return error("token id ", ids[i], " at index ", i, " is outside the vocabulary [0, ",
                         cfg_.vocab_size, ")");
    return Status::ok();
}

Status Model::forward(KvCache& cache, const int32_t* ids, int64_t T, float* logits,
                      float* last_logits, const LayerTap& tap) {
    DSV4_RETURN_IF_ERROR(validate_ids(ids, T));
    DSV4_RETURN_IF_ERROR(cache.reserve(T));
    const int64_t V = cfg_.vocab_size;
    for (int64_t done = 0; done < T;) {
        const int64_t c = std::min<int64_t>(max_chunk_, T - done);
        backend_.upload(ws_.ids, ids + done, c * sizeof(int32_t));
        step(cache, c, tap);
        if (logits != nullptr)
            backend_.download(logits + done * V, ws_.logits, c * V * sizeof(float));
        if (last_logits != nullptr && done + c == T)
            backend_.download(last_logits, ws_.logits + (c - 1) * V, V * sizeof(float));
        done += c;
    }
    return Status::ok();
}

// One chunk of T tokens at the cache position: the layer stack, hc head, norm and logits.
void Model::step(KvCache& cache, int64_t T, const LayerTap& tap) {
    const ModelConfig& c = cfg_;
    const int n = c.hc_mult, D = c.hidden_size;
    const float eps = static_cast<float>(c.rms_norm_eps), hc_eps = static_cast<float>(c.hc_eps);
    const int64_t pos0 = cache.position();
    Backend& b = backend_;
    b.embed({ws_.ids, &w_.embed, ws_.streams, T, n});
    for (int l = 0; l < c.num_layers; ++l) {
        const LayerWeights& w = w_.layers[l];
        // Attention sub-block, then FFN sub-block, each wrapped in mHC pre/post.
        b.hc_pre({ws_.streams, w.hc_attn.fn, w.hc_attn.base, w.hc_attn.scale, ws_.y, ws_.post,
                  ws_.comb, T, n, D, c.hc_sinkhorn_iters, eps, hc_eps});
        b.rms_norm({ws_.y, w.attn_norm, ws_.xn, T, D, eps});
        attention_block(w, c.layers[l], cache.layer(l), pos0, T, ws_.xn, ws_.sub_out);
        b.hc_post({ws_.sub_out, ws_.streams, ws_.post, ws_.comb, ws_.streams_next, T, n, D});
        b.hc_pre({ws_.streams_next, w.hc_ffn.fn, w.hc_ffn.base, w.hc_ffn.scale, ws_.y, ws_.post,
                  ws_.comb, T, n, D, c.hc_sinkhorn_iters, eps, hc_eps});
        b.rms_norm({ws_.y, w.ffn_norm, ws_.xn, T, D, eps});
        ffn_block(w, T, ws_.xn, ws_.sub_out);
        b.hc_post({ws_.sub_out, ws_.streams_next, ws_.post, ws_.comb, ws_.streams, T, n, D});
        if (tap) {
            std::vector<float> host(T * n * D);
            b.download(host.data(), ws_.streams, host.size() * sizeof(float));
            tap(l, host.data(), T);
        }
    }
    b.hc_head({ws_.streams, w_.hc_head.fn, w_.hc_head.base, w_.hc_head.scale, ws_.y, T, n, D, eps,
               hc_eps});
    b.rms_norm({ws_.y, w_.norm, ws_.xn, T, D, eps});
    if (tap) {
        std::vector<float> host(T * D);
        b.download(host.data(), ws_.xn, host.size() * sizeof(float));
        tap(c.num_layers, host.data(), T);
    }
    b.linear({ws_.xn, &w_.head, ws_.logits, T, c.vocab_size});
    cache.advance(T);
}

}  // namespace dsv4
