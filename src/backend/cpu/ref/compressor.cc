// Reference KV compressor with the reference's buffer layout: HCA keeps the open block in
// slots [0, m); CSA keeps the previous complete block in [0, m) (only its first-half
// channels are read) and the open block in [m, 2m).
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/ref/ref_ops.h"

namespace dsv4::cpu_ref {
namespace {

// Per-channel softmax pooling of one entry from the state rows.
void pool_entry(const ops::CompressArgs& a, float* entry) {
    const int m = a.m, hd = a.hd, width = a.coff * hd;
    for (int c = 0; c < hd; ++c) {
        // (row, column) of each slot feeding channel c.
        auto slot = [&](int s, int* row, int* col) {
            if (a.coff == 2) {
                *row = s;
                *col = s < m ? c : hd + c;  // previous block's Ca, open block's Cb
            } else {
                *row = s;
                *col = c;
            }
        };
        const int slots = a.coff * m;
        float mx = -std::numeric_limits<float>::infinity();
        for (int s = 0; s < slots; ++s) {
            int r, col;
            slot(s, &r, &col);
            mx = std::max(mx, a.state_gate[r * width + col]);
        }
        double denom = 0, acc = 0;
        for (int s = 0; s < slots; ++s) {
            int r, col;
            slot(s, &r, &col);
            const float g = a.state_gate[r * width + col];
            if (g == -std::numeric_limits<float>::infinity()) continue;
            const double e = std::exp(static_cast<double>(g) - mx);
            denom += e;
            acc += e * a.state_kv[r * width + col];
        }
        entry[c] = static_cast<float>(acc / denom);
    }
}

}  // namespace

void compress(const ops::CompressArgs& a) {
    const int m = a.m, width = a.coff * a.hd;
    for (int t = 0; t < a.T; ++t) {
        const int64_t p = a.pos0 + t;
        const int i = static_cast<int>(p % m);
        const int row = a.coff == 2 ? m + i : i;
        const float* kv = a.kv + static_cast<int64_t>(t) * width;
        const float* gate = a.gate + static_cast<int64_t>(t) * width;
        for (int c = 0; c < width; ++c) {
            a.state_kv[row * width + c] = kv[c];
            a.state_gate[row * width + c] = gate[c] + a.ape[i * width + c];
        }
        if (i != m - 1) continue;
        pool_entry(a, a.entries + (p / m) * a.hd);
        if (a.coff == 2) {
            std::copy(a.state_kv + m * width, a.state_kv + 2 * m * width, a.state_kv);
            std::copy(a.state_gate + m * width, a.state_gate + 2 * m * width, a.state_gate);
        }
    }
}

}  // namespace dsv4::cpu_ref
