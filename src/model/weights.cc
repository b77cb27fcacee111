#include "model/weights.h"

#include <set>

#include "formats/tensor_names.h"

namespace dsv4 {

std::vector<std::string> describe_weight_formats(const ModelWeights& w) {
    std::vector<std::pair<std::string, std::set<std::string>>> groups = {
        {"embed", {}},   {"head", {}},   {"attention", {}},      {"compressor", {}},
        {"indexer", {}}, {"router", {}}, {"shared experts", {}}, {"routed experts", {}}};
    auto add = [&](int g, const QuantWeight& q) {
        if (!q.valid()) return;
        std::string f = weight_format_name(q.format);
        if (q.format == WeightFormat::kDense) f = std::string(dtype_name(q.dtype));
        groups[g].second.insert(f);
    };
    add(0, w.embed);
    add(1, w.head);
    for (const LayerWeights& l : w.layers) {
        for (const QuantWeight* q : {&l.wq_a, &l.wq_b, &l.wkv, &l.wo_a, &l.wo_b}) add(2, *q);
        for (const QuantWeight* q : {&l.compressor.wkv, &l.compressor.wgate}) add(3, *q);
        for (const QuantWeight* q : {&l.indexer_compressor.wkv, &l.indexer_compressor.wgate,
                                     &l.indexer_wq_b, &l.indexer_weights_proj})
            add(4, *q);
        add(5, l.gate);
        for (const QuantWeight* q : {&l.shared_w1, &l.shared_w2, &l.shared_w3}) add(6, *q);
        for (const auto* v : {&l.w1, &l.w2, &l.w3})
            for (const QuantWeight& q : *v) add(7, q);
    }
    std::vector<std::string> out;
    for (const auto& [name, formats] : groups) {
        if (formats.empty()) continue;
        std::string line = name + ": ";
        bool first = true;
        for (const auto& f : formats) {
            line += (first ? "" : ", ") + f;
            first = false;
        }
        out.push_back(line);
    }
    return out;
}

namespace {

class Binder {
  public:
    Binder(const TensorStore& store, Backend& backend) : store_(store), backend_(backend) {}

    Expected<QuantWeight> matrix(const std::string& prefix, int64_t rows, int64_t cols) {
        auto w = bind_quant_weight(store_, prefix, rows, cols);
        if (!w) return w.status();
        for (const char* const* s = quant_weight_suffixes(); *s != nullptr; ++s)
            if (store_.find(prefix + *s)) used_.insert(prefix + *s);
        bytes_ += w->nbytes();
        return backend_.upload_weight(*w);
    }

    // A small float tensor as float32 in backend memory.
    Expected<const float*> vec(const std::string& name, Shape shape) {
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
        float* dev = backend_.alloc_array<float>(shape.numel());
        backend_.upload(dev, host.data(), host.size() * sizeof(float));
        return static_cast<const float*>(dev);
    }

    Expected<const int32_t*> hash_table(const std::string& name, int64_t V, int k, int E) {
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
        int32_t* dev = backend_.alloc_array<int32_t>(V * k);
        backend_.upload(dev, host.data(), host.size() * sizeof(int32_t));
        return static_cast<const int32_t*>(dev);
    }

    void mark_used(const std::string& name) {
        if (store_.find(name)) used_.insert(name);
    }
    bool has(const std::string& name) const { return store_.find(name) != nullptr; }

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

