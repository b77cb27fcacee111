#include "tokenizer/bpe.h"

#include <bit>
#include <climits>
#include <queue>

#include "tokenizer/byte_level.h"

namespace dsv4::tok {

namespace {

// Words up to this many symbols are merged by rescanning (no heap, no linked list); longer
// ones (long runs of letters, digits are split by then) by the priority queue.
constexpr size_t kShortWord = 48;

std::string printable(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        if (static_cast<unsigned char>(c) < 0x20) {
            out += str_cat("\\x", std::hex, static_cast<int>(c));
        } else {
            out += c;
        }
    }
    return out + "\"";
}

}  // namespace

void PairMap::reserve(size_t count) {
    size_t capacity = std::bit_ceil(std::max<size_t>(16, count * 2));
    slots_.assign(capacity, Entry{kEmpty, 0, 0});
    mask_ = capacity - 1;
    shift_ = 64 - std::countr_zero(capacity);
    size_ = 0;
}

void PairMap::insert(int32_t left, int32_t right, int32_t rank, int32_t id) {
    if ((size_ + 1) * 2 > slots_.size()) {
        std::vector<Entry> old = std::move(slots_);
        reserve(std::max<size_t>(16, size_ * 2));
        for (const Entry& e : old) {
            if (e.key != kEmpty) {
                insert(static_cast<int32_t>(e.key >> 32), static_cast<int32_t>(e.key & 0xFFFFFFFF),
                       e.rank, e.id);
            }
        }
    }
    const uint64_t key = pack(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
        Entry& e = slots_[i];
        if (e.key == key) {
            e.rank = rank;
            e.id = id;
            return;
        }
        if (e.key == kEmpty) {
            e = Entry{key, rank, id};
            ++size_;
            return;
        }
    }
}

Expected<std::unique_ptr<Bpe>> Bpe::build(
    std::vector<std::pair<std::string, int32_t>> vocab,
    const std::vector<std::pair<std::string, std::string>>& merges, const Options& options) {
    std::unique_ptr<Bpe> bpe(new Bpe());
    bpe->options_ = options;
    bpe->cache_.set_capacity(options.cache_capacity);
    int32_t max_id = -1;
    for (const auto& [token, id] : vocab) {
        if (id < 0) return error("vocab entry ", printable(token), " has negative id ", id);
        max_id = std::max(max_id, id);
    }
    bpe->tokens_.resize(static_cast<size_t>(max_id + 1));
    bpe->has_token_.assign(static_cast<size_t>(max_id + 1), false);
    bpe->vocab_.reserve(vocab.size());
    for (auto& [token, id] : vocab) {
        if (bpe->has_token_[id]) {
            return error("vocab ids ", id, " repeat (", printable(bpe->tokens_[id]), " and ",
                         printable(token), ")");
        }
        bpe->has_token_[id] = true;
        bpe->tokens_[id] = token;
        bpe->vocab_.emplace(std::move(token), id);
    }
    const ByteLevel& bytes = ByteLevel::get();
    for (int b = 0; b < 256; ++b) {
        auto it = bpe->vocab_.find(bytes.char_of(static_cast<uint8_t>(b)));
        if (it == bpe->vocab_.end()) {
            return error("the vocab has no token for byte 0x", std::hex, b,
                         " (a byte-level BPE needs all 256)");
        }
        bpe->byte_ids_[b] = it->second;
    }
    bpe->merges_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& [left, right] = merges[rank];
        auto l = bpe->vocab_.find(left);
        auto r = bpe->vocab_.find(right);
        auto m = bpe->vocab_.find(left + right);
        if (l == bpe->vocab_.end() || r == bpe->vocab_.end() || m == bpe->vocab_.end()) {
            const std::string& missing = l == bpe->vocab_.end()   ? left
                                         : r == bpe->vocab_.end() ? right
                                                                  : left + right;
            return error("merge #", rank, " (", printable(left), " ", printable(right),
                         "): ", printable(missing), " is not in the vocab");
        }
        bpe->merges_.insert(l->second, r->second, static_cast<int32_t>(rank), m->second);
    }
    return bpe;
}

