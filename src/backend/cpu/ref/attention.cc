// Reference sink attention over the sliding window plus compressed entries (one softmax),
// and the ring write that follows each chunk.
#include <algorithm>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/thread_pool.h"

namespace dsv4::cpu_ref {
namespace {

// Pointers to the K=V rows that query t may see (see AttentionArgs for the rule).
void gather_keys(const ops::AttentionArgs& a, int t, std::vector<const float*>& keys) {
    keys.clear();
    const int64_t p = a.pos0 + t;
    const int64_t first = std::max<int64_t>(0, p - a.W + 1);
    for (int64_t q = first; q < a.pos0; ++q) keys.push_back(a.ring + (q % a.W) * a.hd);
    for (int64_t q = std::max(first, a.pos0); q <= p; ++q)
        keys.push_back(a.kv + (q - a.pos0) * a.hd);
    if (a.entries == nullptr) return;
    const int64_t valid = (p + 1) / a.compress_rate;
    if (a.topk == nullptr) {
        for (int64_t b = 0; b < valid; ++b) keys.push_back(a.entries + b * a.hd);
    } else {
        for (int j = 0; j < a.K; ++j) {
            const int32_t b = a.topk[static_cast<int64_t>(t) * a.K + j];
            if (b < 0) continue;
            DSV4_DASSERT(b < valid, "indexer picked entry ", b, " of ", valid);
            keys.push_back(a.entries + static_cast<int64_t>(b) * a.hd);
        }
    }
}

}  // namespace

void attention(const ops::AttentionArgs& a) {
    parallel_for(static_cast<int64_t>(a.T) * a.H, 1, [&](int64_t begin, int64_t end) {
        std::vector<const float*> keys;
        std::vector<float> z;
        std::vector<double> acc(a.hd);
        int last_t = -1;
        for (int64_t th = begin; th < end; ++th) {
            const int t = static_cast<int>(th / a.H), h = static_cast<int>(th % a.H);
            if (t != last_t) {
                gather_keys(a, t, keys);
                last_t = t;
            }
            const float* q = a.q + th * a.hd;
            z.resize(keys.size());
            // The sink joins the max so exp never overflows; it only enters the denominator.
            float mx = a.sink[h];
            for (size_t j = 0; j < keys.size(); ++j) {
                z[j] = static_cast<float>(dot(q, keys[j], a.hd)) * a.softmax_scale;
                mx = std::max(mx, z[j]);
            }
            double denom = std::exp(static_cast<double>(a.sink[h]) - mx);
            std::fill(acc.begin(), acc.end(), 0.0);
            for (size_t j = 0; j < keys.size(); ++j) {
                const double e = std::exp(static_cast<double>(z[j]) - mx);
                denom += e;
                for (int d = 0; d < a.hd; ++d) acc[d] += e * keys[j][d];
            }
            float* out = a.out + th * a.hd;
            for (int d = 0; d < a.hd; ++d) out[d] = static_cast<float>(acc[d] / denom);
        }
    });
}

void ring_write(const ops::RingWriteArgs& a) {
    const int first = std::max(0, a.T - a.W);
    for (int t = first; t < a.T; ++t) {
        const int64_t slot = (a.pos0 + t) % a.W;
        std::copy(a.kv + static_cast<int64_t>(t) * a.hd, a.kv + static_cast<int64_t>(t + 1) * a.hd,
                  a.ring + slot * a.hd);
    }
}

}  // namespace dsv4::cpu_ref
