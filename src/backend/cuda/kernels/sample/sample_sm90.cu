// Sampling (sample.h), in the reference's steps (backend/cpu/ref/sample.cc): a row with a
// non-finite logit gets -1 and draws nothing; greedy is the lowest id of the maximum (exact).
// Otherwise the candidates are ordered by logit descending, ties to the lower id, as the 64-bit
// key (order_key(logit) << 32) | ~id, and the row takes one of two paths:
//
//  - keep <= kSampleMaxTopK: the top `keep` are found (with the step scratch, from the wide
//    path's bin counts: the bins above the keep-th's whole, the top of its bin by the member
//    rounds, one pass over the row; else, or when that bin holds more than kListCap, with the
//    block top-k radix select over the row), sorted in shared memory, and one thread does the
//    reference's sequential double arithmetic (probabilities exp((l - max) / T), the top-p
//    cut, the draft test, the draw and the walk).
//  - larger keep (top_k 0 or > 1024, up to V), the wide path: no sort. Every "smallest prefix
//    of the sorted candidates whose mass (or count) satisfies P" question (the top-k cut, the
//    top-p cut, the draw's walk) is a select over the 64-bit keys: first over a histogram of
//    the candidates' count and probability mass in 4096 bins (the key's top 12 bits: sign,
//    exponent and 3 mantissa bits of the logit), scanned from the top bin by the whole block,
//    then over the chosen bin's members, 8 bits of the key a round. Masses are summed exactly
//    in 128-bit fixed point (2^-96 units; every probability is <= 1 and truncated by < 2^-96),
//    so they are independent of the order and deterministic, and differ from the reference's
//    sequential double sums only by the reference's own rounding.
//    The histogram costs an exp per logit: with the step scratch (rows <= kHistRows) many
//    blocks a row build it (sample_hist_kernel, global atomics), else the row's block does.
//    A bin's members (usually a few hundred, near the top of the distribution where the cuts
//    and draws fall) are listed in shared memory with their probabilities, so the rounds read
//    no logits; a bin of more than kListCap members (a flat row) is read from the row until a
//    round narrows it to kListCap members, which are then listed.
//    Session 46 measured the single-block radix select this replaces at 1.4 ms a step for
//    temperature alone and 3.1 ms with top-p on an H100 (an exp and a histogram add per logit,
//    per 8-bit round, on one SM).
//
// The first pass (the finite check and the best candidate) reads the whole row: one block of
// 1024 threads takes ~16.6 us for V = 129280 on an H100, a token's whole sampling time when it is
// greedy. With a scratch, rows of kSampleSplitMinV logits or more are first scanned in slices by
// many blocks (sample_scan_kernel), and the row's block combines their (count, best) pairs: the
// same result, since the best key is a maximum and the count a sum.
//
// Only exp (CUDA's double exp is within 1 ulp, glibc's is correctly rounded in practice) and,
// on the wide path, the reference's summation rounding (~n * 2^-53 relative) separate the two:
// a different id needs the uniform draw within that distance of a cumulative boundary.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
#include "backend/cuda/common/per_device.h"
#include "backend/cuda/kernels/common/block_sm90.cuh"
#include "backend/cuda/kernels/sample/sample.h"
#include "base/check.h"
#include "base/xoshiro.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kScanThreads = 256;
constexpr int kMaxSlices = 64;  // slices a row in the split first pass
constexpr unsigned kFull = 0xffffffffu;
// The wide path's first level: the candidates' histogram over the key's top kBinBits bits.
constexpr int kBinBits = 12, kBins = 1 << kBinBits, kBinShift = 64 - kBinBits;
// Members of one bin a wide row's block lists in shared memory (more: the rounds read the row
// until one leaves at most this many).
constexpr int kListCap = 7168;
// Rows whose histograms the split pass builds (sample_hist_kernel); larger steps build each
// row's in its own block (their rows already fill the GPU).
constexpr int kHistRows = 64;

// Descending by logit, ties to the lower id: (order key << 32) | ~id, larger first.
using dev::cand_key;
using dev::key_id;

// Unsigned 128-bit fixed point in units of 2^-96: holds sums of up to 2^32 probabilities <= 1.
struct Fx {
    unsigned long long lo = 0, hi = 0;
};
__device__ __forceinline__ Fx fx_add(Fx a, Fx b) {
    Fx r;
    r.lo = a.lo + b.lo;
    r.hi = a.hi + b.hi + (r.lo < a.lo ? 1ull : 0ull);
    return r;
}
__device__ __forceinline__ Fx fx_sub(Fx a, Fx b) {
    Fx r;
    r.lo = a.lo - b.lo;
    r.hi = a.hi - b.hi - (a.lo < b.lo ? 1ull : 0ull);
    return r;
}
__device__ __forceinline__ bool fx_ge(Fx a, Fx b) {
    return a.hi != b.hi ? a.hi > b.hi : a.lo >= b.lo;
}
// p in [0, 1], truncated to a multiple of 2^-96 (subnormals become 0).
__device__ __forceinline__ Fx fx_of(double p) {
    const unsigned long long bits = static_cast<unsigned long long>(__double_as_longlong(p));
    const int be = static_cast<int>((bits >> 52) & 0x7ff);
    Fx r;
    if (be == 0) return r;
    const unsigned long long m = (bits & ((1ull << 52) - 1)) | (1ull << 52);
    const int s = be - 1023 + 44;  // p * 2^96 = m * 2^(e - 52 + 96), e <= 0
    if (s >= 0) {
        r.lo = m << s;
        r.hi = s > 11 ? m >> (64 - s) : 0ull;
    } else {
        r.lo = -s < 64 ? m >> -s : 0ull;
    }
    return r;
}
__device__ __forceinline__ double fx_to_double(Fx a) {
    return __dadd_rn(__dmul_rn(__ull2double_rn(a.hi), 0x1p-32),
                     __dmul_rn(__ull2double_rn(a.lo), 0x1p-96));
}

struct Shared {
    int red[32];
    uint64_t cand[kSampleMaxTopK];
    double probs[kSampleMaxTopK];
    unsigned long long best;
    // Wide path: one 256-bin histogram of (mass, count) for the member rounds, the bin scan's
    // warp totals, and broadcasts.
    unsigned long long hlo[256], hhi[256];
    unsigned hcnt[256];
    unsigned long long wlo[32], whi[32];
    unsigned wn[32];
    int hit;       // the bin scan's first position whose prefix satisfies the predicate
    int list_bin;  // the bin whose members the list holds (-1 none)
    unsigned list_n;
    unsigned n_cand;  // narrow_candidates: the keys in cand so far
    int digit;
    unsigned digit_n;  // a round's members under the chosen digit
    int flag;
    double u;
    unsigned long long sum_lo, sum_hi;  // the walk's set mass
    // The last select's result (wide_select): the key, the prefix's mass and count through it,
    // its bin and the mass and count of the bins above (Fx words: no constructors in shared
    // memory).
    unsigned long long found_key, found_mlo, found_mhi, found_alo, found_ahi;
    unsigned found_n, found_above_n;
    int found_bin;
    unsigned long long acc_lo, acc_hi;  // a select's rounds: the mass and count above the prefix
    unsigned acc_n;
    __device__ Fx found_m() const { return Fx{found_mlo, found_mhi}; }
    __device__ Fx found_above() const { return Fx{found_alo, found_ahi}; }
};

