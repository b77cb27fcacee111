// Sampling (sample.h), in the reference's steps (backend/cpu/ref/sample.cc): a row with a
// non-finite logit gets -1 and draws nothing; greedy is the lowest id of the maximum (exact).
// Otherwise the candidates are ordered by logit descending, ties to the lower id, as the 64-bit
// key (order_key(logit) << 32) | ~id, and the row takes one of two paths:
//
//  - keep <= kSampleMaxTopK: the top `keep` are found with the block top-k radix select,
//    sorted in shared memory, and one thread does the reference's sequential double arithmetic
//    (probabilities exp((l - max) / T), the top-p cut, the draft test, the draw and the walk).
//  - larger keep (top_k 0 or > 1024, up to V): no sort. Every "smallest prefix of the sorted
//    candidates whose mass (or count) satisfies P" question (the top-k cut, the top-p cut, the
//    draw's walk) is a radix select over the 64-bit keys, 8 bits per round: a histogram of the
//    count and probability mass of the candidates under the current key prefix, scanned from the
//    top bin. Masses are summed exactly in 128-bit fixed point (2^-96 units; every probability
//    is <= 1 and truncated by < 2^-96), so they are independent of the order and deterministic,
//    and differ from the reference's sequential double sums only by the reference's own rounding.
//
// The first pass (the finite check and the best candidate) reads the whole row: one block of
// 1024 threads takes ~16.6 us for V = 129280 on an H100, a token's whole sampling time when it is
// greedy. With a scratch, rows of kSampleSplitMinV logits or more are first scanned in slices by
// many blocks (sample_scan_kernel), and the row's block combines their (count, best) pairs: the
// same result, since the best key is a maximum and the count a sum.
//
// Only exp (CUDA's double exp is within 1 ulp, glibc's is correctly rounded in practice) and,
// on the radix path, the reference's summation rounding (~n * 2^-53 relative) separate the two:
// a different id needs the uniform draw within that distance of a cumulative boundary.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/pdl.cuh"
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
    // Radix path: one 256-bin histogram of (mass, count), and broadcasts from thread 0.
    unsigned long long hlo[256], hhi[256];
    unsigned hcnt[256];
    int digit;
    int flag;
    double u;
};

// One logit row of the radix path: keys and probabilities recomputed from the logits.
struct Row {
    const float* logits;
    int64_t V;
    double mx, temperature;
    __device__ __forceinline__ uint64_t ck(int64_t i) const {
        return cand_key(dev::order_key(logits[i]), i);
    }
    __device__ __forceinline__ double p(int64_t i) const {
        return exp(__ddiv_rn(__dsub_rn(static_cast<double>(logits[i]), mx), temperature));
    }
};

// Warp-wide (all lanes): adds each lane's (w, 1) into bin `bin` of the histogram (bin < 0: none).
// Lanes of a bin are summed by their lowest lane, which adds the sum with two 64-bit atomics
// (the carry from the low word into the high one): integer sums, so any order gives one result.
__device__ __forceinline__ void warp_bin_add(int bin, Fx w, Shared& sh) {
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
        const unsigned long long old = atomicAdd(&sh.hlo[bin], s.lo);
        atomicAdd(&sh.hhi[bin], s.hi + (old + s.lo < old ? 1ull : 0ull));
        atomicAdd(&sh.hcnt[bin], static_cast<unsigned>(__popc(peers)));
    }
}

// Histogram of the candidates (key >= cmin, id != skip) whose key bits above `shift + 8` equal
// prefix's: bin = key bits [shift, shift + 8). shift < 0: everything in bin 0 (the total).
__device__ __forceinline__ void hist_pass(const Row& row, Shared& sh, uint64_t cmin, int64_t skip,
                                          int shift, uint64_t prefix, bool mass) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        sh.hlo[b] = 0;
        sh.hhi[b] = 0;
        sh.hcnt[b] = 0;
    }
    __syncthreads();
    for (int64_t base = 0; base < row.V; base += blockDim.x) {
        const int64_t i = base + threadIdx.x;
        int bin = -1;
        Fx w;
        if (i < row.V && i != skip) {
            const uint64_t c = row.ck(i);
            const bool under =
                shift < 0 || shift >= 56 || (c >> (shift + 8)) == (prefix >> (shift + 8));
            if (c >= cmin && under) {
                bin = shift < 0 ? 0 : static_cast<int>((c >> shift) & 255);
                if (mass) w = fx_of(row.p(i));
            }
        }
        warp_bin_add(bin, w, sh);
    }
    __syncthreads();
}

