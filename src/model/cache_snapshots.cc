#include "model/cache_snapshots.h"

#include <numeric>

#include "base/check.h"

namespace dsv4 {

namespace {

// Whether a snapshot keeps a compressor's state: only the overlapping ones (CSA, coff 2) carry
// state across a block boundary (the previous block's rows).
bool kept_across_blocks(int coff) {
    return coff == 2;
}

}  // namespace

int64_t SnapshotStore::block(const ModelConfig& c) {
    int64_t b = 1;
    for (const LayerSpec& l : c.layers)
        if (l.kind != LayerKind::kSliding) b = std::lcm(b, int64_t{l.compress_rate});
    if (c.num_mtp_layers > 0 && c.mtp_spec.kind != LayerKind::kSliding)
        b = std::lcm(b, int64_t{c.mtp_spec.compress_rate});
    return b;
}

Expected<std::unique_ptr<SnapshotStore>> SnapshotStore::create(const ModelConfig& c,
                                                               Backend& backend,
                                                               const CachePool& pool, int count) {
    if (count <= 0) return error("snapshots: the count must be > 0, got ", count);
    std::unique_ptr<SnapshotStore> s(new SnapshotStore(backend, pool));
    const size_t kv_row = static_cast<size_t>(cache_row_bytes(pool.layer(0).kv_format, c.head_dim));
    for (int l = 0; l < pool.num_layers(); ++l) {
        const LayerCache& lc = pool.layer(l);
        s->parts_.push_back({reinterpret_cast<char*>(lc.ring), kv_row * lc.ring_rows});
        for (const CompressorCache* cc : {&lc.main, &lc.indexer}) {
            if (cc->gate == nullptr || !kept_across_blocks(cc->coff)) continue;
            const size_t state = static_cast<size_t>(cc->state_size) * sizeof(float);
            s->parts_.push_back({reinterpret_cast<char*>(cc->kv), state});
            s->parts_.push_back({reinterpret_cast<char*>(cc->gate), state});
        }
    }
    for (const Part& p : s->parts_) s->snapshot_bytes_ += p.bytes;
    const CacheLayout& lo = pool.layout();
    const double counted =
        cache_footprint(c, lo.kv, lo.index, lo.mtp, lo.ring_extra).snapshot_bytes;
    DSV4_ASSERT(static_cast<double>(s->snapshot_bytes_) == counted,
                "snapshot sizes disagree: ", s->snapshot_bytes_, " vs ", counted);
    const double need = static_cast<double>(s->snapshot_bytes_) * count;
    const double avail = static_cast<double>(backend.memory_available());
    if (need > avail)
        return error(count, " prefix snapshots need ", need / (1 << 30), " GiB (",
                     s->snapshot_bytes_ / double(1 << 20), " MiB each) but ", avail / (1 << 30),
                     " GiB is free on ", backend.name(), " (fewer snapshots)");
    DSV4_ASSIGN_OR_RETURN(void* buffer, backend.try_alloc(s->snapshot_bytes_ * count));
    s->buffer_ = static_cast<char*>(buffer);
    s->bytes_ = s->snapshot_bytes_ * count;
    s->in_use_.assign(static_cast<size_t>(count), false);
    return s;
}

SnapshotStore::~SnapshotStore() {
    if (buffer_ != nullptr) backend_.free(buffer_);
}

void SnapshotStore::copy(int index, int slot, bool save) {
    char* at = buffer_ + static_cast<size_t>(index) * snapshot_bytes_;
    for (const Part& p : parts_) {
        char* in_slot = p.base + static_cast<size_t>(slot) * p.bytes;
        if (save)
            backend_.copy(at, in_slot, p.bytes);
        else
            backend_.copy(in_slot, at, p.bytes);
        at += p.bytes;
    }
}

Expected<SnapshotRef> SnapshotStore::save(int slot) {
    DSV4_ASSERT(slot >= 0 && slot < pool_.layout().max_seqs, "snapshot of slot ", slot);
    for (size_t i = 0; i < in_use_.size(); ++i) {
        if (in_use_[i]) continue;
        in_use_[i] = true;
        copy(static_cast<int>(i), slot, true);
        return SnapshotRef(this, static_cast<int>(i));
    }
    return error("all ", in_use_.size(), " prefix snapshots are in use");
}

void SnapshotStore::restore(const SnapshotRef& snap, int slot) {
    DSV4_ASSERT(slot >= 0 && slot < pool_.layout().max_seqs && snap.index() >= 0 &&
                    snap.index() < count() && in_use_[static_cast<size_t>(snap.index())],
                "restore of snapshot ", snap.index(), " into slot ", slot);
    copy(snap.index(), slot, false);
}

int SnapshotStore::free() const {
    int n = 0;
    for (bool u : in_use_) n += !u;
    return n;
}

void SnapshotStore::release(int index) {
    DSV4_ASSERT(index >= 0 && index < count() && in_use_[static_cast<size_t>(index)],
                "release of snapshot ", index);
    in_use_[static_cast<size_t>(index)] = false;
}

}  // namespace dsv4