// Dynamic shared memory of a wide row's block: its candidates' bin histogram (the key's top
// kBinBits bits) and the members of one bin with their probabilities.
// The candidate set of the selects: keys >= cmin (cmin's bin cb counted by its part at or
// above cmin, mass cb_m and count cb_n; bins below cb out), without the key `skip` when
// has_skip (its bin sb, its mass s_m). Thread 0 writes it between barriers (kept here rather
// than in registers: the kernel's 1024 threads have 64 registers each).
struct WideSet {
    unsigned long long cmin, skip, cb_mlo, cb_mhi, s_mlo, s_mhi;
    unsigned cb_n;
    int cb, sb, has_skip;
    __device__ bool in(uint64_t c) const { return c >= cmin && !(has_skip && c == skip); }
};
struct Wide {
    unsigned long long lo[kBins], hi[kBins];
    unsigned cnt[kBins];
    uint64_t key[kListCap];
    double p[kListCap];
    WideSet set;
};

// A histogram of (mass, count): arrays in shared or global memory.
struct Hist {
    unsigned long long* lo;
    unsigned long long* hi;
    unsigned* cnt;
};

// p = exp((l - max) / T) in double, as the reference computes it.
__device__ __forceinline__ double prob(float l, double mx, double t) {
    return exp(__ddiv_rn(__dsub_rn(static_cast<double>(l), mx), t));
}

// Candidates a row keeps before top-p (V when top_k is 0 or at least V); rows that draw (not
// greedy: sample_kernel's test, word for word) from more than kSampleMaxTopK of them take the
// wide path.
__device__ __forceinline__ int64_t row_keep(const SamplingParams& p, int64_t V) {
    return (p.top_k > 0 && p.top_k < V) ? p.top_k : V;
}
__device__ __forceinline__ bool draw_row(const SamplingParams& p) {
    return !(p.temperature <= 0.0f || p.top_k == 1);
}
__device__ __forceinline__ bool wide_row(const SamplingParams& p, int64_t V) {
    return draw_row(p) && row_keep(p, V) > kSampleMaxTopK;
}

// Warp-wide (all lanes): adds each lane's (w, 1) into bin `bin` of h (bin < 0: none). Lanes of a
// bin are summed by their lowest lane, which adds the sum with two 64-bit atomics (the carry
// from the low word into the high one): integer sums, so any order gives one result.
__device__ __forceinline__ void warp_bin_add(int bin, Fx w, Hist h) {
    if (__all_sync(kFull, bin < 0)) return;
    const unsigned peers = __match_any_sync(kFull, bin);
    Fx s = w;
    if (peers == kFull) {  // one bin for the whole warp (uniform): a butterfly
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            Fx v;
            v.lo = __shfl_xor_sync(kFull, s.lo, o);
            v.hi = __shfl_xor_sync(kFull, s.hi, o);
            s = fx_add(s, v);
        }
    } else {
        s = Fx{};
        for (int src = 0; src < 32; ++src) {
            Fx v;
            v.lo = __shfl_sync(kFull, w.lo, src);
            v.hi = __shfl_sync(kFull, w.hi, src);
            if ((peers >> src) & 1u) s = fx_add(s, v);
        }
    }
    if (bin >= 0 && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1) {
        const unsigned long long old = atomicAdd(&h.lo[bin], s.lo);
        atomicAdd(&h.hi[bin], s.hi + (old + s.lo < old ? 1ull : 0ull));
        atomicAdd(&h.cnt[bin], static_cast<unsigned>(__popc(peers)));
    }
}

// f(i, logit, ok) for logits [begin, end) of a row, the block's threads striding, the same number
// of calls on every lane (ok false past the end) so that f may use warp collectives; 16 bytes a
// load where the range allows.
// (kVec false: one logit a load always, for the rare paths, in fewer registers.)
template <bool kVec = true, typename F>
__device__ __forceinline__ void visit_uniform(const float* logits, int64_t begin, int64_t end,
                                              F&& f) {
    if (kVec && reinterpret_cast<uintptr_t>(logits) % 16 == 0 && begin % 4 == 0 && end % 4 == 0) {
        const float4* l4 = reinterpret_cast<const float4*>(logits);
        for (int64_t b = begin / 4; b < end / 4; b += blockDim.x) {
            const int64_t i = b + threadIdx.x;
            const bool ok = i < end / 4;
            const float4 v = ok ? l4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            f(4 * i, v.x, ok);
            f(4 * i + 1, v.y, ok);
            f(4 * i + 2, v.z, ok);
            f(4 * i + 3, v.w, ok);
        }
    } else {
        for (int64_t b = begin; b < end; b += blockDim.x) {
            const int64_t i = b + threadIdx.x;
            const bool ok = i < end;
            f(i, ok ? logits[i] : 0.0f, ok);
        }
    }
}

// Adds the candidates of logits [begin, end) to their bins of h (the key's top kBinBits bits).
// mass false: the counts only (the masses' words get zeros).
template <bool kVec>
__device__ __forceinline__ void bin_candidates(const float* logits, int64_t begin, int64_t end,
                                               double mx, double t, bool mass, Hist h) {
    visit_uniform<kVec>(logits, begin, end, [&](int64_t i, float l, bool ok) {
        const int bin = ok ? static_cast<int>(cand_key(dev::order_key(l), i) >> kBinShift) : -1;
        warp_bin_add(bin, ok && mass ? fx_of(prob(l, mx, t)) : Fx{}, h);
    });
}

// One wide row: its logits, largest logit and temperature.
struct WideRow {
    const float* logits;
    int64_t V;
    double mx, t;
};

// Bin b's mass and count in the set.
__device__ __forceinline__ Fx bin_in_set(const Wide& w, int b, unsigned* n) {
    const WideSet& s = w.set;
    Fx m;
    if (b < s.cb) {
        *n = 0;
        return m;
    }
    if (b == s.cb) {
        m = Fx{s.cb_mlo, s.cb_mhi};
        *n = s.cb_n;
    } else {
        m = Fx{w.lo[b], w.hi[b]};
        *n = w.cnt[b];
    }
    if (b == s.sb) {
        m = fx_sub(m, Fx{s.s_mlo, s.s_mhi});
        *n -= 1;
    }
    return m;
}