// The candidates' total mass and count (every thread gets them).
__device__ __forceinline__ Fx mass_total(const Row& row, Shared& sh, uint64_t cmin, int64_t skip,
                                         unsigned* count) {
    hist_pass(row, sh, cmin, skip, -1, 0, true);
    Fx s;
    s.lo = sh.hlo[0];
    s.hi = sh.hhi[0];
    *count = sh.hcnt[0];
    __syncthreads();
    return s;
}

// Sorted descending by key, candidates e_0, e_1, ... (key >= cmin, id != skip) with prefix
// sums M_n (mass, or count) and C_n (count): finds the smallest n with pred(M_n, C_n) (pred is
// monotone) and returns e_{n-1}'s key in *out; false when pred never holds.
template <typename Pred>
__device__ __forceinline__ bool radix_select(const Row& row, Shared& sh, uint64_t cmin,
                                             int64_t skip, bool mass, Pred pred, uint64_t* out) {
    uint64_t prefix = 0;
    Fx above;  // thread 0: the mass and count of the candidates above the current prefix
    unsigned above_n = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        hist_pass(row, sh, cmin, skip, shift, prefix, mass);
        if (threadIdx.x == 0) {
            int digit = -1;
            for (int b = 255; b >= 0; --b) {
                if (sh.hcnt[b] == 0) continue;
                Fx h;
                h.lo = sh.hlo[b];
                h.hi = sh.hhi[b];
                const Fx m = fx_add(above, h);
                const unsigned n = above_n + sh.hcnt[b];
                if (pred(m, n)) {
                    digit = b;
                    break;
                }
                above = m;
                above_n = n;
            }
            sh.digit = digit;
        }
        __syncthreads();
        const int digit = sh.digit;
        if (digit < 0) return false;  // block-uniform
        prefix |= static_cast<uint64_t>(digit) << shift;
    }
    *out = prefix;
    return true;
}

// Rows keeping more than kSampleMaxTopK candidates (see the top of the file). `best` is the
// top candidate's key. Called by the whole block.
__device__ __forceinline__ void sample_radix(const ops::SampleArgs& a, int64_t r,
                                             const SamplingParams& p, int64_t keep, uint64_t best,
                                             Shared& sh) {
    const float* logits = a.logits + r * a.V;
    const Row row{logits, a.V, static_cast<double>(logits[key_id(best)]),
                  static_cast<double>(p.temperature)};
    uint64_t* state = a.rng + 4 * static_cast<int64_t>(a.slot[r]);
    uint64_t cmin = 0;
    if (keep < a.V)
        radix_select(
            row, sh, 0, -1, false, [keep](Fx, unsigned n) { return n >= keep; }, &cmin);
    unsigned n_set = 0;
    Fx sum = mass_total(row, sh, cmin, -1, &n_set);
    if (p.top_p < 1.0f) {
        // Smallest prefix whose mass reaches top_p (at least one token).
        const double total = fx_to_double(sum), top_p = p.top_p;
        uint64_t cut = 0;
        if (radix_select(
                row, sh, cmin, -1, true,
                [total, top_p](Fx m, unsigned) {
                    return __ddiv_rn(fx_to_double(m), total) >= top_p;
                },
                &cut)) {
            cmin = cut;
            sum = mass_total(row, sh, cmin, -1, &n_set);
        }
    }
    int64_t skip = -1;
    const int32_t draft = a.draft ? a.draft[r] : -1;
    if (draft >= 0) {
        // Keep the draft with probability p(draft); else draw from the rest, renormalised.
        const bool in_set = draft < a.V && row.ck(draft) >= cmin;
        const double pd = in_set ? row.p(draft) : 0.0;
        if (threadIdx.x == 0) sh.flag = __dmul_rn(xoshiro_uniform(state), fx_to_double(sum)) < pd;
        __syncthreads();
        const bool keep_draft = sh.flag != 0 || (in_set && n_set == 1);
        if (keep_draft) {
            if (threadIdx.x == 0) a.out[r] = draft;
            return;
        }
        if (in_set) {
            sum = fx_sub(sum, fx_of(pd));
            skip = draft;
        }
    }
    if (threadIdx.x == 0) sh.u = __dmul_rn(xoshiro_uniform(state), fx_to_double(sum));
    __syncthreads();
    const double u = sh.u;
    uint64_t c = 0;
    // The walk: the first candidate whose cumulative mass exceeds u; if rounding left u at the
    // very top, the last candidate with mass (cumulative mass reaching the total).
    if (!radix_select(
            row, sh, cmin, skip, true, [u](Fx m, unsigned) { return u < fx_to_double(m); }, &c) &&
        !radix_select(
            row, sh, cmin, skip, true, [sum](Fx m, unsigned) { return fx_ge(m, sum); }, &c))
        c = best;
    if (threadIdx.x == 0) a.out[r] = key_id(c);
}