  private:
    const TensorStore& store_;
    Backend& backend_;
    std::set<std::string> used_;
    size_t bytes_ = 0;
};

#define DSV4_BIND(lhs, expr) DSV4_ASSIGN_OR_RETURN(lhs, expr)

Status bind_compressor(Binder& b, const std::string& p, int coff, int width, int m, int D,
                       CompressorWeights& c) {
    DSV4_BIND(c.wkv, b.matrix(p + "wkv", int64_t{coff} * width, D));
    DSV4_BIND(c.wgate, b.matrix(p + "wgate", int64_t{coff} * width, D));
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

Status bind_layer(Binder& b, const ModelConfig& c, int l, LayerWeights& w) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const LayerSpec& spec = c.layers[l];
    const int D = c.hidden_size, n = c.hc_mult, H = c.num_heads, hd = c.head_dim;
    const int64_t nD = int64_t{n} * D;
    DSV4_BIND(w.attn_norm, b.vec(p + "attn_norm.weight", {D}));
    DSV4_BIND(w.ffn_norm, b.vec(p + "ffn_norm.weight", {D}));
    DSV4_RETURN_IF_ERROR(bind_hc(b, p + "hc_attn_", c.hc_mix(), nD, 3, w.hc_attn));
    DSV4_RETURN_IF_ERROR(bind_hc(b, p + "hc_ffn_", c.hc_mix(), nD, 3, w.hc_ffn));

    const std::string a = p + "attn.";
    DSV4_BIND(w.wq_a, b.matrix(a + "wq_a", c.q_lora_rank, D));
    DSV4_BIND(w.q_norm, b.vec(a + "q_norm.weight", {c.q_lora_rank}));
    DSV4_BIND(w.wq_b, b.matrix(a + "wq_b", int64_t{H} * hd, c.q_lora_rank));
    DSV4_BIND(w.wkv, b.matrix(a + "wkv", hd, D));
    DSV4_BIND(w.kv_norm, b.vec(a + "kv_norm.weight", {hd}));
    DSV4_BIND(w.wo_a, b.matrix(a + "wo_a", int64_t{c.o_groups} * c.o_lora_rank,
                               int64_t{H} * hd / c.o_groups));
    DSV4_BIND(w.wo_b, b.matrix(a + "wo_b", D, int64_t{c.o_groups} * c.o_lora_rank));
    DSV4_BIND(w.attn_sink, b.vec(a + "attn_sink", {H}));
    if (spec.kind != LayerKind::kSliding) {
        DSV4_RETURN_IF_ERROR(bind_compressor(b, a + "compressor.", spec.coff(), hd,
                                             spec.compress_rate, D, w.compressor));
    }
    if (spec.kind == LayerKind::kCsa) {
        const int hi = c.index_head_dim, Hi = c.index_n_heads;
        DSV4_RETURN_IF_ERROR(bind_compressor(b, a + "indexer.compressor.", 2, hi,
                                             spec.compress_rate, D, w.indexer_compressor));
        DSV4_BIND(w.indexer_wq_b, b.matrix(a + "indexer.wq_b", int64_t{Hi} * hi, c.q_lora_rank));
        DSV4_BIND(w.indexer_weights_proj, b.matrix(a + "indexer.weights_proj", Hi, D));
    }

    const std::string f = p + "ffn.";
    const int E = c.n_routed_experts, I = c.moe_intermediate_size;
    DSV4_BIND(w.gate, b.matrix(f + "gate", E, D));
    if (spec.hash_routed) {
        DSV4_BIND(w.tid2eid,
                  b.hash_table(f + "gate.tid2eid", c.vocab_size, c.num_experts_per_tok, E));
        b.mark_used(f + "gate.bias");  // present in some exports; hash routing ignores it
    } else {
        DSV4_BIND(w.gate_bias, b.vec(f + "gate.bias", {E}));
    }
    if (c.n_shared_experts > 0) {
        DSV4_BIND(w.shared_w1, b.matrix(f + "shared_experts.w1", I, D));
        DSV4_BIND(w.shared_w2, b.matrix(f + "shared_experts.w2", D, I));
        DSV4_BIND(w.shared_w3, b.matrix(f + "shared_experts.w3", I, D));
    }
    w.w1.resize(E);
    w.w2.resize(E);
    w.w3.resize(E);
    for (int e = 0; e < E; ++e) {
        const std::string x = f + "experts." + std::to_string(e) + ".";
        DSV4_BIND(w.w1[e], b.matrix(x + "w1", I, D));
        DSV4_BIND(w.w2[e], b.matrix(x + "w2", D, I));
        DSV4_BIND(w.w3[e], b.matrix(x + "w3", I, D));
    }
    return Status::ok();
}

}  // namespace

Expected<ModelWeights> bind_weights(TensorStore& store, const ModelConfig& c, Backend& backend) {
    DSV4_RETURN_IF_ERROR(store.rename(release_tensor_name));
    Binder b(store, backend);
    ModelWeights w;
    const int D = c.hidden_size, n = c.hc_mult;
    DSV4_BIND(w.embed, b.matrix("embed", c.vocab_size, D));
    if (b.has("head.weight") || !c.tie_word_embeddings) {
        DSV4_BIND(w.head, b.matrix("head", c.vocab_size, D));
    } else {
        w.head = w.embed;
    }
    DSV4_BIND(w.norm, b.vec("norm.weight", {D}));
    DSV4_RETURN_IF_ERROR(bind_hc(b, "hc_head_", n, int64_t{n} * D, 1, w.hc_head));
    w.layers.resize(c.num_layers);
    for (int l = 0; l < c.num_layers; ++l) DSV4_RETURN_IF_ERROR(bind_layer(b, c, l, w.layers[l]));
    DSV4_RETURN_IF_ERROR(b.check_all_used());
    w.bytes = b.bytes();
    return w;
}

}  // namespace dsv4
