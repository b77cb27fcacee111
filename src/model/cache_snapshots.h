// Snapshots of sequences at block boundaries, so that another sequence can start from a prefix
// of one (the server's prefix cache, docs/engine.md "Prefix snapshots"). A slot's state at
// position p is its window ring, its compressor states and the compressed entries the first p
// tokens complete. Entries never change once written, so a later state of the same sequence
// still holds them; the ring and the compressor states move on with every token, so they are
// what a snapshot keeps. Positions are multiples of every layer's compress rate (block()): there
// the heavily compressed layers' open block is empty (its rows are all rewritten before the next
// entry pools them), so a snapshot holds the rings and the overlapping (CSA) compressors' states
// only. The buffers are allocated once, from a stated count, like the cache pool's slots.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/pool_index.h"
#include "base/status.h"
#include "model/cache_pool.h"
#include "model/config.h"
#include "ops/backend.h"

namespace dsv4 {

class SnapshotStore;

// One snapshot held by a session; released (and so reusable) when destroyed.
using SnapshotRef = PoolIndex<SnapshotStore>;

class SnapshotStore {
  public:
    // The positions snapshots may be taken at are multiples of this: the least common multiple
    // of the layers' compress rates (1 without compressed layers).
    static int64_t block(const ModelConfig& c);
    // `count` snapshots of `pool`'s slots; checks the bytes against what the backend has first.
    static Expected<std::unique_ptr<SnapshotStore>> create(const ModelConfig& c, Backend& backend,
                                                           const CachePool& pool, int count);
    ~SnapshotStore();
    SnapshotStore(const SnapshotStore&) = delete;
    SnapshotStore& operator=(const SnapshotStore&) = delete;

    // Copies slot `slot`'s rings and compressor states into a free snapshot (the slot's
    // position must be a multiple of block()); an error when every snapshot is held.
    Expected<SnapshotRef> save(int slot);
    // Makes slot `slot`'s rings and compressor states those of the snapshot (its entries must
    // already be the snapshot's sequence's: CachePool::copy_slot).
    void restore(const SnapshotRef& snap, int slot);
    int free() const;
    int count() const { return static_cast<int>(in_use_.size()); }
    size_t bytes() const { return bytes_; }

  private:
    friend class PoolIndex<SnapshotStore>;
    SnapshotStore(Backend& backend, const CachePool& pool) : backend_(backend), pool_(pool) {}
    void release(int index);
    // The arrays a snapshot copies: each a slot's `bytes` at `base + slot * bytes`.
    struct Part {
        char* base = nullptr;
        size_t bytes = 0;
    };
    void copy(int index, int slot, bool save);

    Backend& backend_;
    const CachePool& pool_;
    std::vector<Part> parts_;
    size_t snapshot_bytes_ = 0;
    char* buffer_ = nullptr;  // [count, snapshot_bytes_]
    size_t bytes_ = 0;
    std::vector<bool> in_use_;
};

}  // namespace dsv4