constexpr int kBinsPerThread = kBins / kThreads;

// Block-wide exclusive scan of (mass, count) in thread order; *total gets the sum (every thread).
__device__ __forceinline__ Fx scan_exclusive(Fx m, unsigned n, Shared& sh, unsigned* excl_n,
                                             Fx* total, unsigned* total_n) {
    const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
    Fx inc = m;
    unsigned inc_n = n;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        Fx v;
        v.lo = __shfl_up_sync(kFull, inc.lo, o);
        v.hi = __shfl_up_sync(kFull, inc.hi, o);
        const unsigned vn = __shfl_up_sync(kFull, inc_n, o);
        if (lane >= o) {
            inc = fx_add(inc, v);
            inc_n += vn;
        }
    }
    __syncthreads();  // (the totals may be read by an earlier scan)
    if (lane == 31) {
        sh.wlo[warp] = inc.lo;
        sh.whi[warp] = inc.hi;
        sh.wn[warp] = inc_n;
    }
    __syncthreads();
    Fx before;  // the warps before this one
    unsigned before_n = 0;
    for (int k = 0; k < static_cast<int>(blockDim.x >> 5); ++k) {
        Fx v;
        v.lo = sh.wlo[k];
        v.hi = sh.whi[k];
        if (k < warp) {
            before = fx_add(before, v);
            before_n += sh.wn[k];
        }
        *total = fx_add(*total, v);
        *total_n += sh.wn[k];
    }
    *excl_n = before_n + inc_n - n;
    return fx_add(before, fx_sub(inc, m));
}

// The set's total mass and count (every thread).
__device__ __forceinline__ Fx set_total(const Wide& w, Shared& sh, unsigned* count) {
    Fx m;
    unsigned n = 0;
    for (int j = 0; j < kBinsPerThread; ++j) {
        unsigned bn = 0;
        m = fx_add(m, bin_in_set(w, kBins - 1 - (kBinsPerThread * threadIdx.x + j), &bn));
        n += bn;
    }
    unsigned excl_n = 0;
    Fx total;
    *count = 0;
    scan_exclusive(m, n, sh, &excl_n, &total, count);
    return total;
}

// The members of bin b (every candidate whose key's top bits are b, in the set or not) into
// the list, unless it holds them already. False when they do not fit (the rounds then read the
// row).
__device__ __forceinline__ bool list_bin(Wide& w, const WideRow& row, Shared& sh, int b) {
    if (sh.list_bin == b) return true;
    if (w.cnt[b] > static_cast<unsigned>(kListCap)) return false;
    __syncthreads();  // (the previous list's last readers)
    if (threadIdx.x == 0) sh.list_n = 0;
    __syncthreads();
    visit_uniform<false>(row.logits, 0, row.V, [&](int64_t i, float l, bool ok) {
        const uint64_t c = cand_key(dev::order_key(l), i);
        if (ok && static_cast<int>(c >> kBinShift) == b) {
            const unsigned at = atomicAdd(&sh.list_n, 1u);
            w.key[at] = c;
            w.p[at] = prob(l, row.mx, row.t);
        }
    });
    __syncthreads();
    if (threadIdx.x == 0) sh.list_bin = b;
    __syncthreads();
    return true;
}

// wide_select's first level: the bin holding e_{n-1} (sh.found_bin, with the mass and count of
// the bins above it); false when pred never holds.
template <typename Pred>
__device__ __forceinline__ bool select_bin(const Wide& w, Shared& sh, Pred pred) {
    // The bins, highest first: thread t takes kBinsPerThread of them in turn.
    const int first = kBins - 1 - kBinsPerThread * static_cast<int>(threadIdx.x);
    Fx m;
    unsigned n = 0;
    for (int j = 0; j < kBinsPerThread; ++j) {
        unsigned bn = 0;
        m = fx_add(m, bin_in_set(w, first - j, &bn));
        n += bn;
    }
    unsigned above_n = 0, total_n = 0;
    Fx total;
    Fx above = scan_exclusive(m, n, sh, &above_n, &total, &total_n);
    if (threadIdx.x == 0) sh.hit = 0x7fffffff;
    __syncthreads();
    int hit = -1;
#pragma unroll 1
    for (int j = 0; j < kBinsPerThread;
         ++j) {  // (the bins again: fewer registers than keeping them)
        unsigned bn = 0;
        const Fx bm = bin_in_set(w, first - j, &bn);
        if (bn == 0) continue;
        const Fx mj = fx_add(above, bm);
        const unsigned nj = above_n + bn;
        if (pred(mj, nj)) {
            hit = j;
            break;
        }
        above = mj;
        above_n = nj;
    }
    if (hit >= 0) atomicMin(&sh.hit, static_cast<int>(kBinsPerThread * threadIdx.x) + hit);
    __syncthreads();
    if (sh.hit == 0x7fffffff) return false;  // block-uniform
    if (hit >= 0 && static_cast<int>(kBinsPerThread * threadIdx.x) + hit == sh.hit) {
        sh.found_bin = kBins - 1 - sh.hit;
        sh.found_alo = above.lo;
        sh.found_ahi = above.hi;
        sh.found_above_n = above_n;
    }
    __syncthreads();
    return true;
}

