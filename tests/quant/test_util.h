// Helpers shared by the quantization tests: a scratch folder and small tensor builders.
#pragma once

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/fp_codes.h"
#include "formats/safetensors_writer.h"

namespace dsv4::testing {

// A fresh folder under the system temp dir, removed with everything in it at scope exit.
class TempDir {
  public:
    TempDir() {
        std::string tmpl = (std::filesystem::temp_directory_path() / "dsv4_quant_XXXXXX").string();
        DSV4_ASSERT(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
        path_ = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::filesystem::path& path() const { return path_; }
    std::string file(const std::string& name) const { return (path_ / name).string(); }

  private:
    std::filesystem::path path_;
};

// Gaussian values with row magnitudes spread over a few decades, deterministic per seed.
inline std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
        const float scale = std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
        for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = normal(rng) * scale;
    }
    return x;
}

// Collects tensors and writes them in order of decreasing element size, so that every tensor is
// aligned to its element size as in files of the reference safetensors serializer.
class AlignedWriter {
  public:
    void add(const std::string& name, DType dtype, const Shape& shape, const void* data,
             size_t nbytes) {
        const auto* p = static_cast<const uint8_t*>(data);
        entries_.push_back({name, dtype, shape, std::vector<uint8_t>(p, p + nbytes)});
    }
    void add_f32(const std::string& name, const Shape& shape, const std::vector<float>& v) {
        add(name, DType::kF32, shape, v.data(), v.size() * sizeof(float));
    }
    Status write(const std::string& path) const {
        SafetensorsWriter w;
        for (size_t size : {8, 4, 2, 1})
            for (const Entry& e : entries_)
                if (dtype_size(e.dtype) == size)
                    w.add(e.name, e.dtype, e.shape, e.bytes.data(), e.bytes.size());
        return w.write(path);
    }
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const Entry& e : entries_) out.push_back(e.name);
        return out;
    }

  private:
    struct Entry {
        std::string name;
        DType dtype;
        Shape shape;
        std::vector<uint8_t> bytes;
    };
    std::vector<Entry> entries_;
};

inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
    std::vector<uint16_t> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = f32_to_bf16(x[i]);
    return out;
}

}  // namespace dsv4::testing