// The finite check and the best candidate over logits [begin, end) of a row, this thread's
// share (the block's threads striding), 16 bytes a load where the row allows (a scalar pass
// took ~40 us at V = 129280): adds the non-finite count to bad and keeps the largest key.
__device__ __forceinline__ void scan_logits(const float* logits, int64_t V, int64_t begin,
                                            int64_t end, int& bad, unsigned long long& mine) {
    auto visit = [&](int64_t i, float l) {
        bad += !isfinite(l);
        const unsigned long long c = cand_key(dev::order_key(l), i);
        mine = c > mine ? c : mine;
    };
    if (V % 4 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0 && begin % 4 == 0 &&
        end % 4 == 0) {
        const float4* l4 = reinterpret_cast<const float4*>(logits);
#pragma unroll 4
        for (int64_t i = begin / 4 + threadIdx.x; i < end / 4; i += blockDim.x) {
            const float4 v = l4[i];
            visit(4 * i, v.x);
            visit(4 * i + 1, v.y);
            visit(4 * i + 2, v.z);
            visit(4 * i + 3, v.w);
        }
    } else {
        for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) visit(i, logits[i]);
    }
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
    scan_logits(a.logits + r * a.V, a.V, slice_begin(a.V, slices, s),
                slice_begin(a.V, slices, s + 1), bad, mine);
    const BadAndBest b = block_bad_and_best(bad, mine, red, &best);
    if (threadIdx.x == 0) {
        ws.best[r * slices + s] = b.best;
        ws.bad[r * slices + s] = b.bad;
    }
}

// slices > 0: the first pass's (count, best) pairs are in the scratch (sample_scan_kernel);
// 0: the block scans its row itself.
__global__ void __launch_bounds__(kThreads)
    sample_kernel(ops::SampleArgs a, SampleScratch ws, int slices) {
    dev::pdl_enter();
    __shared__ Shared sh;
    const int64_t r = blockIdx.x;
    const float* logits = a.logits + r * a.V;
    auto key = [&](int64_t i) { return dev::order_key(logits[i]); };
    if (threadIdx.x == 0) sh.best = 0;
    // One pass for the finite check and the best candidate.
    int bad = 0;
    unsigned long long mine = 0;
    if (slices > 0) {
        if (static_cast<int>(threadIdx.x) < slices) {
            bad = ws.bad[r * slices + threadIdx.x];
            mine = ws.best[r * slices + threadIdx.x];
        }
    } else {
        scan_logits(logits, a.V, 0, a.V, bad, mine);
    }
    const BadAndBest b = block_bad_and_best(bad, mine, sh.red, &sh.best);
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
    const int64_t keep = (p.top_k > 0 && p.top_k < a.V) ? p.top_k : a.V;
    if (keep > kSampleMaxTopK) {
        sample_radix(a, r, p, keep, best, sh);
        return;
    }
    int64_t above = 0;
    // (hcnt: the radix path's histogram, free here)
    const uint32_t thr = dev::block_topk_threshold(key, a.V, keep, sh.hcnt, sh.red, &above);
    int n_pow2 = 1;
    while (n_pow2 < keep) n_pow2 <<= 1;
    for (int i = threadIdx.x; i < n_pow2; i += blockDim.x) sh.cand[i] = 0;  // padding sorts last
    __syncthreads();
    dev::block_topk_collect(key, a.V, thr, above, keep, sh.red,
                            [&](int64_t i, int64_t rank) { sh.cand[rank] = cand_key(key(i), i); });
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

// The log-probabilities of row r (launch_logprobs): the best key by the first pass's scan (its
// logit is the maximum), the exponentials' sum in double (each thread's share in index order,
// then the block's sum: the order, not the terms, differs from the reference's sequential sum),
// the top n by the block radix select, sorted by one thread (n <= kMaxTopLogprobs).
__global__ void __launch_bounds__(kThreads) logprobs_kernel(ops::LogprobsArgs a) {
    dev::pdl_enter();
    __shared__ int red[32];
    __shared__ double red_d[32];
    __shared__ unsigned hist[256];
    __shared__ unsigned long long best_s;
    __shared__ uint64_t cand[kMaxTopLogprobs];
    const int64_t r = blockIdx.x;
    const float* logits = a.logits + r * a.V;
    const int32_t sampled = a.sampled[r];
    if (sampled < 0) {  // non-finite logits (the sampling op's -1)
        for (int j = threadIdx.x; j < a.n; j += blockDim.x) {
            a.top_id[r * a.n + j] = -1;
            a.top_logprob[r * a.n + j] = NAN;
        }
        if (threadIdx.x == 0) a.logprob[r] = NAN;
        return;
    }
    if (threadIdx.x == 0) best_s = 0;
    int bad = 0;
    unsigned long long mine = 0;
    scan_logits(logits, a.V, 0, a.V, bad, mine);
    const double mx = logits[key_id(block_bad_and_best(bad, mine, red, &best_s).best)];
    double part = 0;
    for (int64_t i = threadIdx.x; i < a.V; i += blockDim.x)
        part = __dadd_rn(part, exp(__dsub_rn(static_cast<double>(logits[i]), mx)));
    const double lse = __dadd_rn(mx, log(dev::block_sum(part, red_d)));
    auto lp = [&](int32_t i) {
        return __double2float_rn(__dsub_rn(static_cast<double>(logits[i]), lse));
    };
    const int keep = static_cast<int>(a.V < a.n ? a.V : a.n);
    auto key = [&](int64_t i) { return dev::order_key(logits[i]); };
    int64_t above = 0;
    const uint32_t thr = dev::block_topk_threshold(key, a.V, keep, hist, red, &above);
    dev::block_topk_collect(key, a.V, thr, above, keep, red,
                            [&](int64_t i, int64_t rank) { cand[rank] = cand_key(key(i), i); });
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int i = 1; i < keep; ++i)  // insertion sort, descending (keys are distinct)
        for (int j = i; j > 0 && cand[j] > cand[j - 1]; --j) {
            const uint64_t t = cand[j];
            cand[j] = cand[j - 1];
            cand[j - 1] = t;
        }
    a.logprob[r] = lp(sampled);
    for (int j = 0; j < a.n; ++j) {
        a.top_id[r * a.n + j] = j < keep ? key_id(cand[j]) : -1;
        a.top_logprob[r * a.n + j] = j < keep ? lp(key_id(cand[j])) : NAN;
    }
}