// wide_select's second level, after select_bin: the rounds over the chosen bin's members below
// the bin's bits (from the list when `listed`, else from the row), from the bins above's mass
// and count.
template <typename Pred>
__device__ __forceinline__ bool select_members(Wide& w, const WideRow& row, Shared& sh, Pred pred,
                                               bool listed) {
    uint64_t prefix = static_cast<uint64_t>(sh.found_bin) << kBinShift;
    if (threadIdx.x == 0) {  // the mass and count above the current prefix (thread 0's)
        sh.acc_lo = sh.found_alo;
        sh.acc_hi = sh.found_ahi;
        sh.acc_n = sh.found_above_n;
    }
    for (int shift = kBinShift; shift > 0;) {
        const int width = shift >= 8 ? 8 : shift;
        shift -= width;
        const int top = shift + width;
        for (int k = threadIdx.x; k < 256; k += blockDim.x) {
            sh.hlo[k] = 0;
            sh.hhi[k] = 0;
            sh.hcnt[k] = 0;
        }
        __syncthreads();
        const Hist h{sh.hlo, sh.hhi, sh.hcnt};
        auto add = [&](uint64_t c, double p, bool ok) {
            const bool member = ok && (c >> top) == (prefix >> top) && w.set.in(c);
            warp_bin_add(member ? static_cast<int>((c >> shift) & ((1u << width) - 1)) : -1,
                         member ? fx_of(p) : Fx{}, h);
        };
        if (listed) {
            const int ln = static_cast<int>(sh.list_n);
            for (int base = 0; base < ln; base += blockDim.x) {
                const int i = base + threadIdx.x;
                const bool ok = i < ln;
                add(ok ? w.key[i] : 0, ok ? w.p[i] : 0.0, ok);
            }
        } else {
            visit_uniform<false>(row.logits, 0, row.V, [&](int64_t i, float l, bool ok) {
                const uint64_t c = cand_key(dev::order_key(l), i);
                const bool member = ok && (c >> top) == (prefix >> top);
                add(c, member ? prob(l, row.mx, row.t) : 0.0, member);
            });
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            Fx acc{sh.acc_lo, sh.acc_hi};
            unsigned acc_n = sh.acc_n;
            int digit = -1;
            for (int k = (1 << width) - 1; k >= 0; --k) {
                if (sh.hcnt[k] == 0) continue;
                Fx hk;
                hk.lo = sh.hlo[k];
                hk.hi = sh.hhi[k];
                const Fx mk = fx_add(acc, hk);
                const unsigned nk = acc_n + sh.hcnt[k];
                if (pred(mk, nk)) {
                    digit = k;
                    sh.found_mlo = mk.lo;
                    sh.found_mhi = mk.hi;
                    sh.found_n = nk;
                    break;
                }
                acc = mk;
                acc_n = nk;
            }
            sh.acc_lo = acc.lo;
            sh.acc_hi = acc.hi;
            sh.acc_n = acc_n;
            sh.digit = digit;
            sh.digit_n = digit >= 0 ? sh.hcnt[digit] : 0;
        }
        __syncthreads();
        const int digit = sh.digit;
        if (digit < 0) return false;  // block-uniform (the bin's sums say it cannot happen)
        prefix |= static_cast<uint64_t>(digit) << shift;
        if (!listed && shift > 0 && sh.digit_n <= static_cast<unsigned>(kListCap)) {
            // A bin too full to list (a flat row): once a round has narrowed it to few enough
            // members, list those (in the set, under the prefix) and read the list from then on.
            if (threadIdx.x == 0) {
                sh.list_n = 0;
                sh.list_bin = -1;  // (not a whole bin: no later select may reuse it)
            }
            __syncthreads();
            visit_uniform<false>(row.logits, 0, row.V, [&](int64_t i, float l, bool ok) {
                const uint64_t c = cand_key(dev::order_key(l), i);
                if (ok && (c >> shift) == (prefix >> shift) && w.set.in(c)) {
                    const unsigned at = atomicAdd(&sh.list_n, 1u);
                    w.key[at] = c;
                    w.p[at] = prob(l, row.mx, row.t);
                }
            });
            __syncthreads();
            listed = true;
        }
    }
    if (threadIdx.x == 0) sh.found_key = prefix;
    __syncthreads();
    return true;
}

// Sorted descending by key, the set's candidates e_0, e_1, ... with prefix sums M_n (mass) and
// C_n (count): finds the smallest n with pred(M_n, C_n) (pred is monotone) and leaves e_{n-1}'s
// key, M_n and C_n (and e_{n-1}'s bin with the mass and count of the bins above it) in sh.found_*;
// false when pred never holds. First the bins, then the chosen bin's members, 8 bits of the key
// a round (the members listed in shared memory when they fit).
template <typename Pred>
__device__ __forceinline__ bool wide_select(Wide& w, const WideRow& row, Shared& sh, Pred pred) {
    if (!select_bin(w, sh, pred)) return false;
    return select_members(w, row, sh, pred, list_bin(w, row, sh, sh.found_bin));
}

// Rows keeping at most kSampleMaxTopK candidates, with their bins' counts in w (the set all
// candidates): the top `keep` candidates' keys into sh.cand[0, keep) (any order): those of the
// bins above the keep-th's, and the top of that bin's members by the member rounds over their
// list. False (sh.cand untouched) when that bin has more members than the list takes.
__device__ __forceinline__ bool narrow_candidates(Wide& w, const float* logits, int64_t V,
                                                  Shared& sh, int64_t keep) {
    auto enough = [keep](Fx, unsigned n) { return n >= static_cast<unsigned>(keep); };
    if (!select_bin(w, sh, enough)) return false;  // (cannot happen: keep <= V)
    const int b = sh.found_bin;
    if (w.cnt[b] > static_cast<unsigned>(kListCap)) return false;  // block-uniform
    if (threadIdx.x == 0) {
        sh.list_n = 0;
        sh.n_cand = 0;
        sh.list_bin = -1;  // (this list holds no probabilities: no wide select may reuse it)
    }
    __syncthreads();
    visit_uniform<false>(logits, 0, V, [&](int64_t i, float l, bool ok) {
        const uint64_t c = cand_key(dev::order_key(l), i);
        const int bin = static_cast<int>(c >> kBinShift);
        if (ok && bin > b) {
            sh.cand[atomicAdd(&sh.n_cand, 1u)] = c;
        } else if (ok && bin == b) {
            const unsigned at = atomicAdd(&sh.list_n, 1u);
            w.key[at] = c;
            w.p[at] = 0.0;
        }
    });
    __syncthreads();
    const WideRow row{logits, V, 0.0, 1.0};  // (the listed rounds read no logits)
    if (!select_members(w, row, sh, enough, true)) return false;  // (cannot happen either)
    const uint64_t cut = sh.found_key;
    for (int i = threadIdx.x; i < static_cast<int>(sh.list_n); i += blockDim.x)
        if (w.key[i] >= cut) sh.cand[atomicAdd(&sh.n_cand, 1u)] = w.key[i];
    __syncthreads();
    return true;
}

// After a select: the set is cut at the found key (the count or top-p cut).
__device__ __forceinline__ void cut_at_found(Wide& w, const Shared& sh) {
    if (threadIdx.x == 0) {
        WideSet& s = w.set;
        s.cmin = sh.found_key;
        s.cb = sh.found_bin;
        const Fx m = fx_sub(sh.found_m(), sh.found_above());
        s.cb_mlo = m.lo;
        s.cb_mhi = m.hi;
        s.cb_n = sh.found_n - sh.found_above_n;
    }
    __syncthreads();
}

