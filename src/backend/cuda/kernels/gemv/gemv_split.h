// The bookkeeping of the GEMV kernels that host tests check without a GPU: which warp runs which
// units (the stream-K split), and for the GEMV chains (gemv_chain.h) which count a unit of the
// first GEMV adds to and which counts a segment of the second GEMV waits for. Shared by the
// kernels (gemv_kernel_sm90.cuh, gemv_chain_sm90.cu) and tests/cuda/gemv_layout_test.cc.
#pragma once

#include <cstdint>

#include "base/host_device.h"

namespace dsv4::cuda {

// The warp-to-unit split: warp w of W owns units [w * total / W, (w + 1) * total / W), W <= total.
struct GemvSplit {
    int64_t warps;
    int64_t total;
    DSV4_HD int first(int64_t w) const { return static_cast<int>(w * total / warps); }
    DSV4_HD int owner(int u) const {
        return static_cast<int>(((static_cast<int64_t>(u) + 1) * warps - 1) / total);
    }
};

// Units of the first GEMV of a chain behind one count: a group's (quads x k-tiles) for the
// SwiGLU link, a 64-row quad's k-tiles for the rows link. Units run group, quad, k-tile, so the
// count of unit u is u / chain_units_per_count.
DSV4_HD int chain_units_per_count(bool swiglu, int quads, int k_tiles) {
    return swiglu ? quads * k_tiles : k_tiles;
}

// The rows link: the counts (64-row quads of the first's output, of `quads` in all) that the
// second's k-tiles [t0, t_end) of tile_k values read, as [*lo, *hi].
DSV4_HD void chain_rows_counts(int t0, int t_end, int tile_k, int quads, int* lo, int* hi) {
    *lo = t0 * tile_k / 64;
    const int last = (t_end * tile_k - 1) / 64;
    *hi = last < quads - 1 ? last : quads - 1;
}

}  // namespace dsv4::cuda
