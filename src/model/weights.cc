#include "model/weights.h"

#include <set>

#include "formats/tensor_names.h"
#include "model/synthetic.h"

namespace dsv4 {

namespace {

// Format groups reported by `dsv4 info`, in this order.
constexpr const char* kGroupNames[] = {"embed",   "head",   "attention",      "compressor",
                                       "indexer", "router", "shared experts", "routed experts"};
int group_of(ops::WeightRole r) {
    switch (r) {
        case ops::WeightRole::kEmbed:
            return 0;
        case ops::WeightRole::kHead:
            return 1;
        case ops::WeightRole::kAttention:
            return 2;
        case ops::WeightRole::kCompressor:
            return 3;
        case ops::WeightRole::kIndexer:
            return 4;
        case ops::WeightRole::kRouter:
            return 5;
        case ops::WeightRole::kSharedExpert:
            return 6;
        case ops::WeightRole::kExperts:
            return 7;
    }
    DSV4_UNREACHABLE("weight role");
}

class Binder {
  public:
    // With `synth`, every tensor is drawn by it instead of read from `store`.
    Binder(const TensorStore& store, Backend& backend, SynthSource* synth)
        : store_(store), backend_(backend), synth_(synth) {}
    SynthSource* synth() { return synth_; }

    // A matrix's checkpoint view, checked against its shape (not yet handed to the backend).
    Expected<QuantWeight> view(const std::string& prefix, int64_t rows, int64_t cols,
                               ops::WeightRole role) {
        auto w = synth_ ? Expected<QuantWeight>(synth_->matrix(prefix, rows, cols, role))
                        : bind_quant_weight(store_, prefix, rows, cols);
        if (!w) return w.status();
        for (const char* const* s = quant_weight_suffixes(); *s != nullptr; ++s)
            if (store_.find(prefix + *s)) used_.insert(prefix + *s);
        bytes_ += w->nbytes();
        std::string f = weight_format_name(w->format);
        if (w->format == WeightFormat::kDense) f = std::string(dtype_name(w->dtype));
        formats_[group_of(role)].insert(f);
        return w;
    }

    Expected<ops::Weight> matrix(const std::string& prefix, int64_t rows, int64_t cols,
                                 ops::WeightPlacement where) {
        DSV4_ASSIGN_OR_RETURN(QuantWeight w, view(prefix, rows, cols, where.role));
        DSV4_ASSIGN_OR_RETURN(ops::Weight h, backend_.upload_weight(w, where));
        // wo_a is the reference's exception: converted to bf16, applied without rounding x.
        const bool wo_a = prefix.size() >= 4 && prefix.compare(prefix.size() - 4, 4, "wo_a") == 0;
        h.fp8_activations = low_precision(w.format) && !wo_a;
        return h;
    }

    // Formats DeepSeek's reference applies as FP8 / FP4 GEMMs (activations rounded to FP8).
    static bool low_precision(WeightFormat f) {
        return f == WeightFormat::kFp8Block || f == WeightFormat::kMxfp4;
    }

    std::vector<std::string> formats() const {
        std::vector<std::string> out;
        for (int g = 0; g < 8; ++g) {
            if (formats_[g].empty()) continue;
            std::string line = std::string(kGroupNames[g]) + ": ";
            bool first = true;
            for (const auto& f : formats_[g]) {
                line += (first ? "" : ", ") + f;
                first = false;
            }
            out.push_back(line);
        }
        return out;
    }