// Rows keeping more than kSampleMaxTopK candidates (see the top of the file), their histogram
// in w. `best` is the top candidate's key. Called by the whole block.
__device__ __forceinline__ void sample_wide(const ops::SampleArgs& a, int64_t r,
                                            const SamplingParams& p, int64_t keep, uint64_t best,
                                            Wide& w, Shared& sh) {
    const float* logits = a.logits + r * a.V;
    const WideRow row{logits, a.V, static_cast<double>(logits[key_id(best)]),
                      static_cast<double>(p.temperature)};
    if (threadIdx.x == 0) w.set = WideSet{0, 0, 0, 0, 0, 0, 0, -1, -1, 0};
    __syncthreads();
    uint64_t* state = a.rng + 4 * static_cast<int64_t>(a.slot[r]);
    if (keep < a.V && wide_select(w, row, sh, [keep](Fx, unsigned n) {
            return n >= static_cast<unsigned>(keep);
        }))
        cut_at_found(w, sh);
    unsigned n_set = 0;
    Fx sum = set_total(w, sh, &n_set);
    if (p.top_p < 1.0f) {
        // Smallest prefix whose mass reaches top_p (at least one token).
        const double total = fx_to_double(sum), top_p = p.top_p;
        if (wide_select(w, row, sh, [total, top_p](Fx m, unsigned) {
                return __ddiv_rn(fx_to_double(m), total) >= top_p;
            })) {
            cut_at_found(w, sh);
            sum = sh.found_m();
            n_set = sh.found_n;
        }
    }
    const int32_t draft = a.draft ? a.draft[r] : -1;
    if (draft >= 0) {
        // Keep the draft with probability p(draft); else draw from the rest, renormalised.
        const uint64_t dk = draft < a.V ? cand_key(dev::order_key(logits[draft]), draft) : 0;
        const bool in_set = draft < a.V && dk >= w.set.cmin;
        const double pd = in_set ? prob(logits[draft], row.mx, row.t) : 0.0;
        if (threadIdx.x == 0) sh.flag = __dmul_rn(xoshiro_uniform(state), fx_to_double(sum)) < pd;
        __syncthreads();
        const bool keep_draft = sh.flag != 0 || (in_set && n_set == 1);
        if (keep_draft) {
            if (threadIdx.x == 0) a.out[r] = draft;
            return;
        }
        if (in_set) {
            sum = fx_sub(sum, fx_of(pd));
            if (threadIdx.x == 0) {
                const Fx m = fx_of(pd);
                w.set.has_skip = 1;
                w.set.skip = dk;
                w.set.sb = static_cast<int>(dk >> kBinShift);
                w.set.s_mlo = m.lo;
                w.set.s_mhi = m.hi;
            }
            __syncthreads();
        }
    }
    if (threadIdx.x == 0) {
        sh.u = __dmul_rn(xoshiro_uniform(state), fx_to_double(sum));
        sh.sum_lo = sum.lo;
        sh.sum_hi = sum.hi;
    }
    __syncthreads();
    // The walk: the first candidate whose cumulative mass exceeds u; if rounding left u at the
    // very top, the last candidate with mass (cumulative mass reaching the total); else the
    // best. (The predicates read u and the sum from shared memory: registers are short here.)
    const bool found =
        wide_select(w, row, sh, [&sh](Fx m, unsigned) { return sh.u < fx_to_double(m); }) ||
        wide_select(w, row, sh, [&sh](Fx m, unsigned) {
            return fx_ge(m, Fx{sh.sum_lo, sh.sum_hi});
        });
    if (threadIdx.x == 0) a.out[r] = key_id(found ? sh.found_key : sh.best);
}

// The finite check and the best candidate over logits [begin, end) of a row, this thread's
// share (visit_uniform: 16 bytes a load where the row allows; a scalar pass took ~40 us at V =
// 129280): adds the non-finite count to bad and keeps the largest key.
__device__ __forceinline__ void scan_logits(const float* logits, int64_t begin, int64_t end,
                                            int& bad, unsigned long long& mine) {
    visit_uniform(logits, begin, end, [&](int64_t i, float l, bool ok) {
        if (!ok) return;
        bad += !isfinite(l);
        const unsigned long long c = cand_key(dev::order_key(l), i);
        mine = c > mine ? c : mine;
    });
}

// A block's non-finite count and best key from every thread's (`bad`, `mine`), for every thread.
// *best is the block's shared word, zeroed by thread 0 before the call (block_sum's barriers
// publish the zero before any thread's atomicMax).
struct BadAndBest {
    int bad;
    unsigned long long best;
};
__device__ __forceinline__ BadAndBest block_bad_and_best(int bad, unsigned long long mine, int* red,
                                                         unsigned long long* best) {
    bad = dev::block_sum(bad, red);
    atomicMax(best, mine);
    __syncthreads();
    return {bad, *best};
}

// Slice s of row r: logits [s per, (s + 1) per) with per a multiple of 4 (the float4 path).
__device__ __forceinline__ int64_t slice_begin(int64_t V, int slices, int s) {
    const int64_t per = ((V + slices - 1) / slices + 3) / 4 * 4;
    return min(V, s * per);
}

// The split first pass: block (s, r) scans slice s of row r, its non-finite count and best key
// into the scratch's entry r * slices + s.
__global__ void __launch_bounds__(kScanThreads)
    sample_scan_kernel(ops::SampleArgs a, SampleScratch ws, int slices) {
    dev::pdl_enter();
    __shared__ int red[32];
    __shared__ unsigned long long best;
    const int s = static_cast<int>(blockIdx.x);
    const int64_t r = blockIdx.y;
    if (threadIdx.x == 0) best = 0;
    int bad = 0;
    unsigned long long mine = 0;
    scan_logits(a.logits + r * a.V, slice_begin(a.V, slices, s), slice_begin(a.V, slices, s + 1),
                bad, mine);
    const BadAndBest b = block_bad_and_best(bad, mine, red, &best);
    if (threadIdx.x == 0) {
        ws.best[r * slices + s] = b.best;
        ws.bad[r * slices + s] = b.bad;
    }
}

// A row's non-finite count and best key from the split first pass's entries (every thread).
__device__ __forceinline__ BadAndBest split_bad_and_best(const SampleScratch& ws, int64_t r,
                                                         int slices, int* red,
                                                         unsigned long long* best) {
    int bad = 0;
    unsigned long long mine = 0;
    if (static_cast<int>(threadIdx.x) < slices) {
        bad = ws.bad[r * slices + threadIdx.x];
        mine = ws.best[r * slices + threadIdx.x];
    }
    return block_bad_and_best(bad, mine, red, best);
}

