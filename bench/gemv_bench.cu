// Weight-GEMV benchmark on the V4-Flash decode shapes (tools/bench_gemv.sh runs it on the H200).
//
// Every number is a CUDA-graph replay of R back-to-back launches divided by R, so launch gaps
// are those of a captured decode step. Weights rotate through a pool of copies (or of experts)
// of >= 600 MB, ten times the L2, so no launch finds its weights in L2. Weight bytes are random
// (valid codes); the kernels' speed does not depend on the values. The same run measures the
// pure-read bandwidth (a sum over 4 GiB) and the floor of an empty kernel launched the same way,
// and probes of what a launch of the GEMV's sizes can reach (pure reads with three address
// mappings, the GEMV's cp.async ring without and with the NVFP4 math: "pattern" rows;
// docs/perf.md, "Session 1 follow-up").
//
// Output: a human table on stdout and CSV rows (prefix "csv,") for the merge script.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/device.h"
#include "backend/cuda/common/ptx_sm90.cuh"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/kernels/basic/basic.h"
#include "backend/cuda/kernels/gemv/gemv.h"
#include "backend/cuda/kernels/gemv/gemv_chain.h"
#include "backend/cuda/kernels/gemv/gemv_operands_sm90.cuh"
#include "backend/cuda/kernels/gemv/gemv_repack.h"
#include "backend/cuda/kernels/moe/moe.h"
#include "graph_timing.h"

namespace dsv4::cuda {
namespace {

constexpr size_t kPoolBytes = size_t{600} << 20;

__device__ __forceinline__ uint32_t hash32(uint64_t i, uint32_t seed) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull + seed;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return static_cast<uint32_t>(x);
}

__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed, uint32_t lo, uint32_t span) {
    for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
         i += size_t{gridDim.x} * blockDim.x)
        p[i] = static_cast<uint8_t>(span == 0 ? hash32(i, seed) : lo + hash32(i, seed) % span);
}

// A uniform draw in [0, 1) from element i's hash (24 bits).
__device__ __forceinline__ float uniform01(uint64_t i, uint32_t seed) {
    return (hash32(i, seed) >> 8) * (1.0f / 16777216.0f);
}

__global__ void fill_floats(float* p, size_t n, uint32_t seed, float lo, float hi) {
    for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
         i += size_t{gridDim.x} * blockDim.x)
        p[i] = lo + (hi - lo) * uniform01(i, seed);
}

__global__ void fill_bf16(uint16_t* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
         i += size_t{gridDim.x} * blockDim.x) {
        const float v = (uniform01(i, seed) - 0.5f) * 4.0f;
        p[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);
    }
}

