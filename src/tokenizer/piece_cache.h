// Memo of piece -> ids for the BPE: natural text repeats a small set of words, and a lookup is
// much cheaper than re-running the merges. Direct-mapped (a piece can only live in the slot
// its hash picks; a newer piece evicts the older one), so it is bounded, needs no
// bookkeeping and keeps adapting to the current text.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::tok {

class PieceCache {
  public:
    static constexpr size_t kMaxPieceBytes = 128;

    explicit PieceCache(size_t slots = 1 << 16) { set_capacity(slots); }

    // Appends the cached ids of `piece` to `out`; false when it is not cached.
    bool lookup(std::string_view piece, std::vector<int32_t>& out) const {
        if (slots_.empty()) return false;
        const uint64_t h = hash(piece);
        const Slot& slot = slots_[h & mask_];
        std::lock_guard<std::mutex> lock(mutex_);
        if (slot.hash != h || slot.key != piece) return false;
        out.insert(out.end(), slot.ids.begin(), slot.ids.end());
        return true;
    }

    void insert(std::string_view piece, std::span<const int32_t> ids) {
        if (piece.size() > kMaxPieceBytes || slots_.empty()) return;
        const uint64_t h = hash(piece);
        Slot& slot = slots_[h & mask_];
        std::lock_guard<std::mutex> lock(mutex_);
        slot.hash = h;
        slot.key.assign(piece);
        slot.ids.assign(ids.begin(), ids.end());
    }

    // Rounds up to a power of two; 0 disables the cache.
    void set_capacity(size_t slots) {
        std::lock_guard<std::mutex> lock(mutex_);
        size_t n = 1;
        while (n < slots) n <<= 1;
        slots_.assign(slots == 0 ? 0 : n, Slot{});
        mask_ = slots == 0 ? 0 : n - 1;
    }

  private:
    struct Slot {
        uint64_t hash = 0;
        std::string key;
        std::vector<int32_t> ids;
    };

    // FNV-1a, finished with a multiply so the low bits (the slot index) mix well.
    static uint64_t hash(std::string_view s) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
        return (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull;
    }

    mutable std::mutex mutex_;
    std::vector<Slot> slots_;
    size_t mask_ = 0;
};

}  // namespace dsv4::tok