void Bpe::merge_short(std::vector<int32_t>& ids) const {
    if (ids.size() < 2) return;
    // ranks[i] / merged[i]: the merge of the pair (ids[i], ids[i + 1]), INT_MAX when none.
    thread_local std::vector<int32_t> ranks;
    thread_local std::vector<int32_t> merged;
    ranks.resize(ids.size() - 1);
    merged.resize(ids.size() - 1);
    auto refresh = [&](size_t i) {
        const PairMap::Entry* e = merges_.find(ids[i], ids[i + 1]);
        ranks[i] = e != nullptr ? e->rank : INT_MAX;
        merged[i] = e != nullptr ? e->id : -1;
    };
    for (size_t i = 0; i + 1 < ids.size(); ++i) refresh(i);
    while (ids.size() > 1) {
        size_t best = 0;
        for (size_t i = 1; i < ranks.size(); ++i) {
            if (ranks[i] < ranks[best]) best = i;
        }
        if (ranks[best] == INT_MAX) break;
        ids[best] = merged[best];
        ids.erase(ids.begin() + static_cast<ptrdiff_t>(best) + 1);
        ranks.erase(ranks.begin() + static_cast<ptrdiff_t>(best));
        merged.erase(merged.begin() + static_cast<ptrdiff_t>(best));
        if (best + 1 < ids.size()) refresh(best);
        if (best > 0) refresh(best - 1);
    }
}

void Bpe::merge_long(std::vector<int32_t>& ids) const {
    struct Symbol {
        int32_t id;
        int32_t prev;
        int32_t next;
        bool alive;
    };
    struct Candidate {
        int32_t rank;
        int32_t pos;
        int32_t merged;
        // The queue's top is the lowest rank, then the leftmost position.
        bool operator<(const Candidate& o) const {
            return rank != o.rank ? rank > o.rank : pos > o.pos;
        }
    };
    const auto n = static_cast<int32_t>(ids.size());
    std::vector<Symbol> symbols(ids.size());
    for (int32_t i = 0; i < n; ++i)
        symbols[i] = Symbol{ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
    std::vector<Candidate> storage;
    storage.reserve(ids.size());
    std::priority_queue<Candidate> queue(std::less<Candidate>(), std::move(storage));
    auto push = [&](int32_t pos) {
        const Symbol& s = symbols[pos];
        if (s.next < 0) return;
        if (const PairMap::Entry* e = merges_.find(s.id, symbols[s.next].id)) {
            queue.push(Candidate{e->rank, pos, e->id});
        }
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!queue.empty()) {
        const Candidate top = queue.top();
        queue.pop();
        Symbol& left = symbols[top.pos];
        if (!left.alive || left.next < 0) continue;
        Symbol& right = symbols[left.next];
        // Entries go stale when a neighbour merged since they were queued.
        const PairMap::Entry* e = merges_.find(left.id, right.id);
        if (e == nullptr || e->id != top.merged) continue;
        left.id = top.merged;
        right.alive = false;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = top.pos;
        if (left.prev >= 0) push(left.prev);
        push(top.pos);
    }
    ids.clear();
    for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

void Bpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (piece.size() == 1) {
        out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
        return;
    }
    const bool cacheable = piece.size() <= PieceCache::kMaxPieceBytes;
    if (cacheable && cache_.lookup(piece, out)) return;
    if (options_.ignore_merges) {
        std::string token;
        const ByteLevel& bytes = ByteLevel::get();
        for (char c : piece) token += bytes.char_of(static_cast<uint8_t>(c));
        auto it = vocab_.find(token);
        if (it != vocab_.end()) {
            out.push_back(it->second);
            if (cacheable) cache_.insert(piece, std::span<const int32_t>(&it->second, 1));
            return;
        }
    }
    thread_local std::vector<int32_t> ids;
    ids.clear();
    for (char c : piece) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    if (ids.size() <= kShortWord) {
        merge_short(ids);
    } else {
        merge_long(ids);
    }
    if (cacheable) cache_.insert(piece, ids);
    out.insert(out.end(), ids.begin(), ids.end());
}

std::optional<int32_t> Bpe::id_of(std::string_view token) const {
    auto it = vocab_.find(std::string(token));
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

const std::string* Bpe::token_of(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !has_token_[id]) return nullptr;
    return &tokens_[id];
}

}  // namespace dsv4::tok
