// Per-tensor format detection (bind_quant_weight) on safetensors files written here: every
// format DeepSeek-V4 checkpoints use, and corrupt variants that must give an error naming the
// tensor instead of a crash.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/fp_codes.h"
#include "formats/nvfp4_quant.h"
#include "formats/quant_weight.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "test_util.h"

namespace dsv4 {
namespace {

using testing::random_matrix;
using testing::TempDir;

class DetectTest : public ::testing::Test {
  protected:
    // Writes the tensors to a file and binds `prefix` from it.
    Expected<QuantWeight> bind(const SafetensorsWriter& w, const std::string& prefix, int64_t rows,
                               int64_t cols) {
        const std::string path = dir_.file("t" + std::to_string(n_++) + ".safetensors");
        Status st = w.write(path);
        if (!st) return st;
        auto store = TensorStore::open(path);
        if (!store) return store.status();
        stores_.push_back(std::make_unique<TensorStore>(std::move(store.value())));
        return bind_quant_weight(*stores_.back(), prefix, rows, cols);
    }

    static std::vector<float> dequant_all(const QuantWeight& q) {
        std::vector<float> out(static_cast<size_t>(q.rows * q.cols));
        for (int64_t r = 0; r < q.rows; ++r) dequant_row(q, r, out.data() + r * q.cols);
        return out;
    }

    // An error whose message names `tensor` and contains `what`.
    static void expect_error(const Expected<QuantWeight>& r, const std::string& tensor,
                             const std::string& what) {
        ASSERT_FALSE(r.has_value()) << "expected an error about " << tensor;
        const std::string& m = r.status().message();
        EXPECT_NE(m.find(tensor), std::string::npos)
            << "message does not name " << tensor << ": " << m;
        EXPECT_NE(m.find(what), std::string::npos) << "message lacks '" << what << "': " << m;
    }

    // FP8 block tensors of a [rows, cols] matrix.
    static void add_fp8(SafetensorsWriter& w, const std::string& p, int64_t rows, int64_t cols,
                        Fp8BlockTensor* out = nullptr) {
        const auto x = random_matrix(rows, cols, 7);
        Fp8BlockTensor t = fp8_block_quantize(x.data(), rows, cols);
        w.add(p + ".weight", DType::kF8E4M3, {rows, cols}, t.values.data(), t.values.size());
        if (out) *out = std::move(t);
    }

    static void add_nvfp4(SafetensorsWriter& w, const std::string& p, int64_t rows, int64_t cols,
                          bool input_scale, Nvfp4Tensor* out = nullptr) {
        const auto x = random_matrix(rows, cols, 11);
        Nvfp4Tensor t = nvfp4_quantize(x.data(), rows, cols);
        w.add(p + ".weight", DType::kU8, {rows, cols / 2}, t.packed.data(), t.packed.size());
        w.add(p + ".weight_scale", DType::kF8E4M3, {rows, cols / 16}, t.scales.data(),
              t.scales.size());
        w.add(p + ".weight_scale_2", DType::kF32, Shape{}, &t.global_scale, 4);
        if (input_scale) {
            const float s = 4.0f / 2688.0f;
            w.add(p + ".input_scale", DType::kF32, Shape{}, &s, 4);
        }
        if (out) *out = std::move(t);
    }

