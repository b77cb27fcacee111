// Writes a safetensors file from named tensors held in memory (tests, `dsv4 quantize`).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor_view.h"

namespace dsv4 {

class SafetensorsWriter {
  public:
    // Copies the bytes (nbytes must equal numel * dtype size).
    void add(const std::string& name, DType dtype, const Shape& shape, const void* data,
             size_t nbytes);
    void add_f32(const std::string& name, const Shape& shape, const std::vector<float>& v);
    void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
    // Writes the file (tensors in insertion order, 8-byte aligned header).
    Status write(const std::string& path) const;
    size_t data_bytes() const { return data_.size(); }
    std::vector<std::string> names() const;

  private:
    struct Entry {
        std::string name;
        DType dtype;
        Shape shape;
        size_t begin, end;
    };
    std::vector<Entry> entries_;
    std::vector<uint8_t> data_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace dsv4