// (row, slice) entries the scratch holds, four a SM: launch_sample gives each row as many
// slices as fit, at most kMaxSlices.
int sample_parts(int sm_count) {
    return 4 * sm_count;
}

}  // namespace

int64_t sample_scratch_bytes(int sm_count) {
    return int64_t{sample_parts(sm_count)} * (sizeof(unsigned long long) + sizeof(int));
}

SampleScratch sample_scratch(void* p, int sm_count) {
    SampleScratch ws;
    ws.max_parts = sample_parts(sm_count);
    ws.best = static_cast<unsigned long long*>(p);
    ws.bad = reinterpret_cast<int*>(ws.best + ws.max_parts);
    return ws;
}

void launch_sample(const ops::SampleArgs& a, const SampleScratch& ws, cudaStream_t stream) {
    DSV4_ASSERT(a.V >= 1 && a.V <= 0x7fffffff, "sample: V ", a.V);
    if (a.R == 0) return;
    // Slices a row: as many as the scratch holds for R rows, at most kMaxSlices, at least 2
    // (else the row's own block scans it); the count depends on R only (graph-safe).
    const int64_t by_ws = ws.best != nullptr ? ws.max_parts / a.R : 0;
    const int slices = a.V >= kSampleSplitMinV && by_ws >= 2
                           ? static_cast<int>(std::min<int64_t>(kMaxSlices, by_ws))
                           : 0;
    if (slices > 0)
        launch_pdl(sample_scan_kernel,
                   dim3(static_cast<unsigned>(slices), static_cast<unsigned>(a.R)), kScanThreads, 0,
                   stream, 1, a, ws, slices);
    launch_pdl(sample_kernel, static_cast<unsigned>(a.R), kThreads, 0, stream, 1, a, ws, slices);
}

void launch_logprobs(const ops::LogprobsArgs& a, cudaStream_t stream) {
    DSV4_ASSERT(a.V >= 1 && a.V <= 0x7fffffff && a.n >= 1 && a.n <= kMaxTopLogprobs, "logprobs: V ",
                a.V, ", n ", a.n);
    if (a.R == 0) return;
    launch_pdl(logprobs_kernel, static_cast<unsigned>(a.R), kThreads, 0, stream, 1, a);
}

}  // namespace dsv4::cuda
