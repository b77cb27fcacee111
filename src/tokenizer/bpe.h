// The BPE model of a byte-level tokenizer.json: vocabulary, ranked merges, and the merge loop
// (lowest rank first, leftmost among equal ranks: HF's order).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dsv4/status.h"
#include "tokenizer/piece_cache.h"

namespace dsv4::tok {

// (left id, right id) -> (rank, merged id), open addressing (the merge loop's hot lookup).
class PairMap {
  public:
    struct Entry {
        uint64_t key;
        int32_t rank;
        int32_t id;
    };

    void reserve(size_t count);
    // A pair listed twice keeps the later rank, like HF (its map is collected in order).
    void insert(int32_t left, int32_t right, int32_t rank, int32_t id);
    const Entry* find(int32_t left, int32_t right) const {
        const uint64_t key = pack(left, right);
        for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
            const Entry& e = slots_[i];
            if (e.key == key) return &e;
            if (e.key == kEmpty) return nullptr;
        }
    }
    size_t size() const { return size_; }

  private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    static uint64_t pack(int32_t a, int32_t b) {
        return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b);
    }
    size_t slot_of(uint64_t key) const {
        return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
    }
    std::vector<Entry> slots_;
    size_t mask_ = 0;
    int shift_ = 64;
    size_t size_ = 0;
};

class Bpe {
  public:
    struct Options {
        bool ignore_merges = false;  // a piece that is itself a vocab token is taken whole
        size_t cache_capacity = 1 << 16;
    };

    // vocab: token (byte-level alphabet) -> id; merges: token pairs, highest priority first.
    // Errors name the offending entry: a merge part or result missing from the vocab, a byte
    // with no token, duplicate ids.
    static Expected<std::unique_ptr<Bpe>> build(
        std::vector<std::pair<std::string, int32_t>> vocab,
        const std::vector<std::pair<std::string, std::string>>& merges, const Options& options);

    // Appends the ids of one pre-tokenized piece (raw bytes, any content).
    void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

    // Merges a sequence of ids in place; the two strategies give identical results (the test
    // checks it): a rescan for short words and HF's priority queue for long ones.
    void merge_short(std::vector<int32_t>& ids) const;
    void merge_long(std::vector<int32_t>& ids) const;

    std::optional<int32_t> id_of(std::string_view token) const;
    // nullptr when no vocab entry has this id.
    const std::string* token_of(int32_t id) const;
    int32_t byte_id(uint8_t b) const { return byte_ids_[b]; }
    int32_t max_id() const { return static_cast<int32_t>(tokens_.size()) - 1; }
    size_t vocab_size() const { return vocab_.size(); }
    size_t merge_count() const { return merges_.size(); }

  private:
    Bpe() = default;

    std::unordered_map<std::string, int32_t> vocab_;
    std::vector<std::string> tokens_;  // by id
    std::vector<bool> has_token_;      // ids may have gaps
    std::array<int32_t, 256> byte_ids_{};
    PairMap merges_;
    Options options_;
    mutable PieceCache cache_;
};

}  // namespace dsv4::tok
