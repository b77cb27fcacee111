#include "model/cache_pool.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

namespace dsv4 {

// The layers whose caches a pool holds: the decoder layers, then the MTP block's when used.
std::vector<LayerSpec> cached_layers(const ModelConfig& c, bool mtp) {
    std::vector<LayerSpec> layers = c.layers;
    if (mtp) layers.push_back(c.mtp_spec);
    return layers;
}

CacheFootprint cache_footprint(const ModelConfig& c, CacheType kv, CacheType index, bool mtp,
                               int ring_extra) {
    const auto kv_row =
        static_cast<double>(cache_row_bytes(kv_row_format(kv, c.rope_dim), c.head_dim));
    const auto key_row =
        static_cast<double>(cache_row_bytes(index_key_format(index), c.index_head_dim));
    CacheFootprint f;
    for (const LayerSpec& l : cached_layers(c, mtp)) {
        const double ring = kv_row * (c.sliding_window + ring_extra);
        f.fixed_bytes += ring;
        f.snapshot_bytes += ring;
        if (l.kind == LayerKind::kSliding) continue;
        // Compressor states stay float32 (they are reduced in f32 whatever the entry type).
        f.bytes_per_token += kv_row / l.compress_rate;
        const double state = 8.0 * l.coff() * l.compress_rate * l.coff() * c.head_dim;
        f.fixed_bytes += state;
        if (l.kind == LayerKind::kCsa) {
            f.bytes_per_token += key_row / l.compress_rate;
            const double keys_state = 8.0 * 2 * l.compress_rate * 2 * c.index_head_dim;
            f.fixed_bytes += keys_state;
            f.snapshot_bytes += state + keys_state;  // (HCA's open block is empty there)
        }
    }
    // Each slot's sampling generator and logits rules (CachePool::rules and what follows).
    f.fixed_bytes += 4 * sizeof(uint64_t) + sizeof(ops::SlotRules) +
                     CachePool::kRuleEntries * sizeof(ops::LogitsRuleEntry) + 4.0 * c.vocab_size;
    return f;
}

Expected<std::unique_ptr<CachePool>> CachePool::create(const ModelConfig& c, Backend& backend,
                                                       const CacheLayout& layout) {
    const CacheRowFormat kv_format = kv_row_format(layout.kv, c.rope_dim);
    const CacheRowFormat key_format = index_key_format(layout.index);
    if (layout.kv == CacheType::kFp4)
        return error("KV cache type fp4 is for indexer keys only (f32, bf16 or fp8)");
    if (std::string why = cache_row_unsupported(kv_format, c.head_dim); !why.empty())
        return error("KV cache type ", cache_type_name(layout.kv), ": ", why);
    if (std::string why = cache_row_unsupported(key_format, c.index_head_dim); !why.empty())
        return error("indexer cache type ", cache_type_name(layout.index), ": ", why);
    if (layout.max_seqs <= 0) return error("max_seqs must be > 0, got ", layout.max_seqs);
    if (layout.max_context <= 0) return error("max_context must be > 0, got ", layout.max_context);
    if (layout.ring_extra < 0) return error("ring_extra must be >= 0, got ", layout.ring_extra);
    if (c.max_position_embeddings > 0 && layout.max_context > c.max_position_embeddings)
        return error("max_context ", layout.max_context, " exceeds the model's ",
                     c.max_position_embeddings, " positions");
    const double need = cache_footprint(c, layout.kv, layout.index, layout.mtp, layout.ring_extra)
                            .per_sequence(layout.max_context) *
                        layout.max_seqs;
    const double avail = static_cast<double>(backend.memory_available());
    if (need > avail)
        return error("the KV cache for ", layout.max_seqs, " sequence(s) of ", layout.max_context,
                     " tokens needs ", need / (1 << 30), " GiB but ", avail / (1 << 30),
                     " GiB is free on ", backend.name(), " (lower --max-seqs or --max-context)");

    std::unique_ptr<CachePool> p(new CachePool(backend, layout));
    const int64_t S = layout.max_seqs;
    auto take = [&](int64_t elems, size_t elem_size) -> Expected<void*> {
        const size_t bytes = static_cast<size_t>(elems) * elem_size;
        DSV4_ASSIGN_OR_RETURN(void* m, backend.try_alloc(bytes));
        p->blocks_.push_back(m);
        p->bytes_ += bytes;
        return m;
    };
    auto make = [&](CompressorCache& s, int coff, int m, int width,
                    const CacheRowFormat& f) -> Status {
        s.state_size = int64_t{coff} * m * coff * width;
        s.n_entries = layout.max_context / m + 1;
        DSV4_ASSIGN_OR_RETURN(void* kv, take(S * s.state_size, sizeof(float)));
        DSV4_ASSIGN_OR_RETURN(void* gate, take(S * s.state_size, sizeof(float)));
        DSV4_ASSIGN_OR_RETURN(
            void* entries, take(S * s.n_entries, static_cast<size_t>(cache_row_bytes(f, width))));
        s.kv = static_cast<float*>(kv);
        s.gate = static_cast<float*>(gate);
        s.entry_bytes = static_cast<size_t>(cache_row_bytes(f, width));
        s.entries = static_cast<float*>(entries);
        s.m = m;
        s.coff = coff;
        return Status::ok();
    };
    const std::vector<LayerSpec> specs = cached_layers(c, layout.mtp);
    p->layers_.resize(specs.size());
    for (size_t l = 0; l < specs.size(); ++l) {
        const LayerSpec& spec = specs[l];
        LayerCache& lc = p->layers_[l];
        lc.kv_format = kv_format;
        lc.key_format = key_format;
        lc.ring_rows = c.sliding_window + layout.ring_extra;
        DSV4_ASSIGN_OR_RETURN(void* ring,
                              take(S * int64_t{lc.ring_rows},
                                   static_cast<size_t>(cache_row_bytes(kv_format, c.head_dim))));
        lc.ring = static_cast<float*>(ring);
        if (spec.kind != LayerKind::kSliding)
            DSV4_RETURN_IF_ERROR(
                make(lc.main, spec.coff(), spec.compress_rate, c.head_dim, kv_format));
        if (spec.kind == LayerKind::kCsa)
            DSV4_RETURN_IF_ERROR(
                make(lc.indexer, 2, spec.compress_rate, c.index_head_dim, key_format));
    }
    DSV4_ASSIGN_OR_RETURN(void* rng, take(S * 4, sizeof(uint64_t)));
    p->rng_ = static_cast<uint64_t*>(rng);
    DSV4_ASSIGN_OR_RETURN(void* rules, take(S, sizeof(ops::SlotRules)));
    p->rules_ = static_cast<ops::SlotRules*>(rules);
    DSV4_ASSIGN_OR_RETURN(void* entries, take(S * kRuleEntries, sizeof(ops::LogitsRuleEntry)));
    p->entries_ = static_cast<ops::LogitsRuleEntry*>(entries);
    DSV4_ASSIGN_OR_RETURN(void* counts, take(S * int64_t{c.vocab_size}, sizeof(uint32_t)));
    p->counts_ = static_cast<uint32_t*>(counts);
    p->vocab_ = c.vocab_size;
    const std::vector<ops::SlotRules> off(S);
    backend.upload(p->rules_, off.data(), S * sizeof(ops::SlotRules));
    p->in_use_.assign(S, false);
    p->head_dim_ = c.head_dim;
    p->ring_rows_ = c.sliding_window + layout.ring_extra;
    return p;
}

CachePool::~CachePool() {
    for (void* b : blocks_) backend_.free(b);
}

Expected<CacheSlot> CachePool::acquire() {
    for (int s = 0; s < layout_.max_seqs; ++s) {
        if (in_use_[s]) continue;
        in_use_[s] = true;
        reset(s);
        return CacheSlot(this, s);
    }
    return error("all ", layout_.max_seqs, " sequence slots of the KV cache are in use");
}

void CachePool::release(int slot) {
    DSV4_ASSERT(slot >= 0 && slot < layout_.max_seqs && in_use_[slot], "release of slot ", slot);
    in_use_[slot] = false;
}

int CachePool::free_slots() const {
    int n = 0;
    for (bool u : in_use_) n += !u;
    return n;
}

void CachePool::copy_slot(int src, int dst, int64_t positions) {
    DSV4_ASSERT(src >= 0 && src < layout_.max_seqs && dst >= 0 && dst < layout_.max_seqs, src,
                " -> ", dst);
    if (src == dst) return;
    const size_t ring_row = static_cast<size_t>(cache_row_bytes(layers_[0].kv_format, head_dim_));
    // `bytes` of the slot's part of an array of `stride` bytes a slot
    auto slice = [&](void* base, size_t stride, size_t bytes) {
        char* b = static_cast<char*>(base);
        if (bytes > 0) backend_.copy(b + dst * stride, b + src * stride, bytes);
    };
    auto whole = [&](void* base, size_t stride) { slice(base, stride, stride); };
    // (with a position limit the snapshot that follows brings the rings and the states)
    const bool states = positions < 0;
    for (auto& l : layers_) {
        if (states) whole(l.ring, ring_row * ring_rows_);
        for (CompressorCache* s : {&l.main, &l.indexer}) {
            if (s->gate == nullptr) continue;
            if (states) {
                whole(s->kv, s->state_size * sizeof(float));
                whole(s->gate, s->state_size * sizeof(float));
            }
            const int64_t n =
                positions < 0 ? s->n_entries : std::min(s->n_entries, positions / s->m);
            slice(s->entries, static_cast<size_t>(s->n_entries) * s->entry_bytes,
                  static_cast<size_t>(n) * s->entry_bytes);
        }
    }
    whole(rng_, 4 * sizeof(uint64_t));
    whole(counts_, vocab_ * sizeof(uint32_t));
}

void CachePool::set_rules(int slot, const ops::SlotRules& rules,
                          std::span<const ops::LogitsRuleEntry> entries,
                          std::span<const int32_t> seen) {
    DSV4_ASSERT(slot >= 0 && slot < layout_.max_seqs, "set_rules slot ", slot);
    DSV4_ASSERT(rules.n_entries == static_cast<int32_t>(entries.size()) &&
                    entries.size() <= static_cast<size_t>(kRuleEntries),
                "set_rules: ", entries.size(), " entries");
    backend_.upload(rules_ + slot, &rules, sizeof(rules));
    if (!entries.empty())
        backend_.upload(entries_ + int64_t{slot} * kRuleEntries, entries.data(),
                        entries.size() * sizeof(ops::LogitsRuleEntry));
    if (!rules.on || !rules.count) return;
    uint32_t* table = counts_ + slot * vocab_;
    if (seen.empty()) {
        backend_.fill(reinterpret_cast<float*>(table), 0.0f, vocab_);  // (0.0f: the zero word)
        return;
    }
    std::vector<uint32_t> words(static_cast<size_t>(vocab_), 0);
    for (const int32_t t : seen) {
        DSV4_ASSERT(t >= 0 && t < vocab_, "set_rules: token ", t, " outside the vocabulary");
        words[static_cast<size_t>(t)] = ops::kTokenSeen;
    }
    backend_.upload(table, words.data(), words.size() * sizeof(uint32_t));
}

void CachePool::reset(int slot) {
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (auto& l : layers_) {
        for (CompressorCache* s : {&l.main, &l.indexer}) {
            if (s->gate == nullptr) continue;
            backend_.fill(s->kv + slot * s->state_size, 0.0f, s->state_size);
            backend_.fill(s->gate + slot * s->state_size, neg_inf, s->state_size);
        }
    }
}

}  // namespace dsv4