// Access-pattern probe: the same pure read (8 independent 16-byte loads in flight per thread,
// 528 CTAs x 128 threads like the GEMV grid) with three mappings of threads to addresses:
//   0 interleaved: load j of iteration i of thread t reads element (8i + j) * T + t (T threads),
//     so at any moment the whole grid reads one contiguous window (launch_read_sum's pattern);
//   1 warp-blocked: warp w streams its own contiguous 1/W of the buffer, 2 KB per 4 loads (the
//     GEMV's stream-K mapping: ~2100 streams ~30 KB apart for a 66 MB launch);
//   2 CTA-blocked: CTA b streams its own contiguous 1/B, its 128 threads interleaved within it;
//   3 interleaved, launched with PDL: waits for the previous launch before its first load (as
//     a kernel whose input the previous one writes must), with its own launch already done.
__global__ void __launch_bounds__(128)
    pattern_read(const uint4* p, int64_t n, int mode, uint32_t* sink) {
    if (mode == 3) {
        ptx::griddep_wait();
        ptx::griddep_launch_dependents();
        mode = 0;
    }
    const int64_t T = int64_t{gridDim.x} * blockDim.x;
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int64_t warps = T / 32;
    const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
    int64_t base, stride, end;
    if (mode == 0) {
        base = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
        stride = T;
        end = n;
    } else if (mode == 1) {
        const int64_t chunk = (n / warps + 127) / 128 * 128;
        base = warp * chunk + lane;
        stride = 32;
        end = min(n, (warp + 1) * chunk);
    } else {
        const int64_t chunk = (n / gridDim.x + 1023) / 1024 * 1024;
        base = int64_t{blockIdx.x} * chunk + threadIdx.x;
        stride = blockDim.x;
        end = min(n, int64_t{blockIdx.x + 1} * chunk);
    }
    uint32_t acc = 0;
    for (int64_t i = base; i < end; i += 8 * stride) {
        uint4 v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            v[j] = make_uint4(0, 0, 0, 0);
            ptx::ldg_v4_if(i + j * stride < end, p + i + j * stride, v[j]);
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}

// Pipeline probe: the GEMV's streaming skeleton. Each warp streams a contiguous range of
// 2304-byte units (2 KB of tiles + 256 B of scales, NVFP4's unit) through a ring of kDepth
// shared-memory stages filled by cp.async, exactly as gemv_kernel does (wait, __syncwarp, issue
// the next unit, read the stage). Without kMath it XORs what it reads; with kMath it runs the
// GEMV's math on it: the NVFP4 decode of every tile (gemv_sm90::Decode) and its 4 MMAs against
// fixed activations. What the GEMV adds on top of that is the activation loads, the output
// scales and the outputs.
// kLayout: 0 = the GEMV's (tiles and scales in two arrays, each warp a contiguous range);
// 1 = each unit's scales stored right after its tiles (one 2304-byte run per unit);
// 2 = the GEMV's arrays with units dealt round-robin (warp w: units w, w + W, ...), so the
// grid reads one contiguous window at a time.
template <int kDepth, bool kMath, int kLayout = 0>
__global__ void __launch_bounds__(128, kMath ? 4 : 1)
    pipe_probe(const uint8_t* p, int64_t units, uint32_t* sink) {
    constexpr int kUnit = 2048, kScale = 256, kStage = kUnit + kScale;
    __shared__ __align__(128) uint8_t st[4][kDepth][kStage];
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int wic = static_cast<int>(threadIdx.x) >> 5;
    const int64_t W = int64_t{gridDim.x} * 4;
    const int64_t w = int64_t{blockIdx.x} * 4 + wic;
    const int64_t u0 = kLayout == 2 ? w : w * units / W;
    const int n =
        static_cast<int>(kLayout == 2 ? (units - w + W - 1) / W : (w + 1) * units / W - u0);
    const int64_t step = kLayout == 2 ? W : 1;  // units between a warp's consecutive units
    const int64_t tile_stride = kLayout == 1 ? kStage : kUnit;
    const uint8_t* tiles = p + u0 * tile_stride;
    const uint8_t* scales = kLayout == 1 ? tiles + kUnit : p + units * kUnit + u0 * kScale;
    const int64_t scale_stride = kLayout == 1 ? kStage : kScale;
    const uint32_t ring = ptx::smem_addr(&st[wic][0][0]);
    int li = 0;
    auto issue = [&]() {
        if (li < n) {
            const uint32_t dst = ring + static_cast<uint32_t>(li % kDepth) * kStage;
            const int64_t at = li * step;
#pragma unroll
            for (int r = 0; r < 4; ++r)
                ptx::cp_async_16(dst + r * 512 + lane * 16,
                                 tiles + at * tile_stride + r * 512 + lane * 16);
            ptx::cp_async_16_if(lane < 16, dst + kUnit + lane * 16,
                                scales + at * scale_stride + lane * 16);
            ++li;
        }
        ptx::cp_async_commit();
    };
    for (int i = 0; i < kDepth - 1; ++i) issue();
    uint32_t bits = 0;
    uint32_t xb[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) xb[j] = 0x3f803f80u ^ (static_cast<uint32_t>(lane + j) << 3);
    float acc[4][4] = {};
    for (int i = 0; i < n; ++i) {
        ptx::cp_async_wait<kDepth - 2>();
        __syncwarp();
        issue();
        const uint32_t src = ring + static_cast<uint32_t>(i % kDepth) * kStage;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            gemv_sm90::Slot cur;
            unsigned short sc;
            asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(cur.w.x), "=r"(cur.w.y), "=r"(cur.w.z), "=r"(cur.w.w)
                         : "r"(src + r * 512 + lane * 16));
            asm volatile("ld.shared.u16 %0, [%1];"
                         : "=h"(sc)
                         : "r"(src + kUnit + r * 64 + lane * 2));
            if constexpr (kMath) {
                cur.s = sc;
                uint32_t wa[4][4];
                gemv_sm90::Decode<GemvFormat::kNvfp4>::run(cur, wa);
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    ptx::mma_bf16_16816(acc[r], wa[j], xb[2 * j], xb[2 * j + 1]);
            } else {
                bits ^= cur.w.x ^ cur.w.y ^ cur.w.z ^ cur.w.w ^ sc;
            }
        }
        __syncwarp();
    }
    ptx::cp_async_wait<0>();
    float t = 0.0f;
#pragma unroll
    for (int r = 0; r < 4; ++r) t += acc[r][0] + acc[r][1] + acc[r][2] + acc[r][3];
    if (bits == 0x9e3779b9u || t == 1.2345f) sink[0] = bits ^ __float_as_uint(t);
}

// The router's stand-in in the MoE chain: writes the 7 expert ids of token `token` once the
// previous kernel (the last token's w2) has completed.
__global__ void write_ids(int32_t* ids, int token, int groups, int pool) {
    ptx::griddep_wait();
    if (static_cast<int>(threadIdx.x) < groups)
        ids[threadIdx.x] = (token * groups + static_cast<int>(threadIdx.x) * 5) % pool;
    ptx::griddep_launch_dependents();
}

__global__ void empty_kernel() {
    ptx::griddep_launch_dependents();
    ptx::griddep_wait();
}

// A latency-bound kernel's stand-in (Bench::behind): waits for its predecessor, lets its
// dependent launch, then spins `cycles` holding its shared memory.
__global__ void spin_kernel(long long cycles) {
    extern __shared__ uint8_t spin_smem[];
    ptx::griddep_wait();
    ptx::griddep_launch_dependents();
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    if (threadIdx.x == 0) spin_smem[0] = 1;
}

// A launch configuration with or without programmatic dependent launch.
struct PdlLaunch {
    cudaLaunchAttribute attr[1];
    cudaLaunchConfig_t config{};
    PdlLaunch(unsigned grid, unsigned block, cudaStream_t s, bool pdl) {
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        config.gridDim = dim3(grid);
        config.blockDim = dim3(block);
        config.stream = s;
        config.attrs = attr;
        config.numAttrs = pdl ? 1 : 0;
    }
    PdlLaunch(const PdlLaunch&) = delete;
    PdlLaunch& operator=(const PdlLaunch&) = delete;
};

void fill(void* p, size_t n, uint32_t seed, uint32_t lo = 0, uint32_t span = 0) {
    fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(p), n, seed, lo, span);
    DSV4_CHECK_LAUNCH(nullptr);
}

float measure_read_bandwidth(cudaStream_t s, int sms) {
    const size_t bytes = size_t{4} << 30;
    void* buf = nullptr;
    uint32_t* sink = nullptr;
    DSV4_CHECK_CUDA(cudaMalloc(&buf, bytes));
    DSV4_CHECK_CUDA(cudaMalloc(&sink, 4));
    fill(buf, bytes, 1);
    const double bw =
        dsv4::cuda::measure_read_bandwidth(buf, static_cast<int64_t>(bytes), sink, sms * 8, s);
    DSV4_CHECK_CUDA(cudaFree(buf));
    DSV4_CHECK_CUDA(cudaFree(sink));
    return static_cast<float>(bw / 1e9);
}

