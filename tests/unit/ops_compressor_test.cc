// KV compressor: HCA (coff 1) and CSA overlap (coff 2) pooling, emission schedule, chunking.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/ref/ref_ops.h"
#include "unit_util.h"

namespace dsv4 {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kSentinel = -777.0f;

// One sequence's compressor state and output entries.
struct Comp {
    int m, hd, coff;
    std::vector<float> ape, state_kv, state_gate, entries;
    Comp(int m_, int hd_, int coff_, int capacity, std::vector<float> ape_ = {})
        : m(m_),
          hd(hd_),
          coff(coff_),
          ape(std::move(ape_)),
          state_kv(coff_ * m_ * coff_ * hd_, 0.0f),
          state_gate(coff_ * m_ * coff_ * hd_, kNegInf),
          entries(capacity * hd_, kSentinel) {
        if (ape.empty()) ape.assign(m * coff * hd, 0.0f);
    }
    // Feeds tokens [p0, p0 + T) whose rows start at kv/gate row p0.
    void feed(const std::vector<float>& kv, const std::vector<float>& gate, int p0, int T) {
        const int width = coff * hd;
        ops::HostStep step;
        step.add_row(0, p0, T);
        ops::CompressArgs a;
        a.kv = kv.data() + p0 * width;
        a.gate = gate.data() + p0 * width;
        a.ape = ape.data();
        a.state_kv = state_kv.data();
        a.state_gate = state_gate.data();
        a.entries = entries.data();
        a.step = step.view();
        a.n_entries = static_cast<int64_t>(entries.size()) / hd;
        a.m = m;
        a.hd = hd;
        a.coff = coff;
        cpu_ref::compress(a);  // norm == nullptr: the pooled entries themselves
    }
};

TEST(OpsCompress, HcaEqualGatesGiveMeanAndEmitAtBlockEnd) {
    // m = 3, hd = 2; token j has values [j, 10 j]; all gates 0.
    const int m = 3, hd = 2, S = 7;
    std::vector<float> kv, gate(S * hd, 0.0f);
    for (int j = 0; j < S; ++j) kv.insert(kv.end(), {float(j), float(10 * j)});
    Comp c(m, hd, 1, 3);
    c.feed(kv, gate, 0, 2);  // tokens 0, 1: block 0 still open
    EXPECT_EQ(c.entries[0], kSentinel);
    c.feed(kv, gate, 2, 1);               // token 2 = (p + 1) % m == 0 -> entry 0
    EXPECT_FLOAT_EQ(c.entries[0], 1.0f);  // mean(0, 1, 2)
    EXPECT_FLOAT_EQ(c.entries[1], 10.0f);
    EXPECT_EQ(c.entries[2], kSentinel);
    c.feed(kv, gate, 3, 4);               // tokens 3..6: entry 1 at token 5, token 6 stays open
    EXPECT_FLOAT_EQ(c.entries[2], 4.0f);  // mean(3, 4, 5)
    EXPECT_FLOAT_EQ(c.entries[3], 40.0f);
    EXPECT_EQ(c.entries[4], kSentinel);
    EXPECT_EQ(c.entries[5], kSentinel);
}

TEST(OpsCompress, HcaPerChannelSoftmaxWithApe) {
    // m = 2, hd = 2. Channel 0: gates (0, ln 3) -> weights (1/4, 3/4). Channel 1: gates (0, 0)
    // but ape = (ln 2, 0) at block positions (0, 1) -> weights (2/3, 1/3).
    const int m = 2, hd = 2;
    std::vector<float> kv = {4, 6, 8, 9};
    std::vector<float> gate = {0, 0, std::log(3.0f), 0};
    std::vector<float> ape = {0, std::log(2.0f), 0, 0};
    Comp c(m, hd, 1, 1, ape);
    c.feed(kv, gate, 0, 2);
    EXPECT_NEAR(c.entries[0], 0.25 * 4 + 0.75 * 8, 1e-5);
    EXPECT_NEAR(c.entries[1], 2.0 / 3 * 6 + 1.0 / 3 * 9, 1e-5);
}

TEST(OpsCompress, CsaOverlapPreviousFirstHalfPlusCurrentSecondHalf) {
    // m = 2, hd = 1, coff = 2: token j = [Ca, Cb] = [10 (j + 1), j + 1]; all gates 0.
    // Entry 0: Cb of tokens 0, 1 only (no previous block). Entry b: Ca of block b-1 + Cb of b.
    const int m = 2, hd = 1, S = 6;
    std::vector<float> kv, gate(S * 2, 0.0f);
    for (int j = 0; j < S; ++j) kv.insert(kv.end(), {10.0f * (j + 1), float(j + 1)});
    Comp c(m, hd, 2, 4);
    c.feed(kv, gate, 0, S);
    EXPECT_FLOAT_EQ(c.entries[0], 1.5f);                      // (1 + 2) / 2
    EXPECT_FLOAT_EQ(c.entries[1], (10 + 20 + 3 + 4) / 4.0f);  // 9.25
    EXPECT_FLOAT_EQ(c.entries[2], (30 + 40 + 5 + 6) / 4.0f);  // 20.25
    EXPECT_EQ(c.entries[3], kSentinel);
}

TEST(OpsCompress, CsaApeHalvesGoToTheirSlots) {
    // Ca of block b-1 uses ape[:, :hd], Cb of block b uses ape[:, hd:]. hd = 1, m = 2.
    const int m = 2;
    std::vector<float> kv = {1, 2, 3, 4, 5, 6, 7, 8};            // tokens 0..3: [Ca, Cb]
    std::vector<float> gate = {0.5f, 0, 0, 0.25f, 0, 0, -1, 0};  // [Za, Zb]
    std::vector<float> ape = {0.1f, 0.2f, 0.3f, 0.4f};           // [pos][Ca-ape, Cb-ape]
    Comp c(m, 1, 2, 2, ape);
    c.feed(kv, gate, 0, 4);
    // Entry 0: slots (Cb_0 = 2, Zb_0 + 0.2), (Cb_1 = 4, Zb_1 + 0.4).
    {
        const double w0 = std::exp(0.0 + 0.2), w1 = std::exp(0.25 + 0.4);
        EXPECT_NEAR(c.entries[0], (2 * w0 + 4 * w1) / (w0 + w1), 1e-5);
    }
    // Entry 1: (Ca_0 = 1, 0.5 + 0.1), (Ca_1 = 3, 0 + 0.3), (Cb_2 = 6, 0 + 0.2), (Cb_3 = 8, 0 +
    // 0.4).
    {
        const double w[4] = {std::exp(0.6), std::exp(0.3), std::exp(0.2), std::exp(0.4)};
        const double v[4] = {1, 3, 6, 8};
        double num = 0, den = 0;
        for (int i = 0; i < 4; ++i) num += w[i] * v[i], den += w[i];
        EXPECT_NEAR(c.entries[1], num / den, 1e-5);
    }
}

// Entry b straight from the spec's formula, from the whole sequence.
std::vector<float> naive_entries(const std::vector<float>& kv, const std::vector<float>& gate,
                                 const std::vector<float>& ape, int S, int m, int hd, int coff) {
    const int width = coff * hd, nb = S / m;
    std::vector<float> out(nb * hd);
    for (int b = 0; b < nb; ++b)
        for (int ch = 0; ch < hd; ++ch) {
            std::vector<double> z, v;
            for (int j = b * m; j < (b + 1) * m; ++j) {  // own block: Cb (CSA) or C (HCA)
                const int col = coff == 2 ? hd + ch : ch;
                z.push_back(gate[j * width + col] + ape[(j % m) * width + col]);
                v.push_back(kv[j * width + col]);
            }
            if (coff == 2 && b > 0)
                for (int j = (b - 1) * m; j < b * m; ++j) {  // previous block: Ca
                    z.push_back(gate[j * width + ch] + ape[(j % m) * width + ch]);
                    v.push_back(kv[j * width + ch]);
                }
            double mx = -1e300, num = 0, den = 0;
            for (double x : z) mx = std::max(mx, x);
            for (size_t i = 0; i < z.size(); ++i) {
                num += std::exp(z[i] - mx) * v[i];
                den += std::exp(z[i] - mx);
            }
            out[b * hd + ch] = static_cast<float>(num / den);
        }
    return out;
}

void check_chunking(int m, int hd, int coff) {
    const int S = 13, width = coff * hd, nb = S / m;
    const std::vector<float> kv = unit::lcg_values(S * width, 100 + coff);
    std::vector<float> gate = unit::lcg_values(S * width, 200 + coff);
    for (auto& g : gate) g *= 4.0f;
    const std::vector<float> ape = unit::lcg_values(m * width, 300 + coff);
    const std::vector<float> want = naive_entries(kv, gate, ape, S, m, hd, coff);

    Comp whole(m, hd, coff, nb + 1, ape);
    whole.feed(kv, gate, 0, S);
    for (int i = 0; i < nb * hd; ++i)
        EXPECT_NEAR(whole.entries[i], want[i], 1e-5) << "entry value " << i;
    for (int i = nb * hd; i < (nb + 1) * hd; ++i) EXPECT_EQ(whole.entries[i], kSentinel);

    const std::vector<std::vector<int>> splits = {{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
                                                  {3, 5, 5},
                                                  {m, 1, 12 - m},
                                                  {2 * m - 1, 13 - 2 * m + 1}};
    for (const auto& split : splits) {
        Comp c(m, hd, coff, nb + 1, ape);
        int p = 0;
        for (int len : split) {
            c.feed(kv, gate, p, len);
            p += len;
        }
        ASSERT_EQ(p, S);
        EXPECT_EQ(c.entries, whole.entries) << "split starting " << split[0] << "," << split[1];
    }
}

TEST(OpsCompress, HcaChunkedFeedingGivesIdenticalEntries) {
    check_chunking(3, 3, 1);
}
TEST(OpsCompress, CsaChunkedFeedingGivesIdenticalEntries) {
    check_chunking(4, 3, 2);
}
TEST(OpsCompress, CsaRate2ChunkedFeedingGivesIdenticalEntries) {
    check_chunking(2, 2, 2);
}

}  // namespace
}  // namespace dsv4
