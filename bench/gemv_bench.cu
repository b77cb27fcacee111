// Weight-GEMV benchmark on the V4-Flash decode shapes (tools/bench_gemv.sh runs it on the H200).
//
// Every number is a CUDA-graph replay of R back-to-back launches divided by R, so launch gaps
// are those of a captured decode step. Weights rotate through a pool of copies (or of experts)
// of >= 600 MB, ten times the L2, so no launch finds its weights in L2. Weight bytes are random
// (valid codes); the kernels' speed does not depend on the values. The same run measures the
// pure-read bandwidth (a sum over 4 GiB) and the floor of an empty kernel launched the same way.
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
#include "backend/cuda/kernels/gemv/gemv.h"
#include "backend/cuda/kernels/gemv/gemv_repack.h"

namespace dsv4::cuda {
namespace {

constexpr size_t kPoolBytes = size_t{600} << 20;
constexpr int kReplays = 15;

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

__global__ void fill_floats(float* p, size_t n, uint32_t seed, float lo, float hi) {
    for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
         i += size_t{gridDim.x} * blockDim.x)
        p[i] = lo + (hi - lo) * (hash32(i, seed) >> 8) * (1.0f / 16777216.0f);
}

__global__ void fill_bf16(uint16_t* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
         i += size_t{gridDim.x} * blockDim.x) {
        const float v = ((hash32(i, seed) >> 8) * (1.0f / 16777216.0f) - 0.5f) * 4.0f;
        p[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);
    }
}