struct Shape {
    const char* name;
    int64_t n, k;
    int groups;
    bool expert_ids;  // groups pick experts from a pool through device ids (routed experts)
    bool grouped_x;   // one activation row set per group
    bool ids_ready;   // ids written two kernels back (w2 after w1|w3 after the router)
};

struct Result {
    std::string shape;
    std::string format;
    int m;
    std::string variant;
    double us, weight_bytes, act_bytes;
};

// One probe result: a "pattern" line for people and a csv,pattern row for the merge script.
void print_pattern(const char* name, int64_t bytes, float us, float read_gbs) {
    const double gbs = static_cast<double>(bytes) / (us * 1e-6) / 1e9;
    std::printf("pattern %-17s %7.1f MB %8.2f us %6.0f GB/s %5.1f%%\n", name, bytes / 1e6, us, gbs,
                100.0 * gbs / read_gbs);
    std::printf("csv,pattern,%s,%lld,%.3f\n", name, static_cast<long long>(bytes), us);
}

const char* format_name(GemvFormat f) {
    switch (f) {
        case GemvFormat::kNvfp4:
            return "nvfp4";
        case GemvFormat::kMxfp4:
            return "mxfp4";
        case GemvFormat::kFp8:
            return "fp8";
        case GemvFormat::kBf16:
            return "bf16";
    }
    return "?";
}

// Weights of one shape in one format: `entries` copies of `unit` matrices each (or, with
// unit 1, a pool of experts for device ids), >= kPoolBytes in all so that no launch finds its
// weights in L2, filled with random valid codes (the speed does not depend on the values).
class WeightPool {
  public:
    WeightPool(const GemvShape& gs, int64_t unit, int64_t min_entries)
        : tiles_b_(gs.tiles_expert_bytes()),
          scales_b_(gs.scales_expert_bytes()),
          row_blocks_(gs.row_blocks()),
          unit_(unit),
          entries_(
              std::max(min_entries,
                       static_cast<int64_t>(kPoolBytes) / ((tiles_b_ + scales_b_) * unit) + 1)) {
        const int64_t n = unit_ * entries_;
        DSV4_CHECK_CUDA(cudaMalloc(&tiles_, static_cast<size_t>(tiles_b_ * n)));
        if (scales_b_ > 0)
            DSV4_CHECK_CUDA(cudaMalloc(&scales_, static_cast<size_t>(scales_b_ * n)));
        DSV4_CHECK_CUDA(cudaMalloc(&out_scale_, static_cast<size_t>(row_blocks_ * n) * 4));
        fill(tiles_, static_cast<size_t>(tiles_b_ * n), 11);
        if (gs.format == GemvFormat::kNvfp4)
            fill(scales_, static_cast<size_t>(scales_b_ * n), 12, 60, 60);
        if (gs.format == GemvFormat::kMxfp4)
            fill(scales_, static_cast<size_t>(scales_b_ * n), 12, 120, 20);
        if (gs.format == GemvFormat::kFp8) {
            fill_floats<<<256, 256>>>(reinterpret_cast<float*>(scales_),
                                      static_cast<size_t>(scales_b_ * n / 4), 12, 1e-3f, 1e-2f);
            DSV4_CHECK_LAUNCH(nullptr);
        }
        fill_floats<<<256, 256>>>(out_scale_, static_cast<size_t>(row_blocks_ * n), 13, 1e-3f,
                                  2e-3f);
        DSV4_CHECK_LAUNCH(nullptr);
    }
    ~WeightPool() {
        cudaFree(tiles_);
        if (scales_) cudaFree(scales_);
        cudaFree(out_scale_);
    }
    WeightPool(const WeightPool&) = delete;
    WeightPool& operator=(const WeightPool&) = delete;

    int64_t entries() const { return entries_; }
    int64_t matrix_bytes() const { return tiles_b_ + scales_b_; }  // codes + block scales

    // Points `a` at entry e (its `unit` matrices); entry 0 of a unit-1 pool is the expert stack.
    void bind(int64_t e, GemvArgs* a) const {
        a->w_tiles = tiles_ + e * tiles_b_ * unit_;
        a->w_scales = scales_ ? scales_ + e * scales_b_ * unit_ : nullptr;
        a->out_scale = out_scale_ + e * row_blocks_ * unit_;
        a->w_tiles_expert_stride = tiles_b_;
        a->w_scales_expert_stride = scales_b_;
    }

  private:
    int64_t tiles_b_, scales_b_, row_blocks_, unit_, entries_;
    uint8_t* tiles_ = nullptr;
    uint8_t* scales_ = nullptr;
    float* out_scale_ = nullptr;
};

class Bench {
  public:
    Bench(int sms, cudaStream_t s) : sms_(sms), s_(s) {
        ws_bytes_ = gemv_workspace_bytes(kMaxRowBlocks);
        DSV4_CHECK_CUDA(cudaMalloc(&ws_, ws_bytes_));
        DSV4_CHECK_CUDA(cudaMemset(ws_, 0, ws_bytes_));
        DSV4_CHECK_CUDA(cudaMalloc(&x_, size_t{8} << 20));
        DSV4_CHECK_CUDA(cudaMalloc(&y_, size_t{8} << 20));
        fill_bf16<<<256, 256>>>(static_cast<uint16_t*>(x_), (size_t{8} << 20) / 2, 5);
        DSV4_CHECK_LAUNCH(nullptr);
    }
    ~Bench() {
        cudaFree(ws_);
        cudaFree(x_);
        cudaFree(y_);
    }

