// Host-only checks of the GEMV weight layout (no GPU needed; runs in CPU CI, which proves the
// CUDA targets built): the E2M1 bit placement, the repack against dequant_row, a lane-by-lane
// model of the kernel's mma.m16n8k16 fragments that must reproduce the CPU reference GEMV, and
// the GEMV chains' bookkeeping (gemv_split.h) over many grid sizes.
#include "backend/cuda/kernels/gemv/gemv_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "backend/cuda/common/device.h"
#include "backend/cuda/common/device_arena.h"
#include "backend/cuda/kernels/gemv/gemv.h"
#include "backend/cuda/kernels/gemv/gemv_repack.h"
#include "backend/cuda/kernels/gemv/gemv_split.h"
#include "base/fp_codes.h"
#include "cuda_test_util.h"

namespace dsv4::cuda {
namespace {

using test::OwnedWeight;
using test::TestFormat;

TEST(GemvLayout, E2m1SourceBitsAreABijection) {
    std::set<int> seen;
    for (int o = 0; o < 4; ++o)
        for (int h = 0; h < 2; ++h)
            for (int b = 0; b < 4; ++b) seen.insert(e2m1_source_bit(o, h, b));
    EXPECT_EQ(seen.size(), 32u);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), 31);
}

TEST(GemvLayout, E2m1DecodeGivesEveryCodeTimes2PowMinus126) {
    for (int o = 0; o < 4; ++o) {
        for (int h = 0; h < 2; ++h) {
            for (int code = 0; code < 16; ++code) {
                uint32_t q = 0;
                for (int b = 0; b < 4; ++b)
                    if ((code >> b) & 1) q |= 1u << e2m1_source_bit(o, h, b);
                uint32_t out[4];
                e2m1x8_to_bf16x2(q, out);
                for (int oo = 0; oo < 4; ++oo) {
                    const uint32_t expect_nonzero = (oo == o) ? 1u : 0u;
                    const uint16_t half = static_cast<uint16_t>(h ? out[oo] >> 16 : out[oo]);
                    const uint16_t other = static_cast<uint16_t>(h ? out[oo] : out[oo] >> 16);
                    EXPECT_EQ(other, 0) << "o=" << o << " h=" << h << " code=" << code;
                    if (!expect_nonzero) {
                        EXPECT_EQ(half, 0);
                        continue;
                    }
                    const float v = bf16_to_f32(half);
                    const float want = std::ldexp(e2m1_to_f32(static_cast<uint8_t>(code)), -126);
                    EXPECT_EQ(v, want) << "o=" << o << " h=" << h << " code=" << code;
                }
            }
        }
    }
}

TEST(GemvLayout, Nvfp4ScaleCodesCoverEveryE4m3Scale) {
    for (int v = 1; v < 0x7f; ++v) {
        OwnedWeight o;
        o.data.assign(8, 0x22);  // codes 2 (1.0)
        o.scale.assign(1, static_cast<uint8_t>(v));
        QuantWeight& w = o.w;
        w.format = WeightFormat::kNvfp4;
        w.rows = 1;
        w.cols = 16;
        w.dtype = DType::kU8;
        w.data = o.data.data();
        w.scale_dtype = DType::kF8E4M3;
        w.scale = o.scale.data();
        w.scale_cols = 1;
        w.global_scale = 0.5f;
        const QuantWeight* parts[] = {&w};
        auto packed = gemv_repack(parts, 1, 1);
        ASSERT_TRUE(packed) << packed.status().message();
        float row[16];
        gemv_unpack_row(*packed, 0, 0, row);
        EXPECT_EQ(row[0], e4m3_to_f32(static_cast<uint8_t>(v)) * 0.5f) << "scale byte " << v;
    }
}

// Repack then unpack through the kernel's decode equals dequant_row.
void expect_roundtrip(TestFormat f, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    OwnedWeight o = test::random_weight(f, rows, cols, rng);
    const QuantWeight* parts[] = {&o.w};
    auto packed = gemv_repack(parts, 1, 1);
    ASSERT_TRUE(packed) << packed.status().message();
    std::vector<float> want(static_cast<size_t>(cols)), got(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
        dequant_row(o.w, r, want.data());
        gemv_unpack_row(*packed, 0, r, got.data());
        for (int64_t k = 0; k < cols; ++k) {
            const float a = want[static_cast<size_t>(k)], b = got[static_cast<size_t>(k)];
            // One rounding apart at most: the repack folds the E4M3 scale into the bf16 weight
            // exactly and applies the global scale last; dequant_row multiplies scale*global
            // first.
            ASSERT_LE(std::fabs(a - b), 1.2e-7f * std::fabs(a))
                << test::test_format_name(f) << " [" << rows << "x" << cols << "] r=" << r
                << " k=" << k << " want " << a << " got " << b;
        }
    }
}