// Pure read: every byte of the buffer once, 4 independent 16-byte loads in flight per thread.
__global__ void read_sum(const uint4* p, size_t n, uint32_t* sink) {
    uint32_t acc = 0;
    const size_t stride = size_t{gridDim.x} * blockDim.x;
    size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const uint4 a = ptx::ld_stream_v4(p + i);
        const uint4 b = ptx::ld_stream_v4(p + i + stride);
        const uint4 c = ptx::ld_stream_v4(p + i + 2 * stride);
        const uint4 d = ptx::ld_stream_v4(p + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^
               d.z ^ d.w;
    }
    for (; i < n; i += stride) {
        const uint4 a = ptx::ld_stream_v4(p + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads alive; practically never stores
}

__global__ void empty_kernel() {
    ptx::griddep_launch_dependents();
    ptx::griddep_wait();
}

void fill(void* p, size_t n, uint32_t seed, uint32_t lo = 0, uint32_t span = 0) {
    fill_bytes<<<1024, 256>>>(static_cast<uint8_t*>(p), n, seed, lo, span);
    DSV4_CHECK_LAUNCH(nullptr);
}

template <typename F>
float graph_us_per_launch(cudaStream_t s, int launches, F&& enqueue) {
    CudaGraph::begin_capture(s);
    for (int r = 0; r < launches; ++r) enqueue(r);
    CudaGraph g;
    DSV4_CHECK_CUDA(CudaGraph::end_capture(s, &g));
    for (int i = 0; i < 3; ++i) g.launch(s);
    CudaEvent a = CudaEvent::create(), b = CudaEvent::create();
    std::vector<float> ms;
    for (int i = 0; i < kReplays; ++i) {
        a.record(s);
        g.launch(s);
        b.record(s);
        ms.push_back(CudaEvent::elapsed_ms(a, b));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1000.0f / static_cast<float>(launches);
}

float measure_read_bandwidth(cudaStream_t s, int sms) {
    const size_t bytes = size_t{4} << 30;
    void* buf = nullptr;
    uint32_t* sink = nullptr;
    DSV4_CHECK_CUDA(cudaMalloc(&buf, bytes));
    DSV4_CHECK_CUDA(cudaMalloc(&sink, 4));
    fill(buf, bytes, 1);
    std::vector<float> ms;
    CudaEvent a = CudaEvent::create(), b = CudaEvent::create();
    for (int i = 0; i < 13; ++i) {
        a.record(s);
        read_sum<<<sms * 8, 512, 0, s>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
        DSV4_CHECK_LAUNCH(s);
        b.record(s);
        const float t = CudaEvent::elapsed_ms(a, b);
        if (i >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    DSV4_CHECK_CUDA(cudaFree(buf));
    DSV4_CHECK_CUDA(cudaFree(sink));
    return static_cast<float>(bytes) / (ms[ms.size() / 2] * 1e-3f) / 1e9f;
}

struct Shape {
    const char* name;
    int64_t n, k;
    int groups;
    bool expert_ids;  // groups pick experts from a pool through device ids (routed experts)
    bool grouped_x;   // one activation row set per group
};

struct Result {
    std::string shape;
    std::string format;
    int m;
    std::string variant;
    double us, weight_bytes, act_bytes;
};

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

    // Times `shape` in `format` at the given m values; one weight pool per (shape, format).
    // `tune`: also time other pipeline depths and CTAs per SM (at M = 1) and launches without
    // PDL (every M).
    void run(const Shape& sh, GemvFormat format, const std::vector<int>& ms, bool tune,
             std::vector<Result>* out) {
        const GemvShape gs{format, sh.n, sh.k, 1};
        const int64_t tiles_b = gs.tiles_expert_bytes();
        const int64_t scales_b = gs.scales_expert_bytes();
        const int64_t unit = sh.expert_ids ? 1 : sh.groups;  // matrices per pool entry
        const int64_t entry_bytes = (tiles_b + scales_b) * unit;
        int64_t entries = std::max<int64_t>(sh.expert_ids ? sh.groups : 2,
                                            static_cast<int64_t>(kPoolBytes) / entry_bytes + 1);
        uint8_t* tiles = nullptr;
        uint8_t* scales = nullptr;
        float* out_scale = nullptr;
        DSV4_CHECK_CUDA(cudaMalloc(&tiles, static_cast<size_t>(tiles_b * unit * entries)));
        if (scales_b > 0)
            DSV4_CHECK_CUDA(cudaMalloc(&scales, static_cast<size_t>(scales_b * unit * entries)));
        const int64_t os_count = gs.row_blocks() * unit * entries;
        DSV4_CHECK_CUDA(cudaMalloc(&out_scale, static_cast<size_t>(os_count) * 4));
        fill(tiles, static_cast<size_t>(tiles_b * unit * entries), 11);
        if (format == GemvFormat::kNvfp4)
            fill(scales, static_cast<size_t>(scales_b * unit * entries), 12, 60, 60);
        if (format == GemvFormat::kMxfp4)
            fill(scales, static_cast<size_t>(scales_b * unit * entries), 12, 120, 20);
        if (format == GemvFormat::kFp8) {
            fill_floats<<<256, 256>>>(reinterpret_cast<float*>(scales),
                                      static_cast<size_t>(scales_b * unit * entries / 4), 12, 1e-3f,
                                      1e-2f);
            DSV4_CHECK_LAUNCH(nullptr);
        }
        fill_floats<<<256, 256>>>(out_scale, static_cast<size_t>(os_count), 13, 1e-3f, 2e-3f);
        DSV4_CHECK_LAUNCH(nullptr);

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
            GemvArgs a;
            a.format = format;
            a.w_tiles_expert_stride = tiles_b;
            a.w_scales_expert_stride = scales_b;
            a.n = static_cast<int32_t>(sh.n);
            a.k = static_cast<int32_t>(sh.k);
            a.row_blocks = static_cast<int32_t>(gs.row_blocks());
            a.k_tiles = static_cast<int32_t>(gs.k_tiles());
            a.n_groups = sh.groups;
            a.x = x_;
            a.m = m;
            a.ldx = sh.k;
            a.x_group_stride = sh.grouped_x ? m * sh.k : 0;
            a.y = y_;
            a.ldy = sh.n;
            a.y_group_stride = m * sh.n;
            gemv_workspace_bind(ws_, kMaxRowBlocks, &a);
            const double act = static_cast<double>((sh.grouped_x ? sh.groups : 1) * m * sh.k * 2 +
                                                   sh.groups * m * sh.n * 4);
            const double wbytes = static_cast<double>((tiles_b + scales_b) * sh.groups);
            struct Knobs {
                int depth, ctas;
                bool pdl;
            };
            std::vector<Knobs> knobs = {{2, 0, true}};
            if (tune) {
                knobs.push_back({2, 0, false});
                if (m == 1) {
                    for (Knobs k : {Knobs{4, 0, true}, Knobs{2, 2, true}, Knobs{2, 3, true}})
                        knobs.push_back(k);
                }
            }
            for (const Knobs& kn : knobs) {
                a.pdl = kn.pdl;
                GemvLaunchConfig cfg;
                cfg.sm_count = sms_;
                cfg.depth = kn.depth;
                cfg.ctas_per_sm = kn.ctas;
                const float us = graph_us_per_launch(s_, launches, [&](int r) {
                    GemvArgs ar = a;
                    if (sh.expert_ids) {
                        ar.w_tiles = tiles;
                        ar.w_scales = scales;
                        ar.out_scale = out_scale;
                        ar.expert_ids = ids + r * sh.groups;
                    } else {
                        const int64_t e = r % entries;
                        ar.w_tiles = tiles + e * tiles_b * unit;
                        ar.w_scales = scales ? scales + e * scales_b * unit : nullptr;
                        ar.out_scale = out_scale + e * gs.row_blocks() * unit;
                    }
                    launch_gemv(ar, cfg, s_);
                });
                const std::string variant = std::string(kn.pdl ? "pdl" : "no-pdl") + ",d" +
                                            std::to_string(kn.depth) +
                                            (kn.ctas ? "c" + std::to_string(kn.ctas) : "");
                out->push_back({sh.name, format_name(format), m, variant, us, wbytes, act});
            }
        }
        cudaFree(tiles);
        if (scales) cudaFree(scales);
        cudaFree(out_scale);
        if (ids) cudaFree(ids);
    }

    float empty_floor_us(bool pdl) {
        return graph_us_per_launch(s_, 64, [&](int) {
            cudaLaunchConfig_t cfg{};
            cfg.gridDim = dim3(static_cast<unsigned>(sms_ * 3));
            cfg.blockDim = dim3(128);
            cfg.stream = s_;
            cudaLaunchAttribute attr[1];
            attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attr[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = attr;
            cfg.numAttrs = pdl ? 1 : 0;
            DSV4_CHECK_CUDA(cudaLaunchKernelEx(&cfg, empty_kernel));
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
        {"experts_w13", 4096, 4096, 7, true, false},  // 7 x (w1 | w3) [2x2048 x 4096]
        {"experts_w2", 4096, 2048, 7, true, true},    // 7 x w2 [4096 x 2048]
        {"wq_b", 32768, 1024, 1, false, false},      {"wo_b", 4096, 8192, 1, false, false},
        {"head", 129280, 4096, 1, false, false},     {"wq_a", 1024, 4096, 1, false, false},
        {"wkv", 512, 4096, 1, false, false},         {"idx_wq_b", 8192, 1024, 1, false, false},
        {"wo_a", 1024, 4096, 8, false, true},  // 8 groups [1024 x 4096], one input each
    };
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