    // A small float tensor as float32 in backend memory.
    Expected<const float*> vec(const std::string& name, Shape shape) {
        if (synth_) {
            const int64_t cols = shape[shape.ndim - 1];
            const std::vector<float> host = synth_->vec(name, shape.numel() / cols, cols);
            bytes_ += host.size() * sizeof(float);
            return upload_floats(host);
        }
        const TensorInfo* t = store_.find(name);
        if (t == nullptr) return error("missing tensor '", name, "'");
        if (!(t->shape == shape))
            return error("tensor '", name, "' has shape ", t->shape.str(), ", expected ",
                         shape.str());
        if (t->dtype != DType::kF32 && t->dtype != DType::kBF16 && t->dtype != DType::kF16)
            return error("tensor '", name, "' has dtype ", dtype_name(t->dtype),
                         ", expected a float type");
        used_.insert(name);
        bytes_ += t->nbytes;
        std::vector<float> host(shape.numel());
        for (int64_t i = 0; i < shape.numel(); ++i) host[i] = load_as_f32(t->data, t->dtype, i);
        return upload_floats(host);
    }
    Expected<const float*> upload_floats(const std::vector<float>& host) {
        DSV4_ASSIGN_OR_RETURN(void* dev, backend_.try_alloc(host.size() * sizeof(float)));
        backend_.upload(dev, host.data(), host.size() * sizeof(float));
        return static_cast<const float*>(dev);
    }

    Expected<const int32_t*> hash_table(const std::string& name, int64_t V, int k, int E) {
        if (synth_) return upload_ids(synth_->hash_table(name, V, k, E));
        const TensorInfo* t = store_.find(name);
        if (t == nullptr) return error("missing tensor '", name, "' (hash-routed layer)");
        if (!(t->shape == Shape{V, k}))
            return error("tensor '", name, "' has shape ", t->shape.str(), ", expected ",
                         Shape{V, k}.str());
        if (t->dtype != DType::kI64 && t->dtype != DType::kI32)
            return error("tensor '", name, "' has dtype ", dtype_name(t->dtype),
                         ", expected I64 or I32");
        used_.insert(name);
        bytes_ += t->nbytes;
        std::vector<int32_t> host(V * k);
        for (int64_t i = 0; i < V * k; ++i) {
            const int64_t e = load_as_i64(t->data, t->dtype, i);
            if (e < 0 || e >= E)
                return error("tensor '", name, "' routes token ", i / k, " to expert ", e,
                             " (only ", E, " experts)");
            host[i] = static_cast<int32_t>(e);
        }
        return upload_ids(host);
    }
    Expected<const int32_t*> upload_ids(const std::vector<int32_t>& host) {
        DSV4_ASSIGN_OR_RETURN(void* dev, backend_.try_alloc(host.size() * sizeof(int32_t)));
        backend_.upload(dev, host.data(), host.size() * sizeof(int32_t));
        return static_cast<const int32_t*>(dev);
    }

    void mark_used(const std::string& name) {
        if (store_.find(name)) used_.insert(name);
    }
    // Every tensor under `prefix` (another rank's experts: there, not read here).
    void mark_used_under(const std::string& prefix) {
        for (const std::string& n : store_.names())
            if (n.rfind(prefix, 0) == 0) used_.insert(n);
    }
    // (A synthetic model has a head of its own, and an MTP block when its spec asks for one.)
    bool has(const std::string& name) const {
        if (synth_ == nullptr) return store_.find(name) != nullptr;
        return name == "head.weight" || (name == "mtp.0.e_proj.weight" && synth_->spec().mtp);
    }

    // Bookkeeping of weights made by the backend itself (synthetic experts).
    void count(size_t bytes, ops::WeightRole role, WeightFormat f) {
        bytes_ += bytes;
        formats_[group_of(role)].insert(weight_format_name(f));
    }

    Status check_all_used() const {
        std::vector<std::string> unexpected;
        for (const std::string& n : store_.names())
            if (!used_.count(n) && n.rfind("mtp.", 0) != 0) unexpected.push_back(n);
        if (unexpected.empty()) return Status::ok();
        std::string list;
        for (size_t i = 0; i < unexpected.size() && i < 8; ++i)
            list += (i ? ", " : "") + unexpected[i];
        if (unexpected.size() > 8)
            list += ", ... (" + std::to_string(unexpected.size()) + " in all)";
        return error("unexpected tensors not used by this config: ", list);
    }
    size_t bytes() const { return bytes_; }
    Backend& backend() { return backend_; }