TEST(GemvLayout, RepackRoundTrips) {
    uint32_t seed = 11;
    for (TestFormat f :
         {TestFormat::kNvfp4, TestFormat::kFp8E8m0, TestFormat::kFp8F32, TestFormat::kBf16}) {
        expect_roundtrip(f, 17, 48, seed++);
        expect_roundtrip(f, 64, 256, seed++);
        expect_roundtrip(f, 133, 1024, seed++);
    }
    expect_roundtrip(TestFormat::kMxfp4, 17, 96, seed++);
    expect_roundtrip(TestFormat::kMxfp4, 133, 1024, seed++);
}

// The kernel's arithmetic, lane by lane: A fragments from the tiles, B fragments from the
// activations, D += A * B with the register ownership of mma.m16n8k16 (ptx_sm90.cuh).
std::vector<double> emulate_kernel(const GemvPacked& p, int expert, const std::vector<float>& x,
                                   int m) {
    const GemvShape& s = p.shape;
    const int tile_k = gemv_tile_k(s.format), lane_k = gemv_lane_k(s.format);
    const int steps = gemv_ksteps(s.format);
    const int64_t T = s.k_tiles(), RB = s.row_blocks();
    std::vector<double> y(static_cast<size_t>(m * s.n), 0.0);
    auto bf = [](uint32_t w, int half) {
        return bf16_to_f32(static_cast<uint16_t>(w >> (16 * half)));
    };
    for (int64_t rb = 0; rb < RB; ++rb) {
        std::vector<double> acc(16 * 8 * 2, 0.0);  // [row 16][token 16]
        for (int64_t t = 0; t < T; ++t) {
            const int64_t tile = expert * RB * T + gemv_tile_index(rb, t, T);
            float A[4][16][16] = {};
            float B[4][16][16] = {};
            float post_scale = 1.0f;
            for (int lane = 0; lane < 32; ++lane) {
                const int g = lane / 4, c = lane % 4;
                uint32_t w[4];
                std::memcpy(w, p.tiles.data() + tile * kGemvTileBytes + lane * kGemvLaneBytes, 16);
                uint32_t a[4][4] = {};
                if (s.format == GemvFormat::kNvfp4 || s.format == GemvFormat::kMxfp4) {
                    const uint8_t* sc = p.scales.data() + tile * gemv_tile_scale_bytes(s.format) +
                                        gemv_lane_scale_offset(s.format, lane);
                    const bool nv = s.format == GemvFormat::kNvfp4;
                    const float sg = bf16_to_f32(static_cast<uint16_t>(
                        nv ? nvfp4_code_bits(sc[0]) : mxfp4_code_bits(sc[0])));
                    const float sg8 = bf16_to_f32(static_cast<uint16_t>(
                        nv ? nvfp4_code_bits(sc[1]) : mxfp4_code_bits(sc[1])));
                    for (int j = 0; j < 4; ++j) {
                        uint32_t o[4];
                        e2m1x8_to_bf16x2(w[j], o);
                        for (int r = 0; r < 4; ++r) {
                            const float sr = (r % 2 == 0) ? sg : sg8;
                            const uint32_t lo = f32_to_bf16(bf(o[r], 0) * sr);
                            const uint32_t hi = f32_to_bf16(bf(o[r], 1) * sr);
                            a[j][r] = lo | (hi << 16);
                        }
                    }
                } else if (s.format == GemvFormat::kFp8) {
                    for (int j = 0; j < 2; ++j) {
                        auto cvt = [](uint32_t v16) {
                            const uint32_t lo = f32_to_bf16(e4m3_to_f32(static_cast<uint8_t>(v16)));
                            const uint32_t hi =
                                f32_to_bf16(e4m3_to_f32(static_cast<uint8_t>(v16 >> 8)));
                            return lo | (hi << 16);
                        };
                        a[j][0] = cvt(w[2 * j] & 0xffff);
                        a[j][2] = cvt(w[2 * j] >> 16);
                        a[j][1] = cvt(w[2 * j + 1] & 0xffff);
                        a[j][3] = cvt(w[2 * j + 1] >> 16);
                    }
                    post_scale = reinterpret_cast<const float*>(p.scales.data())[tile];
                } else {
                    for (int r = 0; r < 4; ++r) a[0][r] = w[r];
                }
                // A ownership: a0 = A[g][2c..], a1 = A[g+8][2c..], a2 = A[g][2c+8..], a3 =
                // A[g+8][2c+8..]
                for (int j = 0; j < steps; ++j) {
                    for (int hh = 0; hh < 2; ++hh) {
                        A[j][g][2 * c + hh] = bf(a[j][0], hh);
                        A[j][g + 8][2 * c + hh] = bf(a[j][1], hh);
                        A[j][g][2 * c + 8 + hh] = bf(a[j][2], hh);
                        A[j][g + 8][2 * c + 8 + hh] = bf(a[j][3], hh);
                    }
                }
                // B ownership: b0 = B[2c..2c+1][g], b1 = B[2c+8..2c+9][g]; lane (g, c) holds token
                // g's activations k0 .. k0 + lane_k (b0_j = local 4j, 4j+1; b1_j = 4j+2, 4j+3).
                for (int nt = 0; nt < 2; ++nt) {
                    const int token = g + 8 * nt;
                    const int64_t k0 = t * tile_k + c * lane_k;
                    for (int j = 0; j < steps; ++j) {
                        for (int q = 0; q < 4; ++q) {
                            const int64_t k = k0 + 4 * j + q;
                            const float v = (token < m && k < s.k)
                                                ? x[static_cast<size_t>(token * s.k + k)]
                                                : 0.0f;
                            const int kl = q < 2 ? 2 * c + q : 2 * c + 8 + (q - 2);
                            B[j][kl][token] = v;
                        }
                    }
                }
            }
            for (int j = 0; j < steps; ++j)
                for (int row = 0; row < 16; ++row)
                    for (int col = 0; col < 16; ++col) {
                        double d = 0.0;
                        for (int kl = 0; kl < 16; ++kl)
                            d += static_cast<double>(A[j][row][kl]) * B[j][kl][col];
                        acc[row * 16 + col] += d * post_scale;
                    }
        }
        const float os = p.out_scale[static_cast<size_t>(expert * RB + rb)];
        for (int row = 0; row < 16; ++row) {
            const int64_t n = rb * 16 + row;
            if (n >= s.n) continue;
            for (int tok = 0; tok < m; ++tok)
                y[static_cast<size_t>(tok * s.n + n)] = acc[row * 16 + tok] * os;
        }
    }
    return y;
}

