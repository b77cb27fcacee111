// Reference sampling: greedy, temperature, top-k, top-p, one xoshiro256** draw per sampled
// token from the row's slot generator (identical on every platform for a seed).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "base/xoshiro.h"

namespace dsv4::cpu_ref {
namespace {

int32_t argmax(const float* logits, int64_t V) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
        if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
}

}  // namespace

int32_t sample_row(const float* logits, int64_t V, const SamplingParams& p, uint64_t state[4],
                   int32_t draft) {
    if (p.temperature <= 0.0f || p.top_k == 1) return argmax(logits, V);
    thread_local std::vector<int32_t> order;
    thread_local std::vector<double> probs;
    order.resize(V);
    std::iota(order.begin(), order.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    };
    int64_t keep = (p.top_k > 0 && p.top_k < V) ? p.top_k : V;
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
    probs.resize(keep);
    const double mx = logits[order[0]];
    double sum = 0;
    for (int64_t i = 0; i < keep; ++i)
        sum += (probs[i] = std::exp((logits[order[i]] - mx) / p.temperature));
    if (p.top_p < 1.0f) {
        // Smallest prefix whose mass reaches top_p (at least one token).
        double mass = 0;
        int64_t cut = 0;
        while (cut < keep) {
            mass += probs[cut++] / sum;
            if (mass >= p.top_p) break;
        }
        keep = cut;
        sum = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
    }
    if (draft >= 0) {
        // Keep the draft with probability p(draft); else draw from the rest, renormalised.
        int64_t at = -1;
        for (int64_t i = 0; i < keep && at < 0; ++i)
            if (order[i] == draft) at = i;
        const double pd = at >= 0 ? probs[at] : 0.0;
        if (xoshiro_uniform(state) * sum < pd) return draft;
        if (at >= 0) {
            if (keep == 1) return draft;  // all the mass is on the draft
            sum -= pd;
            probs[at] = 0.0;
        }
    }
    const double r = xoshiro_uniform(state) * sum;
    double acc = 0;
    for (int64_t i = 0; i < keep; ++i) {
        acc += probs[i];
        if (r < acc) return order[i];
    }
    // Rounding left r at the very top: the last candidate with mass.
    for (int64_t i = keep - 1; i > 0; --i)
        if (probs[i] > 0) return order[i];
    return order[0];
}

void sample(const ops::SampleArgs& a) {
    for (int64_t r = 0; r < a.R; ++r) {
        const float* logits = a.logits + r * a.V;
        const bool finite =
            std::all_of(logits, logits + a.V, [](float v) { return std::isfinite(v); });
        a.out[r] = finite ? sample_row(logits, a.V, a.params[r], a.rng + 4 * int64_t{a.slot[r]},
                                       a.draft ? a.draft[r] : -1)
                          : -1;
    }
}

void logprobs(const ops::LogprobsArgs& a) {
    thread_local std::vector<int32_t> order;
    for (int64_t r = 0; r < a.R; ++r) {
        const float* logits = a.logits + r * a.V;
        float* top = a.top_logprob + r * a.n;
        int32_t* top_id = a.top_id + r * a.n;
        if (a.sampled[r] < 0) {  // non-finite logits: nothing to report
            a.logprob[r] = NAN;
            std::fill(top, top + a.n, NAN);
            std::fill(top_id, top_id + a.n, -1);
            continue;
        }
        const double mx = *std::max_element(logits, logits + a.V);
        double sum = 0;
        for (int64_t i = 0; i < a.V; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
        const double lse = mx + std::log(sum);
        auto lp = [&](int64_t i) { return static_cast<float>(logits[i] - lse); };
        a.logprob[r] = lp(a.sampled[r]);
        order.resize(a.V);
        std::iota(order.begin(), order.end(), 0);
        const int64_t n = std::min<int64_t>(a.n, a.V);
        std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t x, int32_t y) {
            return logits[x] > logits[y] || (logits[x] == logits[y] && x < y);
        });
        for (int j = 0; j < a.n; ++j) {
            top_id[j] = j < n ? order[j] : -1;
            top[j] = j < n ? lp(order[j]) : NAN;
        }
    }
}

void logits_rules(const ops::LogitsRulesArgs& a) {
    for (int64_t t = 0; t < a.T; ++t) {
        const int32_t slot = a.row_slot[a.tok_row[t]];
        const ops::SlotRules& rule = a.rules[slot];
        if (!rule.on || !rule.count) continue;
        uint32_t& w = a.counts[slot * a.V + a.ids[t]];
        w |= ops::kTokenSeen;
        if (a.tok_pos[t] >= rule.output_from) ++w;
    }
    for (int64_t r = 0; r < a.R; ++r) {
        const ops::SlotRules& rule = a.rules[a.slot[r]];
        if (!rule.on) continue;
        float* l = a.logits + r * a.V;
        const uint32_t* counts = a.counts + a.slot[r] * a.V;
        if (rule.count)
            for (int64_t v = 0; v < a.V; ++v) {
                const uint32_t w = counts[v], c = w & ~ops::kTokenSeen;
                float x = l[v];
                if ((w & ops::kTokenSeen) && rule.repetition != 1.0f)
                    x = x > 0.0f ? x / rule.repetition : x * rule.repetition;
                x = x - rule.frequency * static_cast<float>(c);
                if (c > 0) x = x - rule.presence;
                l[v] = x;
            }
        const int64_t generated = a.tok_pos[a.logit_idx[r]] + 1 - rule.output_from;
        const ops::LogitsRuleEntry* e = a.entries + a.slot[r] * a.E;
        for (int32_t i = 0; i < rule.n_entries; ++i) {
            float& x = l[e[i].token];
            x = e[i].ban && generated < rule.min_tokens ? std::numeric_limits<float>::lowest()
                                                        : x + e[i].bias;
        }
    }
}

}  // namespace dsv4::cpu_ref