  private:
    const TensorStore& store_;
    Backend& backend_;
    SynthSource* synth_ = nullptr;
    std::set<std::string> used_;
    std::set<std::string> formats_[8];
    size_t bytes_ = 0;
};

#define DSV4_BIND(lhs, expr) DSV4_ASSIGN_OR_RETURN(lhs, expr)

Status bind_compressor(Binder& b, const std::string& p, int coff, int width, int m, int D,
                       ops::WeightPlacement where, CompressorWeights& c) {
    DSV4_BIND(c.wkv, b.matrix(p + "wkv", int64_t{coff} * width, D, where));
    DSV4_BIND(c.wgate, b.matrix(p + "wgate", int64_t{coff} * width, D, where));
    DSV4_BIND(c.ape, b.vec(p + "ape", {m, int64_t{coff} * width}));
    DSV4_BIND(c.norm, b.vec(p + "norm.weight", {width}));
    return Status::ok();
}

Status bind_hc(Binder& b, const std::string& p, int rows, int64_t width, int nscale,
               HcWeights& hc) {
    DSV4_BIND(hc.fn, b.vec(p + "fn", {rows, width}));
    DSV4_BIND(hc.base, b.vec(p + "base", {rows}));
    DSV4_BIND(hc.scale, b.vec(p + "scale", {nscale}));
    return Status::ok();
}

// One decoder block under prefix p ("layers.3." or "mtp.0."); l places its weights.
Status bind_layer(Binder& b, const ModelConfig& c, const std::string& p, const LayerSpec& spec,
                  int l, LayerWeights& w) {
    const int D = c.hidden_size, n = c.hc_mult, H = c.num_heads, hd = c.head_dim;
    const int64_t nD = int64_t{n} * D;
    const size_t bytes0 = b.bytes();
    DSV4_BIND(w.attn_norm, b.vec(p + "attn_norm.weight", {D}));
    DSV4_BIND(w.ffn_norm, b.vec(p + "ffn_norm.weight", {D}));
    DSV4_RETURN_IF_ERROR(bind_hc(b, p + "hc_attn_", c.hc_mix(), nD, 3, w.hc_attn));
    DSV4_RETURN_IF_ERROR(bind_hc(b, p + "hc_ffn_", c.hc_mix(), nD, 3, w.hc_ffn));

    using R = ops::WeightRole;
    auto at = [l](R role) { return ops::WeightPlacement{role, l}; };
    const std::string a = p + "attn.";
    DSV4_BIND(w.wq_a, b.matrix(a + "wq_a", c.q_lora_rank, D, at(R::kAttention)));
    DSV4_BIND(w.q_norm, b.vec(a + "q_norm.weight", {c.q_lora_rank}));
    DSV4_BIND(w.wq_b, b.matrix(a + "wq_b", int64_t{H} * hd, c.q_lora_rank, at(R::kAttention)));
    DSV4_BIND(w.wkv, b.matrix(a + "wkv", hd, D, at(R::kAttention)));
    DSV4_BIND(w.kv_norm, b.vec(a + "kv_norm.weight", {hd}));
    ops::WeightPlacement wo_a_at = at(R::kAttention);
    wo_a_at.row_block = c.o_lora_rank;  // one range per output group (layer.cc)
    DSV4_BIND(w.wo_a, b.matrix(a + "wo_a", int64_t{c.o_groups} * c.o_lora_rank,
                               int64_t{H} * hd / c.o_groups, wo_a_at));
    DSV4_BIND(w.wo_b,
              b.matrix(a + "wo_b", D, int64_t{c.o_groups} * c.o_lora_rank, at(R::kAttention)));
    DSV4_BIND(w.attn_sink, b.vec(a + "attn_sink", {H}));
    if (spec.kind != LayerKind::kSliding) {
        DSV4_RETURN_IF_ERROR(bind_compressor(b, a + "compressor.", spec.coff(), hd,
                                             spec.compress_rate, D, at(R::kCompressor),
                                             w.compressor));
    }
    if (spec.kind == LayerKind::kCsa) {
        const int hi = c.index_head_dim, Hi = c.index_n_heads;
        DSV4_RETURN_IF_ERROR(bind_compressor(b, a + "indexer.compressor.", 2, hi,
                                             spec.compress_rate, D, at(R::kIndexer),
                                             w.indexer_compressor));
        DSV4_BIND(w.indexer_wq_b,
                  b.matrix(a + "indexer.wq_b", int64_t{Hi} * hi, c.q_lora_rank, at(R::kIndexer)));
        DSV4_BIND(w.indexer_weights_proj,
                  b.matrix(a + "indexer.weights_proj", Hi, D, at(R::kIndexer)));
    }

    // One weight for the projections of x where the backend packs them (CUDA: one GEMV pass).
    const Weight* xp[kMaxXProjections];
    const int n_xp = x_projections(w, spec.kind, xp);
    DSV4_BIND(w.x_proj_packed, b.backend().pack_rows({xp, static_cast<size_t>(n_xp)}));

    const std::string f = p + "ffn.";
    const int E = c.n_routed_experts, I = c.moe_intermediate_size;
    DSV4_BIND(w.gate, b.matrix(f + "gate", E, D, at(R::kRouter)));
    if (spec.hash_routed) {
        DSV4_BIND(w.tid2eid,
                  b.hash_table(f + "gate.tid2eid", c.vocab_size, c.num_experts_per_tok, E));
        b.mark_used(f + "gate.bias");  // present in some exports; hash routing ignores it
    } else {
        DSV4_BIND(w.gate_bias, b.vec(f + "gate.bias", {E}));
    }
    if (c.n_shared_experts > 0) {
        DSV4_BIND(w.shared_w1, b.matrix(f + "shared_experts.w1", I, D, at(R::kSharedExpert)));
        DSV4_BIND(w.shared_w2, b.matrix(f + "shared_experts.w2", D, I, at(R::kSharedExpert)));
        DSV4_BIND(w.shared_w3, b.matrix(f + "shared_experts.w3", I, D, at(R::kSharedExpert)));
    }
    w.bytes_dense = b.bytes() - bytes0;
    // A synthetic model's experts are drawn by the backend where it can (in device memory);
    // otherwise (and from a checkpoint) they are views handed to upload_experts.
    WeightFormat expert_format = WeightFormat::kDense;
    const Backend::SharedExpert shared =
        c.n_shared_experts > 0 ? Backend::SharedExpert{&w.shared_w1, &w.shared_w3, &w.shared_w2}
                               : Backend::SharedExpert{};
    // With ranks, this rank's share of the experts only (ops/collective.h).
    const ops::ExpertShard shard = ops::expert_shard(E, b.backend().rank(), b.backend().ranks());
    // (Every rank refuses alike, so none goes on to wait for the others in a collective.)
    if (b.backend().ranks() > E)
        return error(b.backend().ranks(), " ranks for ", E, " routed experts: at most ", E);
    if (SynthSource* syn = b.synth()) {
        expert_format = syn->expert_format();
        DSV4_BIND(w.experts, b.backend().synth_experts(shard.count, I, D, expert_format,
                                                       syn->seed_of(f + "experts") + shard.first,
                                                       at(R::kExperts), shared));
        if (w.experts.valid())
            b.count(
                static_cast<size_t>(synth_bytes_per_value(expert_format) * shard.count * 3 * I * D),
                R::kExperts, expert_format);
    }
    if (!w.experts.valid()) {
        std::vector<QuantWeight> w1(shard.count), w2(shard.count), w3(shard.count);
        for (int e = 0; e < E; ++e) {
            const std::string x = f + "experts." + std::to_string(e) + ".";
            const int i = e - shard.first;
            if (i < 0 || i >= shard.count) {
                b.mark_used_under(x);
                continue;
            }
            DSV4_BIND(w1[i], b.view(x + "w1", I, D, R::kExperts));
            DSV4_BIND(w2[i], b.view(x + "w2", D, I, R::kExperts));
            DSV4_BIND(w3[i], b.view(x + "w3", I, D, R::kExperts));
        }
        expert_format = w1[0].format;
        DSV4_BIND(w.experts, b.backend().upload_experts(w1.data(), w3.data(), w2.data(),
                                                        shard.count, at(R::kExperts), shared));
    }
    w.experts.first = shard.first;
    w.experts.fp8_activations = Binder::low_precision(expert_format);
    w.bytes_expert = (b.bytes() - bytes0 - w.bytes_dense) / shard.count;
    return Status::ok();
}

}  // namespace

int x_projections(const LayerWeights& w, LayerKind kind, const Weight** out) {
    int n = 0;
    for (const Weight* p : {&w.wq_a, &w.wkv}) out[n++] = p;
    if (kind != LayerKind::kSliding)
        for (const Weight* p : {&w.compressor.wkv, &w.compressor.wgate}) out[n++] = p;
    if (kind == LayerKind::kCsa)
        for (const Weight* p :
             {&w.indexer_compressor.wkv, &w.indexer_compressor.wgate, &w.indexer_weights_proj})
            out[n++] = p;
    return n;
}

Expected<ModelWeights> bind_weights(TensorStore& store, const ModelConfig& c, Backend& backend,
                                    const LoadProgress& progress, SynthSource* synth) {
    DSV4_RETURN_IF_ERROR(store.rename(release_tensor_name));
    Binder b(store, backend, synth);
    ModelWeights w;
    const int D = c.hidden_size, n = c.hc_mult;
    const size_t embed0 = b.bytes();
    DSV4_BIND(w.embed, b.matrix("embed", c.vocab_size, D, {ops::WeightRole::kEmbed, -1}));
    const size_t head0 = b.bytes();
    if (b.has("head.weight") || !c.tie_word_embeddings) {
        DSV4_BIND(w.head, b.matrix("head", c.vocab_size, D, {ops::WeightRole::kHead, -1}));
    } else {
        w.head = w.embed;
        w.bytes_head = head0 - embed0;
    }
    DSV4_BIND(w.norm, b.vec("norm.weight", {D}));
    DSV4_RETURN_IF_ERROR(bind_hc(b, "hc_head_", n, int64_t{n} * D, 1, w.hc_head));
    w.bytes_head += b.bytes() - head0;
    w.layers.resize(c.num_layers);
    for (int l = 0; l < c.num_layers; ++l) {
        DSV4_RETURN_IF_ERROR(
            bind_layer(b, c, "layers." + std::to_string(l) + ".", c.layers[l], l, w.layers[l]));
        if (progress) progress(l + 1, c.num_layers);
    }
    if (c.num_mtp_layers > 0 && b.has("mtp.0.e_proj.weight")) {
        MtpWeights& m = w.mtp.emplace_back();
        const std::string p = "mtp.0.";
        const ops::WeightPlacement at{ops::WeightRole::kAttention, c.num_layers};
        DSV4_RETURN_IF_ERROR(bind_layer(b, c, p, c.mtp_spec, c.num_layers, m.block));
        const size_t proj0 = b.bytes();
        DSV4_BIND(m.e_proj, b.matrix(p + "e_proj", D, D, at));
        DSV4_BIND(m.h_proj, b.matrix(p + "h_proj", D, D, at));
        m.bytes_proj = b.bytes() - proj0;
        DSV4_BIND(m.enorm, b.vec(p + "enorm.weight", {D}));
        DSV4_BIND(m.hnorm, b.vec(p + "hnorm.weight", {D}));
        DSV4_BIND(m.norm, b.vec(p + "norm.weight", {D}));
        DSV4_RETURN_IF_ERROR(bind_hc(b, p + "hc_head_", n, int64_t{n} * D, 1, m.hc_head));
    }
    if (synth == nullptr) DSV4_RETURN_IF_ERROR(b.check_all_used());
    w.bytes = b.bytes();
    w.formats = b.formats();
    return w;
}

}  // namespace dsv4
