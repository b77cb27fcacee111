// The decode state of every sequence slot, allocated once at load from a stated budget: for
// each layer the sliding-window rings, and for compressed layers the compressor states and
// the compressed-KV (and indexer-key) entries, each as one [S, ...] array in backend memory so
// the ops find a slot's part from the slot index in the step descriptor. Sessions and requests
// hold a slot through CacheSlot (RAII); a full pool is an error for the caller to report or
// wait on, never an abort. Rings and entries are stored in the layout's row formats
// (formats/cache_row.h, docs/kv-cache.md); compressor states stay float32.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/pool_index.h"
#include "base/status.h"
#include "formats/cache_row.h"
#include "model/config.h"
#include "ops/backend.h"
#include "ops/sample.h"

namespace dsv4 {

struct CacheLayout {
    int max_seqs = 1;                   // slots
    int64_t max_context = 0;            // tokens per slot
    CacheType kv = CacheType::kF32;     // window rings and compressed K=V: f32, bf16 or fp8
    CacheType index = CacheType::kF32;  // indexer keys: f32, bf16, fp8 or fp4
    bool mtp = false;                   // also the MTP block's caches (layer index num_layers)
    // Ring rows beyond the window: the speculative drafts a step may feed per row, less one
    // (ops::AttentionArgs::ring_rows).
    int ring_extra = 0;
};

struct CompressorCache {
    float* kv = nullptr;       // [S, coff*m, coff*width]
    float* gate = nullptr;     // [S, coff*m, coff*width], -inf = empty
    float* entries = nullptr;  // [S, n_entries, width] in the layer's row format
    int64_t state_size = 0;    // elements of one slot's kv (and gate)
    int64_t n_entries = 0;     // entries per slot
    size_t entry_bytes = 0;    // bytes of one entry in its row format
    int m = 0, coff = 1;       // the layer's compress rate and overlap (ops/compressor.h)
};

// Rows of a type other than f32 are addressed through the float* fields by their first byte
// (see ops::AttentionArgs).
struct LayerCache {
    float* ring = nullptr;    // [S, ring_rows, hd], slot row = pos % ring_rows, in kv_format
    int ring_rows = 0;        // the window + CacheLayout::ring_extra
    CompressorCache main;     // CSA / HCA: entries in kv_format
    CompressorCache indexer;  // CSA: entries are the indexer keys [S, n_entries, hi] in key_format
    CacheRowFormat kv_format;
    CacheRowFormat key_format;
};

// Cache sizes per sequence for the row types: growth per token and the fixed part.
struct CacheFootprint {
    double bytes_per_token = 0;
    double fixed_bytes = 0;
    // One prefix snapshot (model/cache_snapshots.h): the rings and the CSA compressor states.
    double snapshot_bytes = 0;
    double per_sequence(int64_t context) const { return fixed_bytes + bytes_per_token * context; }
};
CacheFootprint cache_footprint(const ModelConfig& cfg, CacheType kv = CacheType::kF32,
                               CacheType index = CacheType::kF32, bool mtp = false,
                               int ring_extra = 0);

class CachePool;

// One slot held by a session or request; released (and so reusable) when destroyed.
using CacheSlot = PoolIndex<CachePool>;

class CachePool {
  public:
    // Checks the bytes against what the backend has before taking any.
    static Expected<std::unique_ptr<CachePool>> create(const ModelConfig& cfg, Backend& backend,
                                                       const CacheLayout& layout);
    ~CachePool();
    CachePool(const CachePool&) = delete;
    CachePool& operator=(const CachePool&) = delete;

    // A free slot, emptied for a new sequence; an error when every slot is held.
    Expected<CacheSlot> acquire();
    // Empties a held slot (compressor gates back to -inf) for a new sequence.
    void reset(int slot);
    // Makes slot dst hold what slot src holds (rings, compressor states, entries, generator,
    // token table; not the logits rules):
    // a copy of a sequence's cache, e.g. to start several sequences from one prefilled prefix.
    // `positions` >= 0 (a multiple of every compress rate): only the compressed entries the
    // first `positions` tokens complete, the generator and the token table; a snapshot of src at
    // that position brings the rings and the states (model/cache_snapshots.h).
    void copy_slot(int src, int dst, int64_t positions = -1);
    int free_slots() const;
    const CacheLayout& layout() const { return layout_; }
    const LayerCache& layer(int l) const { return layers_[l]; }  // l == num_layers: MTP
    // The layers with caches, the MTP block's included.
    int num_layers() const { return static_cast<int>(layers_.size()); }
    uint64_t* rng() const { return rng_; }  // [S, 4] sampling generator per slot
    // The logits rules of each slot's request (ops::LogitsRulesArgs).
    const ops::SlotRules* rules() const { return rules_; }                 // [S]
    const ops::LogitsRuleEntry* rule_entries() const { return entries_; }  // [S, kRuleEntries]
    uint32_t* token_counts() const { return counts_; }                     // [S, V]
    static constexpr int kRuleEntries = kMaxLogitBias + kMaxMinTokensStops + 1;  // + EOS
    // Writes a slot's rules (entries sorted by token, distinct, at most kRuleEntries) and, when
    // they count, sets its token table: the tokens of `seen` (ids in the vocabulary: a
    // session's earlier tokens) seen, every count zero. rules.on = 0 turns them off.
    void set_rules(int slot, const ops::SlotRules& rules,
                   std::span<const ops::LogitsRuleEntry> entries,
                   std::span<const int32_t> seen = {});
    size_t bytes() const { return bytes_; }

  private:
    friend class PoolIndex<CachePool>;
    CachePool(Backend& backend, const CacheLayout& layout) : backend_(backend), layout_(layout) {}
    void release(int slot);

    Backend& backend_;
    CacheLayout layout_;
    std::vector<LayerCache> layers_;
    std::vector<void*> blocks_;
    std::vector<bool> in_use_;
    uint64_t* rng_ = nullptr;
    ops::SlotRules* rules_ = nullptr;
    ops::LogitsRuleEntry* entries_ = nullptr;
    uint32_t* counts_ = nullptr;
    int64_t vocab_ = 0;
    size_t bytes_ = 0;
    int head_dim_ = 0, ring_rows_ = 0;  // a slot's ring: ring_rows_ rows of head_dim_ values
};

}  // namespace dsv4