// The drawing rows' histograms (rows < kHistRows, after the split first pass): block (s, r) adds
// slice s of row r to the row's bins in the scratch (the counts; the masses too for a wide row),
// which the row's sample_kernel block reads and sets back to zero. Greedy rows and rows with
// non-finite logits leave theirs alone (zero).
__global__ void __launch_bounds__(kScanThreads)
    sample_hist_kernel(ops::SampleArgs a, SampleScratch ws, int slices) {
    dev::pdl_enter();
    __shared__ int red[32];
    __shared__ unsigned long long best;
    const int s = static_cast<int>(blockIdx.x);
    const int64_t r = blockIdx.y;
    const SamplingParams p = a.params[r];
    if (!draw_row(p)) return;  // block-uniform
    if (threadIdx.x == 0) best = 0;
    const BadAndBest b = split_bad_and_best(ws, r, slices, red, &best);
    if (b.bad > 0) return;
    const float* logits = a.logits + r * a.V;
    const Hist h{ws.hlo + r * kBins, ws.hhi + r * kBins, ws.hcnt + r * kBins};
    bin_candidates<true>(logits, slice_begin(a.V, slices, s), slice_begin(a.V, slices, s + 1),
                         static_cast<double>(logits[key_id(b.best)]),
                         static_cast<double>(p.temperature), wide_row(p, a.V), h);
}

// slices > 0: the first pass's (count, best) pairs are in the scratch (sample_scan_kernel);
// 0: the block scans its row itself. hist_split: sample_hist_kernel built the wide rows'
// histograms.
__global__ void __launch_bounds__(kThreads)
    sample_kernel(ops::SampleArgs a, SampleScratch ws, int slices, bool hist_split) {
    dev::pdl_enter();
    __shared__ Shared sh;
    extern __shared__ __align__(16) unsigned char dyn[];
    const int64_t r = blockIdx.x;
    const float* logits = a.logits + r * a.V;
    auto key = [&](int64_t i) { return dev::order_key(logits[i]); };
    if (threadIdx.x == 0) {
        sh.best = 0;
        sh.list_bin = -1;
    }
    // One pass for the finite check and the best candidate.
    BadAndBest b;
    if (slices > 0) {
        b = split_bad_and_best(ws, r, slices, sh.red, &sh.best);
    } else {
        int bad = 0;
        unsigned long long mine = 0;
        scan_logits(logits, 0, a.V, bad, mine);
        b = block_bad_and_best(bad, mine, sh.red, &sh.best);
    }
    if (b.bad > 0) {
        if (threadIdx.x == 0) a.out[r] = -1;
        return;
    }
    const SamplingParams p = a.params[r];
    const uint64_t best = b.best;
    if (p.temperature <= 0.0f || p.top_k == 1) {
        if (threadIdx.x == 0) a.out[r] = key_id(best);
        return;
    }
    const int64_t keep = row_keep(p, a.V);
    Wide& w = *reinterpret_cast<Wide*>(dyn);
    if (hist_split) {  // (and set the scratch's bins back to zero for the next step)
        unsigned long long* glo = ws.hlo + r * kBins;
        unsigned long long* ghi = ws.hhi + r * kBins;
        unsigned* gcnt = ws.hcnt + r * kBins;
        for (int k = threadIdx.x; k < kBins; k += blockDim.x) {
            w.lo[k] = glo[k];
            w.hi[k] = ghi[k];
            w.cnt[k] = gcnt[k];
            glo[k] = 0;
            ghi[k] = 0;
            gcnt[k] = 0;
        }
        if (threadIdx.x == 0) w.set = WideSet{0, 0, 0, 0, 0, 0, 0, -1, -1, 0};
        __syncthreads();
    }
    if (keep > kSampleMaxTopK) {
        if (!hist_split) {
            const Hist h{w.lo, w.hi, w.cnt};
            for (int k = threadIdx.x; k < kBins; k += blockDim.x) {
                w.lo[k] = 0;
                w.hi[k] = 0;
                w.cnt[k] = 0;
            }
            __syncthreads();
            bin_candidates<false>(logits, 0, a.V, static_cast<double>(logits[key_id(best)]),
                                  static_cast<double>(p.temperature), true, h);
            __syncthreads();
        }
        sample_wide(a, r, p, keep, best, w, sh);
        return;
    }
    int n_pow2 = 1;
    while (n_pow2 < keep) n_pow2 <<= 1;
    for (int i = threadIdx.x; i < n_pow2; i += blockDim.x) sh.cand[i] = 0;  // padding sorts last
    __syncthreads();
    // The top `keep` keys: from the bins' counts when the split pass built them (one more pass
    // over the row), else (or when the keep-th's bin is too full to list) by the block radix
    // select over the row (up to five passes).
    if (!(hist_split && narrow_candidates(w, logits, a.V, sh, keep))) {
        int64_t above = 0;
        // (hcnt: the wide path's round histogram, free here)
        const uint32_t thr = dev::block_topk_threshold(key, a.V, keep, sh.hcnt, sh.red, &above);
        dev::block_topk_collect(key, a.V, thr, above, keep, sh.red, [&](int64_t i, int64_t rank) {
            sh.cand[rank] = cand_key(key(i), i);
        });
    }
    __syncthreads();
    // Bitonic sort, descending.
    for (int size = 2; size <= n_pow2; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < n_pow2; i += blockDim.x) {
                const int j = i ^ stride;
                if (j > i) {
                    const bool desc = (i & size) == 0;
                    const uint64_t x = sh.cand[i], y = sh.cand[j];
                    if (desc ? x < y : x > y) {
                        sh.cand[i] = y;
                        sh.cand[j] = x;
                    }
                }
            }
            __syncthreads();
        }
    }
    if (threadIdx.x != 0) return;
    double* probs = sh.probs;
    auto id_at = [&](int64_t i) { return key_id(sh.cand[i]); };
    const double mx = logits[id_at(0)];
    double sum = 0;
    for (int64_t i = 0; i < keep; ++i) {
        probs[i] = exp(__ddiv_rn(__dsub_rn(static_cast<double>(logits[id_at(i)]), mx),
                                 static_cast<double>(p.temperature)));
        sum = __dadd_rn(sum, probs[i]);
    }
    int64_t n = keep;
    if (p.top_p < 1.0f) {
        double mass = 0;
        int64_t cut = 0;
        while (cut < n) {
            mass = __dadd_rn(mass, __ddiv_rn(probs[cut++], sum));
            if (mass >= p.top_p) break;
        }
        n = cut;
        sum = 0;
        for (int64_t i = 0; i < n; ++i) sum = __dadd_rn(sum, probs[i]);
    }
    uint64_t* state = a.rng + 4 * static_cast<int64_t>(a.slot[r]);
    const int32_t draft = a.draft ? a.draft[r] : -1;
    if (draft >= 0) {
        int64_t at = -1;
        for (int64_t i = 0; i < n && at < 0; ++i)
            if (id_at(i) == draft) at = i;
        const double pd = at >= 0 ? probs[at] : 0.0;
        if (__dmul_rn(xoshiro_uniform(state), sum) < pd) {
            a.out[r] = draft;
            return;
        }
        if (at >= 0) {
            if (n == 1) {
                a.out[r] = draft;
                return;
            }
            sum = __dsub_rn(sum, pd);
            probs[at] = 0.0;
        }
    }
    const double u = __dmul_rn(xoshiro_uniform(state), sum);
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
        acc = __dadd_rn(acc, probs[i]);
        if (u < acc) {
            a.out[r] = id_at(i);
            return;
        }
    }
    for (int64_t i = n - 1; i > 0; --i) {
        if (probs[i] > 0) {
            a.out[r] = id_at(i);
            return;
        }
    }
    a.out[r] = id_at(0);
}

