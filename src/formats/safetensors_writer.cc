#include "formats/safetensors_writer.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace dsv4 {

void SafetensorsWriter::add(const std::string& name, DType dtype, const Shape& shape,
                            const void* data, size_t nbytes) {
    DSV4_ASSERT(nbytes == static_cast<size_t>(shape.numel()) * dtype_size(dtype), "tensor ", name,
                ": ", nbytes, " bytes for shape ", shape.str());
    Entry e{name, dtype, shape, data_.size(), data_.size() + nbytes};
    const auto* p = static_cast<const uint8_t*>(data);
    data_.insert(data_.end(), p, p + nbytes);
    entries_.push_back(std::move(e));
}

void SafetensorsWriter::add_f32(const std::string& name, const Shape& shape,
                                const std::vector<float>& v) {
    add(name, DType::kF32, shape, v.data(), v.size() * sizeof(float));
}

std::vector<std::string> SafetensorsWriter::names() const {
    std::vector<std::string> out;
    for (const auto& e : entries_) out.push_back(e.name);
    return out;
}

Status SafetensorsWriter::write(const std::string& path) const {
    // Widest element type first: with the 8-byte aligned header every tensor then starts at a
    // multiple of its element size (the format allows no padding between tensors).
    std::vector<const Entry*> order;
    for (const auto& e : entries_) order.push_back(&e);
    std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
        return dtype_size(a->dtype) > dtype_size(b->dtype);
    });
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata_.empty()) header["__metadata__"] = metadata_;
    size_t offset = 0;
    for (const Entry* e : order) {
        std::vector<int64_t> shape(e->shape.dims.begin(), e->shape.dims.begin() + e->shape.ndim);
        const size_t n = e->end - e->begin;
        header[e->name] = {{"dtype", std::string(dtype_name(e->dtype))},
                           {"shape", shape},
                           {"data_offsets", {offset, offset + n}}};
        offset += n;
    }
    std::string h = header.dump();
    while ((h.size() + 8) % 8 != 0) h.push_back(' ');
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return error(path, ": cannot open for writing");
    uint8_t len[8];
    const uint64_t header_len = h.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(header_len >> (8 * i));
    bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
    for (const Entry* e : order) {
        const size_t n = e->end - e->begin;
        ok = ok && (n == 0 || std::fwrite(data_.data() + e->begin, 1, n, f) == n);
    }
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) return error(path, ": write failed (disk full?)");
    return Status::ok();
}

}  // namespace dsv4