    TempDir dir_;
    int n_ = 0;
    std::vector<std::unique_ptr<TensorStore>> stores_;
};

TEST_F(DetectTest, DenseBf16) {
    SafetensorsWriter w;
    const auto x = random_matrix(3, 5, 1);
    const auto b = testing::to_bf16(x);
    w.add("m.weight", DType::kBF16, {3, 5}, b.data(), b.size() * 2);
    auto q = bind(w, "m", 3, 5);
    ASSERT_TRUE(q.has_value()) << q.status().message();
    EXPECT_EQ(q->format, WeightFormat::kDense);
    const auto d = dequant_all(*q);
    for (size_t i = 0; i < d.size(); ++i) EXPECT_EQ(d[i], bf16_to_f32(b[i]));
}

TEST_F(DetectTest, Fp8WithE8m0Scale) {
    SafetensorsWriter w;
    Fp8BlockTensor t;
    add_fp8(w, "a.wq_a", 200, 300, &t);
    w.add("a.wq_a.scale", DType::kF8E8M0, {2, 3}, t.scales.data(), t.scales.size());
    auto q = bind(w, "a.wq_a", 200, 300);
    ASSERT_TRUE(q.has_value()) << q.status().message();
    EXPECT_EQ(q->format, WeightFormat::kFp8Block);
    EXPECT_EQ(q->scale_dtype, DType::kF8E8M0);
    const auto d = dequant_all(*q);
    for (int64_t r = 0; r < 200; r += 37)
        for (int64_t c = 0; c < 300; c += 41)
            EXPECT_EQ(d[r * 300 + c], e4m3_to_f32(t.values[r * 300 + c]) *
                                          e8m0_to_f32(t.scales[(r / 128) * 3 + c / 128]));
}

TEST_F(DetectTest, Fp8WithF32Scale) {
    SafetensorsWriter w;
    Fp8BlockTensor t;
    add_fp8(w, "x", 130, 128, &t);
    std::vector<float> s(t.scales.size());
    for (size_t i = 0; i < s.size(); ++i) s[i] = e8m0_to_f32(t.scales[i]) * 0.75f;
    w.add_f32("x.scale", {2, 1}, s);
    auto q = bind(w, "x", 130, 128);
    ASSERT_TRUE(q.has_value()) << q.status().message();
    EXPECT_EQ(q->format, WeightFormat::kFp8Block);
    EXPECT_EQ(q->scale_dtype, DType::kF32);
    const auto d = dequant_all(*q);
    EXPECT_EQ(d[129 * 128 + 5], e4m3_to_f32(t.values[129 * 128 + 5]) * s[1]);
}

TEST_F(DetectTest, Mxfp4) {
    SafetensorsWriter w;
    const auto x = random_matrix(64, 96, 3);
    const Mxfp4Tensor t = mxfp4_quantize(x.data(), 64, 96);
    w.add("e.w1.weight", DType::kI8, {64, 48}, t.packed.data(), t.packed.size());
    w.add("e.w1.scale", DType::kF8E8M0, {64, 3}, t.scales.data(), t.scales.size());
    auto q = bind(w, "e.w1", 64, 96);
    ASSERT_TRUE(q.has_value()) << q.status().message();
    EXPECT_EQ(q->format, WeightFormat::kMxfp4);
    const auto d = dequant_all(*q);
    const uint8_t byte = t.packed[10 * 48 + 20];  // elements 40 (low) and 41 (high) of row 10
    EXPECT_EQ(d[10 * 96 + 40], e2m1_to_f32(byte & 0xf) * e8m0_to_f32(t.scales[10 * 3 + 1]));
    EXPECT_EQ(d[10 * 96 + 41], e2m1_to_f32(byte >> 4) * e8m0_to_f32(t.scales[10 * 3 + 1]));
}

TEST_F(DetectTest, Nvfp4WithInputScale) {
    SafetensorsWriter w;
    Nvfp4Tensor t;
    add_nvfp4(w, "e.w2", 32, 48, true, &t);
    auto q = bind(w, "e.w2", 32, 48);
    ASSERT_TRUE(q.has_value()) << q.status().message();
    EXPECT_EQ(q->format, WeightFormat::kNvfp4);
    EXPECT_EQ(q->global_scale, t.global_scale);
    EXPECT_EQ(q->input_scale, 4.0f / 2688.0f);
    const auto d = dequant_all(*q);
    const uint8_t byte = t.packed[5 * 24 + 9];  // elements 18 and 19 of row 5, block 1
    const float s = e4m3_to_f32(t.scales[5 * 3 + 1]) * t.global_scale;
    EXPECT_EQ(d[5 * 48 + 18], e2m1_to_f32(byte & 0xf) * s);
    EXPECT_EQ(d[5 * 48 + 19], e2m1_to_f32(byte >> 4) * s);
}

TEST_F(DetectTest, Nvfp4WithoutInputScale) {
    SafetensorsWriter w;
    add_nvfp4(w, "e.w3", 16, 32, false);
    auto q = bind(w, "e.w3", 16, 32);
    ASSERT_TRUE(q.has_value()) << q.status().message();
    EXPECT_EQ(q->format, WeightFormat::kNvfp4);
    EXPECT_EQ(q->input_scale, 0.0f);
}

TEST_F(DetectTest, MissingWeight) {
    SafetensorsWriter w;
    w.add_f32("other.weight", {1}, {1.0f});
    expect_error(bind(w, "absent", 2, 2), "absent.weight", "missing");
}

TEST_F(DetectTest, Fp8WrongScaleShape) {
    SafetensorsWriter w;
    Fp8BlockTensor t;
    add_fp8(w, "a.wkv", 200, 300, &t);
    w.add("a.wkv.scale", DType::kF8E8M0, {3, 2}, t.scales.data(), t.scales.size());
    expect_error(bind(w, "a.wkv", 200, 300), "a.wkv.scale", "[2, 3]");
}

TEST_F(DetectTest, Fp8MissingScale) {
    SafetensorsWriter w;
    add_fp8(w, "a.wo_b", 64, 64);
    expect_error(bind(w, "a.wo_b", 64, 64), "a.wo_b.scale", "block scales");
}

TEST_F(DetectTest, Fp8WrongScaleDtype) {
    SafetensorsWriter w;
    add_fp8(w, "a.wo_a", 64, 64);
    const uint16_t one = f32_to_bf16(1.0f);
    w.add("a.wo_a.scale", DType::kBF16, {1, 1}, &one, 2);
    expect_error(bind(w, "a.wo_a", 64, 64), "a.wo_a.scale", "BF16");
}

TEST_F(DetectTest, Fp8WrongWeightShape) {
    SafetensorsWriter w;
    Fp8BlockTensor t;
    add_fp8(w, "a.wq_b", 64, 64, &t);
    w.add("a.wq_b.scale", DType::kF8E8M0, {1, 1}, t.scales.data(), 1);
    expect_error(bind(w, "a.wq_b", 64, 128), "a.wq_b.weight", "[64, 128]");
}

TEST_F(DetectTest, Nvfp4WrongScaleShape) {
    SafetensorsWriter w;
    const auto x = random_matrix(16, 32, 5);
    const Nvfp4Tensor t = nvfp4_quantize(x.data(), 16, 32);
    w.add("e.w1.weight", DType::kU8, {16, 16}, t.packed.data(), t.packed.size());
    w.add("e.w1.weight_scale", DType::kF8E4M3, {2, 16}, t.scales.data(), t.scales.size());
    w.add("e.w1.weight_scale_2", DType::kF32, Shape{}, &t.global_scale, 4);
    expect_error(bind(w, "e.w1", 16, 32), "e.w1.weight_scale", "[16, 2]");
}

TEST_F(DetectTest, Nvfp4MissingGlobalScale) {
    SafetensorsWriter w;
    const auto x = random_matrix(16, 32, 5);
    const Nvfp4Tensor t = nvfp4_quantize(x.data(), 16, 32);
    w.add("e.w1.weight", DType::kU8, {16, 16}, t.packed.data(), t.packed.size());
    w.add("e.w1.weight_scale", DType::kF8E4M3, {16, 2}, t.scales.data(), t.scales.size());
    expect_error(bind(w, "e.w1", 16, 32), "e.w1.weight_scale_2", "global");
}

TEST_F(DetectTest, Nvfp4MissingBlockScale) {
    SafetensorsWriter w;
    const std::vector<uint8_t> packed(16 * 16);
    const float g = 1.0f;
    w.add("e.w1.weight", DType::kU8, {16, 16}, packed.data(), packed.size());
    w.add("e.w1.weight_scale_2", DType::kF32, Shape{}, &g, 4);
    expect_error(bind(w, "e.w1", 16, 32), "e.w1.weight_scale", "has no");
}

TEST_F(DetectTest, Nvfp4WrongScaleDtype) {
    SafetensorsWriter w;
    const std::vector<uint8_t> packed(16 * 16), scales(16 * 2, 0x38);
    const float g = 1.0f;
    w.add("e.w1.weight", DType::kU8, {16, 16}, packed.data(), packed.size());
    w.add("e.w1.weight_scale", DType::kF8E8M0, {16, 2}, scales.data(), scales.size());
    w.add("e.w1.weight_scale_2", DType::kF32, Shape{}, &g, 4);
    expect_error(bind(w, "e.w1", 16, 32), "e.w1.weight_scale", "F8_E4M3");
}

TEST_F(DetectTest, Nvfp4GlobalScaleNotAScalar) {
    SafetensorsWriter w;
    const std::vector<uint8_t> packed(16 * 16), scales(16 * 2, 0x38);
    w.add("e.w1.weight", DType::kU8, {16, 16}, packed.data(), packed.size());
    w.add("e.w1.weight_scale", DType::kF8E4M3, {16, 2}, scales.data(), scales.size());
    w.add_f32("e.w1.weight_scale_2", {2}, {1.0f, 2.0f});
    expect_error(bind(w, "e.w1", 16, 32), "e.w1.weight_scale_2", "one F32 value");
}

TEST_F(DetectTest, Nvfp4WidthNotMultipleOf16) {
    SafetensorsWriter w;
    const std::vector<uint8_t> packed(4 * 20), scales(4 * 2, 0x38);
    const float g = 1.0f;
    w.add("e.w1.weight", DType::kU8, {4, 20}, packed.data(), packed.size());
    w.add("e.w1.weight_scale", DType::kF8E4M3, {4, 2}, scales.data(), scales.size());
    w.add("e.w1.weight_scale_2", DType::kF32, Shape{}, &g, 4);
    expect_error(bind(w, "e.w1", 4, 40), "e.w1.weight", "multiple of 16");
}

TEST_F(DetectTest, PackedOddWidth) {
    SafetensorsWriter w;
    const std::vector<uint8_t> packed(4 * 16), scales(4, 127);
    w.add("e.w1.weight", DType::kI8, {4, 16}, packed.data(), packed.size());
    w.add("e.w1.scale", DType::kF8E8M0, {4, 1}, scales.data(), scales.size());
    expect_error(bind(w, "e.w1", 4, 31), "e.w1.weight", "even width");
}

TEST_F(DetectTest, Mxfp4WrongScaleDtype) {
    SafetensorsWriter w;
    const std::vector<uint8_t> packed(4 * 16), scales(4, 0x38);
    w.add("e.w1.weight", DType::kI8, {4, 16}, packed.data(), packed.size());
    w.add("e.w1.scale", DType::kF8E4M3, {4, 1}, scales.data(), scales.size());
    expect_error(bind(w, "e.w1", 4, 32), "e.w1.scale", "F8_E8M0");
}

TEST_F(DetectTest, Mxfp4WrongScaleShape) {
    SafetensorsWriter w;
    const std::vector<uint8_t> packed(4 * 32), scales(4 * 3, 127);
    w.add("e.w2.weight", DType::kI8, {4, 32}, packed.data(), packed.size());
    w.add("e.w2.scale", DType::kF8E8M0, {4, 3}, scales.data(), scales.size());
    expect_error(bind(w, "e.w2", 4, 64), "e.w2.scale", "[4, 2]");
}

TEST_F(DetectTest, PackedWithoutAnyScale) {
    SafetensorsWriter w;
    const std::vector<uint8_t> packed(4 * 16);
    w.add("e.w3.weight", DType::kU8, {4, 16}, packed.data(), packed.size());
    expect_error(bind(w, "e.w3", 4, 32), "e.w3.weight", "no");
}

TEST_F(DetectTest, DenseWithStrayScale) {
    SafetensorsWriter w;
    w.add_f32("d.weight", {2, 2}, {1, 2, 3, 4});
    w.add_f32("d.scale", {1, 1}, {1});
    expect_error(bind(w, "d", 2, 2), "d.weight", "scales");
}

TEST_F(DetectTest, UnsupportedDtype) {
    SafetensorsWriter w;
    const std::vector<int64_t> v(4);
    w.add("i.weight", DType::kI64, {2, 2}, v.data(), v.size() * 8);
    expect_error(bind(w, "i", 2, 2), "i.weight", "I64");
}

}  // namespace
}  // namespace dsv4