// A row whose sample is -1 (non-finite logits): NaN and ids -1 (the whole block).
__device__ __forceinline__ void logprobs_none(const ops::LogprobsArgs& a, int64_t r) {
    for (int j = threadIdx.x; j < a.n; j += blockDim.x) {
        a.top_id[r * a.n + j] = -1;
        a.top_logprob[r * a.n + j] = NAN;
    }
    if (threadIdx.x == 0) a.logprob[r] = NAN;
}

// Thread 0: sorts the row's top `keep` candidate keys (descending; keys are distinct) and writes
// the sampled id's log-probability and the top n's, log p = l - lse.
__device__ __forceinline__ void logprobs_write(const ops::LogprobsArgs& a, int64_t r, double lse,
                                               uint64_t* cand, int keep) {
    const float* logits = a.logits + r * a.V;
    auto lp = [&](int32_t i) {
        return __double2float_rn(__dsub_rn(static_cast<double>(logits[i]), lse));
    };
    for (int i = 1; i < keep; ++i)  // insertion sort
        for (int j = i; j > 0 && cand[j] > cand[j - 1]; --j) {
            const uint64_t t = cand[j];
            cand[j] = cand[j - 1];
            cand[j - 1] = t;
        }
    a.logprob[r] = lp(a.sampled[r]);
    for (int j = 0; j < a.n; ++j) {
        a.top_id[r * a.n + j] = j < keep ? key_id(cand[j]) : -1;
        a.top_logprob[r * a.n + j] = j < keep ? lp(key_id(cand[j])) : NAN;
    }
}

// The log-probabilities of row r (launch_logprobs without the scratch): the best key by the
// first pass's scan (its logit is the maximum), the exponentials' sum in double (each thread's
// share in index order, then the block's sum: the order, not the terms, differs from the
// reference's sequential sum), the top n by the block radix select, sorted by one thread
// (n <= kMaxTopLogprobs).
__global__ void __launch_bounds__(kThreads) logprobs_kernel(ops::LogprobsArgs a) {
    dev::pdl_enter();
    __shared__ int red[32];
    __shared__ double red_d[32];
    __shared__ unsigned hist[256];
    __shared__ unsigned long long best_s;
    __shared__ uint64_t cand[kMaxTopLogprobs];
    const int64_t r = blockIdx.x;
    const float* logits = a.logits + r * a.V;
    if (a.sampled[r] < 0) {  // non-finite logits (the sampling op's -1)
        logprobs_none(a, r);
        return;
    }
    if (threadIdx.x == 0) best_s = 0;
    int bad = 0;
    unsigned long long mine = 0;
    scan_logits(logits, 0, a.V, bad, mine);
    const double mx = logits[key_id(block_bad_and_best(bad, mine, red, &best_s).best)];
    double part = 0;
    for (int64_t i = threadIdx.x; i < a.V; i += blockDim.x)
        part = __dadd_rn(part, exp(__dsub_rn(static_cast<double>(logits[i]), mx)));
    const double lse = __dadd_rn(mx, log(dev::block_sum(part, red_d)));
    const int keep = static_cast<int>(a.V < a.n ? a.V : a.n);
    auto key = [&](int64_t i) { return dev::order_key(logits[i]); };
    int64_t above = 0;
    const uint32_t thr = dev::block_topk_threshold(key, a.V, keep, hist, red, &above);
    dev::block_topk_collect(key, a.V, thr, above, keep, red,
                            [&](int64_t i, int64_t rank) { cand[rank] = cand_key(key(i), i); });
    __syncthreads();
    if (threadIdx.x == 0) logprobs_write(a, r, lse, cand, keep);
}

// The split log-probabilities: block (s, r) takes slice s of row r: its largest logit m_s, its
// sum of exp(l - m_s) in double and its top n keys (in id order) into the scratch; the row's last
// block to arrive combines them: the maximum M, the sum as sum_s S_s exp(m_s - M) in slice order
// (each term rounded once more than the reference's), and the top n among the slices' top n
// (exact: every key of the row's top n is in its slice's top n; the slices' lists laid end to
// end are in id order, so the select's ties to the lower index are ties to the lower id).
__global__ void __launch_bounds__(kScanThreads)
    logprobs_split_kernel(ops::LogprobsArgs a, SampleScratch ws, int slices) {
    dev::pdl_enter();
    __shared__ int red[32];
    __shared__ double red_d[32];
    __shared__ unsigned hist[256];
    __shared__ unsigned long long best_s;
    __shared__ uint64_t cand[kMaxTopLogprobs];
    const int s = static_cast<int>(blockIdx.x);
    const int64_t r = blockIdx.y;
    if (a.sampled[r] < 0) {  // the row's every block (none arrives)
        if (s == 0) logprobs_none(a, r);
        return;
    }
    const float* logits = a.logits + r * a.V;
    const int64_t b = slice_begin(a.V, slices, s), e = slice_begin(a.V, slices, s + 1);
    const int64_t part = r * slices + s;
    if (threadIdx.x == 0) best_s = 0;
    int bad = 0;
    unsigned long long mine = 0;
    scan_logits(logits, b, e, bad, mine);
    const unsigned long long best = block_bad_and_best(bad, mine, red, &best_s).best;
    const double mx = e > b ? static_cast<double>(logits[key_id(best)]) : -INFINITY;
    double sum = 0;
    for (int64_t i = b + threadIdx.x; i < e; i += blockDim.x)
        sum = __dadd_rn(sum, exp(__dsub_rn(static_cast<double>(logits[i]), mx)));
    sum = dev::block_sum(sum, red_d);
    uint64_t* top = ws.lp_top + part * kMaxTopLogprobs;
    const int keep = static_cast<int>(e - b < a.n ? e - b : a.n);
    for (int j = keep + static_cast<int>(threadIdx.x); j < kMaxTopLogprobs; j += blockDim.x)
        top[j] = 0;  // (sorts below every finite logit's key)
    if (keep > 0) {
        auto key = [&](int64_t i) { return dev::order_key(logits[b + i]); };
        int64_t above = 0;
        const uint32_t thr = dev::block_topk_threshold(key, e - b, keep, hist, red, &above);
        dev::block_topk_collect(key, e - b, thr, above, keep, red, [&](int64_t i, int64_t rank) {
            top[rank] = cand_key(key(i), b + i);
        });
    }
    if (threadIdx.x == 0) {
        ws.lp_max[part] = mx;
        ws.lp_sum[part] = sum;
    }
    if (!dev::last_to_arrive(ws.arrivals, slices)) return;
    const double* pm = ws.lp_max + r * slices;
    const double* ps = ws.lp_sum + r * slices;
    double m = -INFINITY;
    for (int k = 0; k < slices; ++k) m = fmax(m, pm[k]);
    double total = 0;
    for (int k = 0; k < slices; ++k)
        total = __dadd_rn(total, __dmul_rn(ps[k], exp(__dsub_rn(pm[k], m))));
    const double lse = __dadd_rn(m, log(total));
    const uint64_t* tops = ws.lp_top + r * slices * kMaxTopLogprobs;
    const int64_t n_c = int64_t{slices} * kMaxTopLogprobs;
    const int row_keep = static_cast<int>(a.V < a.n ? a.V : a.n);
    auto ckey = [&](int64_t i) { return static_cast<uint32_t>(tops[i] >> 32); };
    int64_t above = 0;
    const uint32_t thr = dev::block_topk_threshold(ckey, n_c, row_keep, hist, red, &above);
    dev::block_topk_collect(ckey, n_c, thr, above, row_keep, red,
                            [&](int64_t i, int64_t rank) { cand[rank] = tops[i]; });
    __syncthreads();
    if (threadIdx.x == 0) logprobs_write(a, r, lse, cand, row_keep);
}