    // One launch configuration: CTAs per SM (0: as many as fit) x pipeline stages (0: 2), PDL,
    // accumulate mode (GemvArgs::y_accumulate).
    struct Knobs {
        int ctas, depth;
        bool pdl;
        bool acc = false;
        bool zero = false;  // accumulate into y the launch clears itself (GemvArgs::y_zero)
    };

    // Times `shape` in `format` at the given m values; one weight pool per (shape, format).
    // `tune`: also time other pipeline depths and CTAs per SM (at M = 1) and launches without
    // PDL (every M). `only`: time just that configuration (the profiler runs of --shape).
    void run(const Shape& sh, GemvFormat format, const std::vector<int>& ms, bool tune,
             std::vector<Result>* out, const Knobs* only = nullptr) {
        const GemvShape gs{format, sh.n, sh.k, 1};
        const int64_t unit = sh.expert_ids ? 1 : sh.groups;  // matrices per pool entry
        const WeightPool pool(gs, unit, sh.expert_ids ? sh.groups : 2);
        const int64_t entries = pool.entries();

        // Launch r uses pool entry r (copies) or experts 7r .. 7r+6 (routed experts).
        const int launches =
            static_cast<int>(std::min<int64_t>(sh.expert_ids ? entries / sh.groups : entries, 256));
        int32_t* ids = nullptr;
        if (sh.expert_ids) {
            std::vector<int32_t> h(static_cast<size_t>(launches * sh.groups));
            for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<int32_t>(i % entries);
            DSV4_CHECK_CUDA(cudaMalloc(&ids, h.size() * 4));
            DSV4_CHECK_CUDA(cudaMemcpy(ids, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
        }
        DSV4_CHECK_CUDA(cudaDeviceSynchronize());

        for (int m : ms) {
            GemvArgs a = shape_args(gs, sh.groups, m);
            a.x_group_stride = sh.grouped_x ? m * sh.k : 0;
            const double act = static_cast<double>((sh.grouped_x ? sh.groups : 1) * m * sh.k * 2 +
                                                   sh.groups * m * sh.n * 4);
            const double wbytes = static_cast<double>(pool.matrix_bytes() * sh.groups);
            // Main row: the defaults with PDL, plain and accumulating. Tuning (M = 1): CTAs per
            // SM (0: as many as fit) x pipeline stages (0: 2), and the defaults without PDL
            // (every M).
            std::vector<Knobs> knobs = {only != nullptr ? *only : Knobs{0, 0, true}};
            if (only == nullptr && !tune) knobs.push_back({0, 0, true, true});
            if (tune) {
                knobs.push_back({0, 0, false});
                knobs.push_back({0, 0, true, true});
                knobs.push_back({0, 0, true, true, true});
                if (m == 1) {
                    for (Knobs k : {Knobs{0, 4, true}, Knobs{2, 0, true}, Knobs{3, 0, true},
                                    Knobs{2, 4, true}, Knobs{0, 4, true, true},
                                    Knobs{2, 0, true, true}, Knobs{2, 4, true, true},
                                    Knobs{3, 0, true, true}, Knobs{0, 0, false, true}})
                        knobs.push_back(k);
                }
            }
            for (const Knobs& kn : knobs) {
                a.pdl = kn.pdl;
                // In a decode step w2 follows w1|w3, which followed the router: its ids were
                // written before its predecessor passed its wait (GemvArgs::ids_ready).
                a.ids_ready = sh.ids_ready;
                a.y_accumulate = kn.acc;
                a.y_zero = kn.zero;
                GemvLaunchConfig cfg;
                cfg.sm_count = sms_;
                cfg.depth = kn.depth;
                cfg.ctas_per_sm = kn.ctas;
                const float us = graph_us_per_launch(s_, launches, [&](int r) {
                    GemvArgs ar = a;
                    if (sh.expert_ids) {
                        pool.bind(0, &ar);
                        ar.expert_ids = ids + r * sh.groups;
                    } else {
                        pool.bind(r % entries, &ar);
                    }
                    launch_gemv(ar, cfg, s_);
                });
                const std::string variant =
                    std::string(kn.pdl ? "pdl" : "no-pdl") + "," +
                    (kn.ctas == 0 && kn.depth == 0
                         ? std::string(kn.zero  ? "acc0"
                                       : kn.acc ? "acc"
                                                : "main")
                         : "c" + std::to_string(kn.ctas) + "d" + std::to_string(kn.depth) +
                               (kn.acc ? "acc" : ""));
                out->push_back({sh.name, format_name(format), m, variant, us, wbytes, act});
            }
        }
        if (ids) cudaFree(ids);
    }

    // Probes on buffers of `bytes`, rotated through >= 600 MB like the weights, launched in a
    // graph like the GEMV (without PDL): the pure read with its three address mappings
    // (pattern_read), then the GEMV's cp.async ring without and with (pipe_probe)
    // the NVFP4 math. Prints "pattern" and csv,pattern rows.
    void patterns(int64_t bytes, float read_gbs) {
        const int64_t entries = static_cast<int64_t>(kPoolBytes) / bytes + 1;
        uint8_t* pool = nullptr;
        uint32_t* sink = nullptr;
        DSV4_CHECK_CUDA(cudaMalloc(&pool, static_cast<size_t>(bytes * entries)));
        DSV4_CHECK_CUDA(cudaMalloc(&sink, 4));
        fill(pool, static_cast<size_t>(bytes * entries), 21);
        DSV4_CHECK_CUDA(cudaDeviceSynchronize());
        const int launches = static_cast<int>(std::max<int64_t>(entries, 32));
        for (int mode = 0; mode < 4; ++mode) {
            const float us = graph_us_per_launch(s_, launches, [&](int r) {
                const uint4* p = reinterpret_cast<const uint4*>(pool + (r % entries) * bytes);
                const PdlLaunch lc(static_cast<unsigned>(sms_ * 4), 128, s_, mode == 3);
                DSV4_CHECK_CUDA(
                    cudaLaunchKernelEx(&lc.config, pattern_read, p, bytes / 16, mode, sink));
                DSV4_CHECK_LAUNCH(s_);
            });
            static const char* names[] = {"interleaved", "warp-blocked", "cta-blocked",
                                          "interleaved-pdl"};
            print_pattern(names[mode], bytes, us, read_gbs);
        }
        // The GEMV's pipeline without the math, on the same unit count (bytes / 2304).
        const int64_t units = bytes / 2304;
        struct Pipe {
            const char* name;
            void (*kernel)(const uint8_t*, int64_t, uint32_t*);
            int ctas_per_sm;
        };
        const Pipe pipes[] = {{"ring2-16w", pipe_probe<2, false>, 4},
                              {"ring4-16w", pipe_probe<4, false>, 4},
                              {"ring2-32w", pipe_probe<2, false>, 8},
                              {"ring3-24w", pipe_probe<3, false>, 6},
                              {"ring2-math", pipe_probe<2, true>, 4},
                              {"ring2-inline", pipe_probe<2, false, 1>, 4},
                              {"ring2-rr", pipe_probe<2, false, 2>, 4},
                              {"ring2-math-inline", pipe_probe<2, true, 1>, 4},
                              {"ring2-math-rr", pipe_probe<2, true, 2>, 4}};
        for (const Pipe& pp : pipes) {
            const float us = graph_us_per_launch(s_, launches, [&](int r) {
                const uint8_t* p = pool + (r % entries) * bytes;
                pp.kernel<<<sms_ * pp.ctas_per_sm, 128, 0, s_>>>(p, units, sink);
                DSV4_CHECK_LAUNCH(s_);
            });
            print_pattern(pp.name, units * 2304, us, read_gbs);
        }
        cudaFree(pool);
        cudaFree(sink);
    }

    // One MoE step per token as the decode step runs it: the router's stand-in writes the ids,
    // w1|w3 of the 7 experts (ids read after its wait), then w2 (ids ready: its predecessor
    // waited for the router). NVFP4, M = 1, weights rotated through >= 600 MB per matrix kind.
    // Prints csv,moe,<us per token>,<weight bytes per token>.
    void moe_chain(float read_gbs, bool accumulate) {
        const int groups = 7;
        const GemvShape s13{GemvFormat::kNvfp4, 4096, 4096, 1};
        const GemvShape s2{GemvFormat::kNvfp4, 4096, 2048, 1};
        const WeightPool p13(s13, 1, 0), p2(s2, 1, 0);
        const int tokens = 64;
        int32_t* ids = nullptr;
        DSV4_CHECK_CUDA(cudaMalloc(&ids, tokens * groups * 4));
        DSV4_CHECK_CUDA(cudaDeviceSynchronize());
        auto base_args = [&](const GemvShape& gs, const WeightPool& p) {
            GemvArgs a = shape_args(gs, groups, 1);
            p.bind(0, &a);
            a.pdl = true;
            return a;
        };
        GemvArgs a13 = base_args(s13, p13);
        GemvArgs a2 = base_args(s2, p2);
        a2.x_group_stride = s2.k;
        a2.ids_ready = true;
        float* weights = nullptr;  // the router weights of the combine
        DSV4_CHECK_CUDA(cudaMalloc(&weights, groups * 4));
        fill_floats<<<1, 32>>>(weights, groups, 34, 0.05f, 0.3f);
        DSV4_CHECK_LAUNCH(nullptr);
        if (accumulate) {
            // w1|w3 add into their (consumer-cleared) output; w2 adds each expert's output,
            // times its router weight, into one y: the combine.
            a13.y_accumulate = true;
            a2.y_accumulate = true;
            a2.y_group_stride = 0;
            a2.group_scale = weights;
        }
        GemvLaunchConfig cfg;
        cfg.sm_count = sms_;
        const int pool = static_cast<int>(std::min(p13.entries(), p2.entries()));
        const float us = graph_us_per_launch(s_, tokens, [&](int r) {
            const PdlLaunch lc(1, 32, s_, true);
            DSV4_CHECK_CUDA(
                cudaLaunchKernelEx(&lc.config, write_ids, ids + r * groups, r, groups, pool));
            DSV4_CHECK_LAUNCH(s_);
            GemvArgs x13 = a13, x2 = a2;
            x13.expert_ids = ids + r * groups;
            x2.expert_ids = ids + r * groups;
            launch_gemv(x13, cfg, s_);
            launch_gemv(x2, cfg, s_);
        });
        const double bytes = static_cast<double>(groups) * (p13.matrix_bytes() + p2.matrix_bytes());
        const double gbs = bytes / (us * 1e-6) / 1e9;
        const char* mode = accumulate ? "accumulate+combine" : "plain";
        std::printf(
            "moe chain %s (ids, w1|w3, w2) per token: %.2f us, %.1f MB, %.0f GB/s, %.1f%%\n", mode,
            us, bytes / 1e6, gbs, 100.0 * gbs / read_gbs);
        std::printf("csv,moe,%s,%.3f,%.0f\n", mode, us, bytes);
        cudaFree(weights);
        cudaFree(ids);
    }

    // The GEMV chains (gemv_chain.h) against the launches they replace, per token of a graph of
    // 64 (V4-Flash shapes, NVFP4, one token, f32 activations as two MMA columns, accumulating
    // outputs, PDL; weights rotated so that no launch finds them in L2):
    //   moe: the ids kernel, w1|w3 (7 groups), the SwiGLU kernel, w2 with the combine
    //        against the ids kernel and one chain launch (kSwiglu), with 2 and 4 copy stages;
    //   wo:  an empty kernel (attention's stand-in), wo_a (8 groups), wo_b
    //        against the empty kernel and one chain launch (kRows).
    // (The activations are the bench's random bits read as f32: the timing does not depend on
    // them.)
    void chains(float read_gbs) {
        const int groups = 7;
        const GemvShape s13{GemvFormat::kNvfp4, 4096, 4096, 1};
        const GemvShape s2{GemvFormat::kNvfp4, 4096, 2048, 1};
        const GemvShape sa{GemvFormat::kNvfp4, 1024, 4096, 1};
        const GemvShape sb{GemvFormat::kNvfp4, 4096, 8192, 1};
        const WeightPool p13(s13, 1, 0), p2(s2, 1, 0), pa(sa, 8, 0), pb(sb, 1, 0);
        const int tokens = 64;
        int32_t* ids = nullptr;
        float *weights = nullptr, *h = nullptr, *act = nullptr, *u = nullptr, *out = nullptr;
        uint32_t* ready = nullptr;
        DSV4_CHECK_CUDA(cudaMalloc(&ids, tokens * groups * 4));
        DSV4_CHECK_CUDA(cudaMalloc(&weights, groups * 4));
        DSV4_CHECK_CUDA(cudaMalloc(&h, groups * 4096 * 4));
        DSV4_CHECK_CUDA(cudaMalloc(&act, groups * 2048 * 4));
        DSV4_CHECK_CUDA(cudaMalloc(&u, 8192 * 4));
        DSV4_CHECK_CUDA(cudaMalloc(&out, 4096 * 4));
        const size_t ready_bytes = gemv_chain_workspace_bytes(4096);
        DSV4_CHECK_CUDA(cudaMalloc(&ready, ready_bytes));
        DSV4_CHECK_CUDA(cudaMemset(ready, 0, ready_bytes));
        fill_floats<<<1, 32>>>(weights, groups, 34, 0.05f, 0.3f);
        DSV4_CHECK_LAUNCH(nullptr);
        DSV4_CHECK_CUDA(cudaDeviceSynchronize());
        auto f32_args = [&](const GemvShape& gs, int n_groups, const void* x, float* y) {
            GemvArgs a = shape_args(gs, n_groups, 1);
            a.x = x;
            a.x_f32 = true;
            a.x_split = true;
            a.y = y;
            a.y_accumulate = true;
            a.pdl = true;
            return a;
        };
        GemvArgs a13 = f32_args(s13, groups, x_, h);
        a13.x_group_stride = 0;
        p13.bind(0, &a13);
        GemvArgs a2 = f32_args(s2, groups, act, out);
        a2.x_group_stride = s2.k;
        a2.y_group_stride = 0;
        a2.group_scale = weights;
        a2.ids_ready = true;
        p2.bind(0, &a2);
        const int pool = static_cast<int>(std::min(p13.entries(), p2.entries()));
        const double moe_bytes =
            static_cast<double>(groups) * (p13.matrix_bytes() + p2.matrix_bytes());
        auto report = [&](const char* name, double bytes, float us) {
            const double gbs = bytes / (us * 1e-6) / 1e9;
            std::printf("chain %-28s %8.2f us %7.1f MB %6.0f GB/s %5.1f%%\n", name, us, bytes / 1e6,
                        gbs, 100.0 * gbs / read_gbs);
            std::printf("csv,chain,%s,%.3f,%.0f\n", name, us, bytes);
        };
        auto ids_kernel = [&](int r) {
            const PdlLaunch lc(1, 32, s_, true);
            DSV4_CHECK_CUDA(
                cudaLaunchKernelEx(&lc.config, write_ids, ids + r * groups, r, groups, pool));
            DSV4_CHECK_LAUNCH(s_);
        };
        report("moe: w1|w3, SwiGLU, w2", moe_bytes, graph_us_per_launch(s_, tokens, [&](int r) {
                   ids_kernel(r);
                   GemvArgs x13 = a13, x2 = a2;
                   x13.expert_ids = ids + r * groups;
                   x2.expert_ids = ids + r * groups;
                   launch_gemv(x13, {sms_}, s_);
                   launch_moe_swiglu({h, nullptr, act, groups, 2048, 0.0f}, s_);
                   launch_gemv(x2, {sms_}, s_);
               }));
        for (int depth : {2, 4}) {
            const std::string name = "moe: one launch, depth " + std::to_string(depth);
            report(name.c_str(), moe_bytes, graph_us_per_launch(s_, tokens, [&](int r) {
                       ids_kernel(r);
                       GemvChainArgs c{a13, a2, GemvChainLink::kSwiglu, 0.0f, ready};
                       c.first.expert_ids = ids + r * groups;
                       c.second.expert_ids = ids + r * groups;
                       c.second.x = h;
                       c.second.ldx = s13.n;
                       c.second.x_group_stride = s13.n;
                       launch_gemv_chain(c, {sms_, 0, 0, depth}, s_);
                   }));
        }
        GemvArgs aa = f32_args(sa, 8, x_, u);
        aa.ldx = 8 * sa.k;
        aa.x_group_stride = sa.k;
        aa.ldy = 8 * sa.n;
        aa.y_group_stride = sa.n;
        GemvArgs ab = f32_args(sb, 1, u, out);
        const int wo_pool = static_cast<int>(std::min(pa.entries(), pb.entries()));
        const double wo_bytes = 8.0 * pa.matrix_bytes() + pb.matrix_bytes();
        auto empty = [&] {
            const PdlLaunch lc(static_cast<unsigned>(sms_), 128, s_, true);
            DSV4_CHECK_CUDA(cudaLaunchKernelEx(&lc.config, empty_kernel));
            DSV4_CHECK_LAUNCH(s_);
        };
        report("wo: wo_a, wo_b", wo_bytes, graph_us_per_launch(s_, tokens, [&](int r) {
                   empty();
                   GemvArgs xa = aa, xb = ab;
                   pa.bind(r % wo_pool, &xa);
                   pb.bind(r % wo_pool, &xb);
                   launch_gemv(xa, {sms_}, s_);
                   launch_gemv(xb, {sms_}, s_);
               }));
        for (int depth : {2, 4}) {
            const std::string name = "wo: one launch, depth " + std::to_string(depth);
            report(name.c_str(), wo_bytes, graph_us_per_launch(s_, tokens, [&](int r) {
                       empty();
                       GemvChainArgs c{aa, ab, GemvChainLink::kRows, 0.0f, ready};
                       pa.bind(r % wo_pool, &c.first);
                       pb.bind(r % wo_pool, &c.second);
                       launch_gemv_chain(c, {sms_, 0, 0, depth}, s_);
                   }));
        }
        for (void* p : {static_cast<void*>(ids), static_cast<void*>(weights), static_cast<void*>(h),
                        static_cast<void*>(act), static_cast<void*>(u), static_cast<void*>(out),
                        static_cast<void*>(ready)})
            cudaFree(p);
    }

    // Launch arguments for `groups` matrices of shape gs at m tokens, x and y from the bench's
    // buffers (one x for all groups, one y per group), workspace bound; weights not set.
    GemvArgs shape_args(const GemvShape& gs, int groups, int m) const {
        GemvArgs a;
        a.format = gs.format;
        a.n = static_cast<int32_t>(gs.n);
        a.k = static_cast<int32_t>(gs.k);
        a.row_blocks = static_cast<int32_t>(gs.row_blocks());
        a.k_tiles = static_cast<int32_t>(gs.k_tiles());
        a.n_groups = groups;
        a.x = x_;
        a.m = m;
        a.ldx = gs.k;
        a.y = y_;
        a.ldy = gs.n;
        a.y_group_stride = m * gs.n;
        gemv_workspace_bind(ws_, kMaxRowBlocks, &a);
        return a;
    }

    // A GEMV behind a latency-bound kernel (docs/perf.md, session 32): `blocks` blocks of 256
    // threads with `smem` bytes of shared memory each (the split attention kernel's shape:
    // 32 blocks, ~81 KB on a sliding layer) spin ~spin_us after their wait, then the GEMV (PDL,
    // f32 x, M = 1) follows, in plain mode (y =: split quads finished through the partials) and
    // in accumulate mode (y +=, into a y cleared earlier: fire-and-forget adds). Per pair, minus
    // the spin alone: what the GEMV adds behind a kernel its weights could stream under.
    void behind(const Shape& sh, int blocks, int smem, float spin_us) {
        const GemvShape gs{GemvFormat::kNvfp4, sh.n, sh.k, 1};
        const WeightPool pool(gs, sh.groups, 2);
        const int launches = static_cast<int>(std::min<int64_t>(pool.entries(), 128));
        const long long cycles = static_cast<long long>(spin_us * 1.7e3);  // ~1.7 GHz
        DSV4_CHECK_CUDA(
            cudaFuncSetAttribute(spin_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        auto spin = [&] {
            PdlLaunch lc(static_cast<unsigned>(blocks), 256, s_, true);
            lc.config.dynamicSmemBytes = static_cast<size_t>(smem);
            DSV4_CHECK_CUDA(cudaLaunchKernelEx(&lc.config, spin_kernel, cycles));
            DSV4_CHECK_LAUNCH(s_);
        };
        const float alone = graph_us_per_launch(s_, launches, [&](int) { spin(); });
        GemvArgs a = shape_args(gs, sh.groups, 1);
        a.x_f32 = true;
        a.x_group_stride = sh.grouped_x ? sh.k : 0;
        a.pdl = true;
        GemvLaunchConfig cfg;
        cfg.sm_count = sms_;
        float us[2];
        for (int mode = 0; mode < 2; ++mode) {
            a.y_accumulate = mode == 1;
            us[mode] = graph_us_per_launch(s_, launches, [&](int r) {
                spin();
                GemvArgs ar = a;
                pool.bind(r % pool.entries(), &ar);
                launch_gemv(ar, cfg, s_);
            });
        }
        std::printf(
            "behind %-10s %5.1f MB  spin %3d x 256 (%3d KB) %6.2f us | after the spin: plain "
            "%6.2f, accumulate %6.2f us\n",
            sh.name, static_cast<double>(pool.matrix_bytes() * sh.groups) / 1e6, blocks,
            smem / 1024, alone, us[0] - alone, us[1] - alone);
    }

    float empty_floor_us(bool pdl) {
        return graph_us_per_launch(s_, 64, [&](int) {
            const PdlLaunch lc(static_cast<unsigned>(sms_ * 3), 128, s_, pdl);
            DSV4_CHECK_CUDA(cudaLaunchKernelEx(&lc.config, empty_kernel));
            DSV4_CHECK_LAUNCH(s_);
        });
    }

  private:
    static constexpr int64_t kMaxRowBlocks = 129280 / 16 + 64;  // the head, the largest launch
    int sms_;
    cudaStream_t s_;
    void* ws_ = nullptr;
    size_t ws_bytes_ = 0;
    void* x_ = nullptr;
    void* y_ = nullptr;
};

int bench_main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
    // --chains: only the GEMV chains against the launches they replace (Bench::chains).
    // --shape NAME [acc | acc0] [d4] [nopdl]: only that shape, NVFP4, M = 1, in that configuration
    // (default: plain mode, 2 stages, PDL), no probes: for a profiler. Its timing runs on a
    // cold GPU (measured 5–9% slower than in the full run) and is not a benchmark number.
    const char* only = argc > 2 && std::strcmp(argv[1], "--shape") == 0 ? argv[2] : nullptr;
    Bench::Knobs only_knobs{0, 0, true};
    for (int i = 3; only != nullptr && i < argc; ++i) {
        only_knobs.acc |= std::strcmp(argv[i], "acc") == 0 || std::strcmp(argv[i], "acc0") == 0;
        only_knobs.zero |= std::strcmp(argv[i], "acc0") == 0;
        if (std::strcmp(argv[i], "d4") == 0) only_knobs.depth = 4;
        if (std::strcmp(argv[i], "nopdl") == 0) only_knobs.pdl = false;
    }
    auto dev = query_device(0);
    if (!dev) {
        std::fprintf(stderr, "gemv_bench: %s\n", dev.status().message().c_str());
        return 2;
    }
    const int sms = dev->sm_count;
    CudaStream stream = CudaStream::create();
    const float read_gbs = measure_read_bandwidth(stream.get(), sms);
    Bench bench(sms, stream.get());
    const float floor_pdl = bench.empty_floor_us(true);
    const float floor_plain = bench.empty_floor_us(false);
    std::printf("GPU %s, %d SMs, L2 %zu MB\n", dev->name.c_str(), sms, dev->l2_bytes >> 20);
    std::printf("pure read bandwidth (sum over 4 GiB): %.0f GB/s\n", read_gbs);
    std::printf("empty kernel in a graph: %.2f us (pdl), %.2f us (no pdl)\n", floor_pdl,
                floor_plain);
    std::printf("csv,meta,read_gbs,%.1f\ncsv,meta,floor_pdl_us,%.3f\ncsv,meta,floor_us,%.3f\n",
                read_gbs, floor_pdl, floor_plain);

    const Shape shapes[] = {
        {"experts_w13", 4096, 4096, 7, true, false, false},  // 7 x (w1 | w3) [2x2048 x 4096]
        {"experts_w2", 4096, 2048, 7, true, true, true},     // 7 x w2 [4096 x 2048]
        {"wq_b", 32768, 1024, 1, false, false, false},
        {"wo_b", 4096, 8192, 1, false, false, false},
        {"head", 129280, 4096, 1, false, false, false},
        {"wq_a", 1024, 4096, 1, false, false, false},
        {"wkv", 512, 4096, 1, false, false, false},
        {"idx_wq_b", 8192, 1024, 1, false, false, false},
        {"wo_a", 1024, 4096, 8, false, true, false},  // 8 groups [1024 x 4096], one input each
        // wq_a and wkv read the same normed hidden state: one launch of both, concatenated.
        {"wq_a|wkv", 1536, 4096, 1, false, false, false},
    };
    if (argc > 1 && std::strcmp(argv[1], "--behind") == 0) {  // GEMVs behind a spinning kernel
        for (const Shape& sh : shapes) {
            if (sh.expert_ids || std::strcmp(sh.name, "head") == 0) continue;
            for (float spin_us : {1.0f, 5.0f, 15.0f}) bench.behind(sh, 32, 81 * 1024, spin_us);
        }
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "--chains") == 0) {  // the GEMV chains alone
        bench.chains(read_gbs);
        return 0;
    }
    if (only != nullptr) {
        std::vector<Result> results;
        for (const Shape& sh : shapes) {
            if (std::strcmp(sh.name, only) == 0)
                bench.run(sh, GemvFormat::kNvfp4, {1}, false, &results, &only_knobs);
        }
        for (const Result& r : results)
            std::printf("%s %s %.2f us\n", r.shape.c_str(), r.variant.c_str(), r.us);
        return results.empty() ? 2 : 0;
    }
    // What a launch of these sizes can reach (docs/perf.md, "Session 1 follow-up"): the NVFP4
    // bytes of experts_w13 (66 MB), experts_w2 (33 MB), wq_b / wo_b (18.9 MB) and the head.
    for (int64_t bytes : {66060288ll, 33030144ll, 18874368ll, 297861120ll})
        bench.patterns(bytes / 4096 * 4096, read_gbs);
    bench.moe_chain(read_gbs, false);
    bench.moe_chain(read_gbs, true);
    bench.chains(read_gbs);
    std::vector<Result> results;
    const std::vector<int> all_m = quick ? std::vector<int>{1} : std::vector<int>{1, 2, 4, 8};
    for (const Shape& sh : shapes) {
        bench.run(sh, GemvFormat::kNvfp4, all_m, true, &results);
    }
    if (!quick) {
        for (const Shape& sh : shapes) {
            bench.run(sh, GemvFormat::kMxfp4, {1}, false, &results);
            bench.run(sh, GemvFormat::kFp8, {1}, false, &results);
            bench.run(sh, GemvFormat::kBf16, {1}, false, &results);
        }
        bench.run(shapes[0], GemvFormat::kNvfp4, {16}, false, &results);
    }

    std::printf("\n%-12s %-6s %2s %-10s %9s %10s %9s %7s\n", "shape", "format", "M", "variant",
                "us", "MB", "GB/s", "%read");
    for (const Result& r : results) {
        const double gbs = (r.weight_bytes + r.act_bytes) / (r.us * 1e-6) / 1e9;
        std::printf("%-12s %-6s %2d %-10s %9.2f %10.2f %9.0f %6.1f%%\n", r.shape.c_str(),
                    r.format.c_str(), r.m, r.variant.c_str(), r.us, r.weight_bytes / 1e6, gbs,
                    100.0 * gbs / read_gbs);
        std::printf("csv,gemv,%s,%s,%d,%s,%.3f,%.0f,%.0f\n", r.shape.c_str(), r.format.c_str(), r.m,
                    r.variant.c_str(), r.us, r.weight_bytes, r.act_bytes);
    }
    return 0;
}

}  // namespace
}  // namespace dsv4::cuda

int main(int argc, char** argv) {
    return dsv4::cuda::bench_main(argc, argv);
}