void expect_emulation_matches(TestFormat f, int64_t n, int64_t k, int m, uint32_t seed) {
    std::mt19937 rng(seed);
    OwnedWeight o = test::random_weight(f, n, k, rng);
    const QuantWeight* parts[] = {&o.w};
    auto packed = gemv_repack(parts, 1, 1);
    ASSERT_TRUE(packed) << packed.status().message();
    const std::vector<float> x =
        test::from_bf16(test::to_bf16(test::random_activations(m * k, rng)));
    std::vector<double> want(static_cast<size_t>(m * n)), abs_sum(want.size());
    test::reference_gemv(o.w, x.data(), m, want.data(), abs_sum.data());
    const std::vector<double> got = emulate_kernel(*packed, 0, x, m);
    for (size_t i = 0; i < want.size(); ++i)
        ASSERT_LE(std::fabs(got[i] - want[i]), 2e-7 * abs_sum[i] + 1e-30)
            << test::test_format_name(f) << " [" << n << "x" << k << "] m=" << m << " i=" << i
            << " want " << want[i] << " got " << got[i];
}

TEST(GemvLayout, FragmentModelMatchesReference) {
    uint32_t seed = 101;
    for (TestFormat f : {TestFormat::kNvfp4, TestFormat::kFp8F32, TestFormat::kBf16}) {
        expect_emulation_matches(f, 17, 48, 1, seed++);
        expect_emulation_matches(f, 40, 320, 3, seed++);
        expect_emulation_matches(f, 32, 128, 16, seed++);
    }
    expect_emulation_matches(TestFormat::kMxfp4, 17, 96, 2, seed++);
    expect_emulation_matches(TestFormat::kMxfp4, 48, 256, 9, seed++);
}