// (row, slice) entries the scratch holds, four a SM: launch_sample gives each row as many
// slices as fit, at most kMaxSlices.
int sample_parts(int sm_count) {
    return 4 * sm_count;
}

// Bytes of the wide rows' histograms: kHistRows rows of kBins (mass, count) bins.
constexpr int64_t kHistBytes =
    int64_t{kHistRows} * kBins * (2 * sizeof(unsigned long long) + sizeof(unsigned));

// Slices a row of the split passes: as many as the scratch holds for R rows, at most
// kMaxSlices, at least 2 (else 0: the row's own block reads it); depends on R only (graph-safe).
int split_slices(int64_t R, int64_t V, const SampleScratch& ws) {
    const int64_t by_ws = ws.best != nullptr ? ws.max_parts / R : 0;
    return V >= kSampleSplitMinV && by_ws >= 2
               ? static_cast<int>(std::min<int64_t>(kMaxSlices, by_ws))
               : 0;
}

}  // namespace

int64_t sample_scratch_bytes(int sm_count) {
    const int64_t parts = sample_parts(sm_count);
    return kHistBytes +
           parts * (sizeof(unsigned long long) + 2 * sizeof(double) +
                    kMaxTopLogprobs * sizeof(uint64_t) + sizeof(int) + sizeof(unsigned));
}

// The 8-byte words first (the histograms' mass words, the first pass's best keys, the split
// log-probabilities' parts), then the 4-byte ones. The histograms and the arrival counters must
// start zero (try_alloc zeroes; each use sets them back).
SampleScratch sample_scratch(void* p, int sm_count) {
    SampleScratch ws;
    const int64_t parts = sample_parts(sm_count), bins = int64_t{kHistRows} * kBins;
    ws.max_parts = static_cast<int>(parts);
    ws.hlo = static_cast<unsigned long long*>(p);
    ws.hhi = ws.hlo + bins;
    ws.best = ws.hhi + bins;
    ws.lp_max = reinterpret_cast<double*>(ws.best + parts);
    ws.lp_sum = ws.lp_max + parts;
    ws.lp_top = reinterpret_cast<uint64_t*>(ws.lp_sum + parts);
    ws.bad = reinterpret_cast<int*>(ws.lp_top + parts * kMaxTopLogprobs);
    ws.hcnt = reinterpret_cast<unsigned*>(ws.bad + parts);
    ws.arrivals = ws.hcnt + bins;
    return ws;
}

void launch_sample(const ops::SampleArgs& a, const SampleScratch& ws, cudaStream_t stream) {
    DSV4_ASSERT(a.V >= 1 && a.V <= 0x7fffffff, "sample: V ", a.V);
    if (a.R == 0) return;
    static PerDeviceOnce set_attributes;  // (per device: ranks on several GPUs)
    DSV4_CHECK_CUDA(set_attributes([] {
        // The opt-in limit counts static and dynamic shared memory together.
        cudaFuncAttributes fa{};
        cudaError_t e = cudaFuncGetAttributes(&fa, sample_kernel);
        DSV4_ASSERT(e != cudaSuccess || fa.sharedSizeBytes + sizeof(Wide) <= 227 * 1024,
                    "sample: ", fa.sharedSizeBytes, " bytes of static shared memory");
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(sizeof(Wide)));
        return e;
    }));
    const int slices = split_slices(a.R, a.V, ws);
    const bool hist_split = slices > 0 && a.R <= kHistRows;
    const dim3 grid(static_cast<unsigned>(slices), static_cast<unsigned>(a.R));
    if (slices > 0) launch_pdl(sample_scan_kernel, grid, kScanThreads, 0, stream, 1, a, ws, slices);
    if (hist_split) launch_pdl(sample_hist_kernel, grid, kScanThreads, 0, stream, 1, a, ws, slices);
    launch_pdl(sample_kernel, static_cast<unsigned>(a.R), kThreads, sizeof(Wide), stream, 1, a, ws,
               slices, hist_split);
}

void launch_logprobs(const ops::LogprobsArgs& a, const SampleScratch& ws, cudaStream_t stream) {
    DSV4_ASSERT(a.V >= 1 && a.V <= 0x7fffffff && a.n >= 1 && a.n <= kMaxTopLogprobs, "logprobs: V ",
                a.V, ", n ", a.n);
    if (a.R == 0) return;
    const int slices = split_slices(a.R, a.V, ws);
    if (slices > 0)
        launch_pdl(logprobs_split_kernel,
                   dim3(static_cast<unsigned>(slices), static_cast<unsigned>(a.R)), kScanThreads, 0,
                   stream, 1, a, ws, slices);
    else
        launch_pdl(logprobs_kernel, static_cast<unsigned>(a.R), kThreads, 0, stream, 1, a);
}

}  // namespace dsv4::cuda
