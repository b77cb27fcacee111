// base: Status/Expected, the dtype table, tensor views, parallel_for.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <vector>

#include "base/dtype.h"
#include "base/fp_codes.h"
#include "base/status.h"
#include "base/tensor_view.h"
#include "base/thread_pool.h"
#include "base/utf8.h"

namespace dsv4 {
namespace {

Expected<int> parse_positive(int v) {
    if (v <= 0) return error("value ", v, " is not positive");
    return v;
}

Status chain(int v) {
    DSV4_ASSIGN_OR_RETURN(int x, parse_positive(v));
    return x > 10 ? error("too big") : Status::ok();
}

TEST(Status, OkAndErrors) {
    EXPECT_TRUE(Status::ok().is_ok());
    EXPECT_EQ(error("a", 1, "b").message(), "a1b");
    EXPECT_EQ(chain(-2).message(), "value -2 is not positive");
    EXPECT_EQ(chain(11).message(), "too big");
    EXPECT_TRUE(chain(3).is_ok());
    EXPECT_EQ(error("x").with_context("loading").message(), "loading: x");
}

TEST(DType, TableIsConsistent) {
    for (DType t : kAllDTypes) {
        auto back = dtype_from_name(dtype_name(t));
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(*back, t);
        EXPECT_GT(dtype_size(t), 0u);
    }
    EXPECT_FALSE(dtype_from_name("F64").has_value());
    EXPECT_EQ(dtype_size(DType::kBF16), 2u);
    EXPECT_EQ(dtype_size(DType::kI64), 8u);
}

TEST(DType, LoadAsF32) {
    const uint16_t bf16[] = {0x3f80, 0xc000};  // 1, -2
    EXPECT_EQ(load_as_f32(bf16, DType::kBF16, 1), -2.0f);
    const uint16_t f16[] = {0x3c00, 0x0001};  // 1, smallest subnormal 2^-24
    EXPECT_EQ(load_as_f32(f16, DType::kF16, 1), std::ldexp(1.0f, -24));
    const int64_t i64[] = {-5, 7};
    EXPECT_EQ(load_as_f32(i64, DType::kI64, 0), -5.0f);
    const uint8_t e8[] = {127, 130};
    EXPECT_EQ(load_as_f32(e8, DType::kF8E8M0, 1), 8.0f);
}

TEST(FpCodes, Bf16AndF16RoundTrip) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const float f = bf16_to_f32(static_cast<uint16_t>(h));
        if (f != f) continue;  // NaN payloads
        EXPECT_EQ(f32_to_bf16(f), h);
        const float g = f16_to_f32(static_cast<uint16_t>(h));
        if (g != g) continue;
        EXPECT_EQ(f32_to_f16(g), h) << h;
    }
    // Ties to even: 1 + 2^-8 is halfway between two bf16 values.
    EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
    EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
}

TEST(TensorView, StridesAndSize) {
    float data[24];
    TensorView v(data, DType::kF32, Shape{2, 3, 4});
    EXPECT_EQ(v.numel(), 24);
    EXPECT_EQ(v.nbytes(), 96u);
    EXPECT_EQ(v.strides[0], 12);
    EXPECT_EQ(v.strides[2], 1);
    EXPECT_TRUE(v.is_contiguous());
    EXPECT_EQ(v.shape.str(), "[2, 3, 4]");
}

TEST(Utf8, ValidIsStrict) {
    EXPECT_TRUE(utf8_valid(""));
    EXPECT_TRUE(utf8_valid("a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"));  // a é 中 😀
    EXPECT_TRUE(utf8_valid(std::string_view("\0", 1)));
    EXPECT_TRUE(utf8_valid("\xF4\x8F\xBF\xBF"));   // U+10FFFF
    EXPECT_FALSE(utf8_valid("\x80"));              // lone continuation byte
    EXPECT_FALSE(utf8_valid("\xC3"));              // truncated
    EXPECT_FALSE(utf8_valid("\xE4\xB8"));          // truncated
    EXPECT_FALSE(utf8_valid("\xC0\xAF"));          // overlong
    EXPECT_FALSE(utf8_valid("\xE0\x80\xAF"));      // overlong
    EXPECT_FALSE(utf8_valid("\xED\xA0\x80"));      // surrogate
    EXPECT_FALSE(utf8_valid("\xF4\x90\x80\x80"));  // above U+10FFFF
    EXPECT_FALSE(utf8_valid("\xFF"));
    EXPECT_FALSE(utf8_valid("ok\xC3("));  // bad continuation
}

TEST(ThreadPool, CoversRangeOnceAndNests) {
    for (int64_t n : {0, 1, 7, 1000}) {
        std::vector<std::atomic<int>> hits(n);
        parallel_for(n, 1, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
                hits[i]++;
                // A nested loop must not deadlock; it runs serially.
                parallel_for(3, 1, [](int64_t, int64_t) {});
            }
        });
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1);
    }
}

}  // namespace
}  // namespace dsv4