TEST(GemvLayout, ConcatenatedPartsKeepTheirOwnScales) {
    std::mt19937 rng(7);
    OwnedWeight w1 = test::random_weight(TestFormat::kNvfp4, 32, 64, rng);
    OwnedWeight w3 = test::random_weight(TestFormat::kNvfp4, 32, 64, rng);
    w3.w.global_scale = 0.125f;
    const QuantWeight* parts[] = {&w1.w, &w3.w, &w1.w, &w3.w};
    auto packed = gemv_repack(parts, 2, 2);
    ASSERT_TRUE(packed) << packed.status().message();
    EXPECT_EQ(packed->shape.n, 64);
    std::vector<float> want(64), got(64);
    for (int e = 0; e < 2; ++e) {
        for (int64_t r = 0; r < 64; ++r) {
            dequant_row(r < 32 ? w1.w : w3.w, r % 32, want.data());
            gemv_unpack_row(*packed, e, r, got.data());
            for (int k = 0; k < 64; ++k)
                ASSERT_LE(std::fabs(want[k] - got[k]), 1.2e-7f * std::fabs(want[k]))
                    << r << " " << k;
        }
    }
}

TEST(GemvLayout, RejectsWhatTheKernelsCannotRead) {
    std::mt19937 rng(3);
    OwnedWeight mx = test::random_weight(TestFormat::kMxfp4, 16, 64, rng);
    mx.scale[0] = 1;
    mx.scale[1] = 200;  // a 199-binade span
    const QuantWeight* p1[] = {&mx.w};
    EXPECT_FALSE(gemv_repack(p1, 1, 1));
    mx.scale[1] = 0xff;  // NaN
    EXPECT_FALSE(gemv_repack(p1, 1, 1));

    OwnedWeight nv = test::random_weight(TestFormat::kNvfp4, 16, 64, rng);
    nv.scale[2] = 0x7f;  // NaN
    const QuantWeight* p2[] = {&nv.w};
    EXPECT_FALSE(gemv_repack(p2, 1, 1));

    std::vector<float> f32(16 * 64, 1.0f);
    QuantWeight dense;
    dense.rows = 16;
    dense.cols = 64;
    dense.dtype = DType::kF32;
    dense.data = f32.data();
    const QuantWeight* p3[] = {&dense};
    EXPECT_FALSE(gemv_repack(p3, 1, 1));

    OwnedWeight odd = test::random_weight(TestFormat::kNvfp4, 20, 64, rng);
    const QuantWeight* p4[] = {&odd.w, &odd.w};
    EXPECT_FALSE(gemv_repack(p4, 1, 2)) << "a 20-row part cannot be followed by another part";
}

TEST(GemvLayout, SizesAndArenaPlan) {
    GemvShape s{GemvFormat::kNvfp4, 2048, 4096, 7};
    EXPECT_EQ(s.row_blocks(), 128);
    EXPECT_EQ(s.k_tiles(), 64);
    EXPECT_EQ(s.tiles_expert_bytes(), 2048 * 4096 / 2);
    EXPECT_EQ(s.scales_expert_bytes(), 2048 * 4096 / 16);
    ArenaPlan plan;
    plan.add(10);
    plan.add(300);
    EXPECT_EQ(plan.total(), 256u + 300u);
    EXPECT_GE(gemv_workspace_bytes(1792), 1792u / 4 * 16 * 64 * 4 + 1792u * 4);
}

TEST(GemvLayout, NoGpuIsReportedNotFatal) {
    // On CPU CI this is the "no device" path; on the H200 it finds the GPU. Neither may abort.
    const bool has = gpu_available();
    const auto info = query_device(0);
    if (!has) {
        EXPECT_FALSE(info.has_value());
    } else if (info) {
        EXPECT_GT(info->sm_count, 0);
    }
}

// The GEMV chains' bookkeeping (gemv_split.h, the functions the chain kernel calls), played out
// for every warp of grids of 1 to 8448 warps: each count of the first GEMV receives exactly its
// units from the warps' ranges (what the waits compare against), and every count is waited for
// by some warp of the second GEMV before it reads what the count covers (so the last warp out may
// reset them all). Shapes: V4-Flash's wo_a then wo_b in NVFP4, FP8 and BF16 tiles, its one-token
// MoE (6 experts and the shared one), and odd shapes (padded quads, k past the last tile).
TEST(GemvChainPlan, EveryCountArrivesAndIsWaitedFor) {
    struct Gemv {
        int groups, quads, k_tiles;
    };
    struct Shape {
        const char* name;
        bool swiglu;
        Gemv first, second;
        int tile_k;  // the second's
        int64_t k;   // the second's reduction length
    };
    const Shape shapes[] = {
        {"wo_a|wo_b nvfp4", false, {8, 16, 64}, {1, 64, 128}, 64, 8192},
        {"wo_a|wo_b fp8", false, {8, 16, 128}, {1, 64, 256}, 32, 8192},
        {"wo_a|wo_b bf16", false, {8, 16, 256}, {1, 64, 512}, 16, 8192},
        {"moe nvfp4", true, {7, 64, 64}, {7, 64, 32}, 64, 2048},
        {"moe I=80", true, {7, 3, 3}, {7, 3, 2}, 64, 80},
        {"rows odd", false, {2, 1, 6}, {1, 4, 4}, 32, 128},
        {"rows one group", false, {1, 4, 2}, {1, 2, 16}, 16, 256},
    };
    for (const Shape& sh : shapes) {
        for (int64_t grid_warps : {1, 3, 4, 7, 64, 528, 2112, 8448}) {
            SCOPED_TRACE(testing::Message() << sh.name << ", " << grid_warps << " warps");
            const Gemv &a = sh.first, &b = sh.second;
            const int counts = sh.swiglu ? a.groups : a.groups * a.quads;
            const int per = chain_units_per_count(sh.swiglu, a.quads, a.k_tiles);
            const int64_t total_a = int64_t{a.groups} * a.quads * a.k_tiles;
            const GemvSplit sa{std::min(grid_warps, total_a), total_a};
            std::vector<int64_t> arrived(counts, 0);
            for (int64_t w = 0; w < sa.warps; ++w) {
                const int u0 = sa.first(w), u1 = sa.first(w + 1);
                ASSERT_LT(u0, u1) << "warp " << w << " of the first GEMV has no units";
                for (int u = u0; u < u1;) {  // (the chain kernel's release loop)
                    const int i = u / per, end = std::min(u1, (i + 1) * per);
                    ASSERT_LT(i, counts);
                    arrived[i] += end - u;
                    u = end;
                }
            }
            for (int i = 0; i < counts; ++i) ASSERT_EQ(arrived[i], per) << "count " << i;
            const int64_t total_b = int64_t{b.groups} * b.quads * b.k_tiles;
            const GemvSplit sb{std::min(grid_warps, total_b), total_b};
            std::vector<bool> waited(counts, false);
            for (int64_t w = 0; w < sb.warps; ++w) {
                const int u1 = sb.first(w + 1);
                for (int u = sb.first(w); u < u1;) {  // (compute_units' segments)
                    const int group = u / (b.quads * b.k_tiles);
                    const int t = u % b.k_tiles;
                    const int t_end = t + std::min(b.k_tiles - t, u1 - u);
                    if (sh.swiglu) {
                        ASSERT_LT(group, counts);
                        waited[group] = true;
                    } else {
                        int lo = 0, hi = 0;
                        chain_rows_counts(t, t_end, sh.tile_k, counts, &lo, &hi);
                        // The rows these k-tiles read are inside the quads waited for.
                        const int64_t row_end = std::min<int64_t>(int64_t{t_end} * sh.tile_k, sh.k);
                        ASSERT_LE(int64_t{lo} * 64, int64_t{t} * sh.tile_k);
                        ASSERT_GE(int64_t{hi + 1} * 64, row_end);
                        for (int q = lo; q <= hi; ++q) waited[q] = true;
                    }
                    u += t_end - t;
                }
            }
            for (int i = 0; i < counts; ++i) EXPECT_TRUE(waited[i]) << "count " << i;
        }
    }
}

}  // namespace
}  // namespace dsv4::cuda
