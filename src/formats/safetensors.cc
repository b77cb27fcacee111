#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace dsv4 {
namespace {

using json = nlohmann::json;

// A header larger than this is not a model header (real ones are a few MB at most).
constexpr uint64_t kMaxHeaderBytes = 256ull << 20;

Expected<TensorInfo> parse_entry(const std::string& name, const json& e, const uint8_t* base,
                                 uint64_t data_size, const std::string& label) {
    auto fail = [&](const std::string& what) {
        return Status::error(label + ": tensor '" + name + "': " + what);
    };
    if (!e.is_object()) return fail("entry is not an object");
    if (!e.contains("dtype") || !e["dtype"].is_string()) return fail("missing dtype");
    if (!e.contains("shape") || !e["shape"].is_array()) return fail("missing shape");
    if (!e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
        return fail("missing or malformed data_offsets");
    TensorInfo t;
    t.name = name;
    t.file = label;
    const std::string dt = e["dtype"].get<std::string>();
    auto dtype = dtype_from_name(dt);
    if (!dtype) return fail("unsupported dtype " + dt);
    t.dtype = *dtype;
    const json& shape = e["shape"];
    if (shape.size() > static_cast<size_t>(kMaxDims))
        return fail("shape has " + std::to_string(shape.size()) + " dims (max 6)");
    uint64_t numel = 1;
    for (const json& d : shape) {
        if (!d.is_number_unsigned()) return fail("shape entry is not a non-negative integer");
        uint64_t v = d.get<uint64_t>();
        if (v > (1ull << 40) || (v != 0 && numel > (1ull << 48) / v))
            return fail("shape too large");
        numel *= v;
        t.shape.dims[t.shape.ndim++] = static_cast<int64_t>(v);
    }
    for (const json& o : e["data_offsets"])
        if (!o.is_number_unsigned()) return fail("data_offsets are not non-negative integers");
    uint64_t begin = e["data_offsets"][0].get<uint64_t>();
    uint64_t end = e["data_offsets"][1].get<uint64_t>();
    if (begin > end) return fail("data_offsets begin > end");
    if (end > data_size)
        return fail("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                    ") point past the end of the data (" + std::to_string(data_size) +
                    " bytes; truncated file?)");
    uint64_t expect = numel * dtype_size(t.dtype);
    if (end - begin != expect)
        return fail("byte range is " + std::to_string(end - begin) + " bytes but dtype " + dt +
                    " shape " + t.shape.str() + " needs " + std::to_string(expect));
    t.data = base + begin;
    t.nbytes = end - begin;
    return t;
}

}  // namespace

Expected<std::vector<TensorInfo>> SafetensorsFile::parse(
    const uint8_t* data, size_t size, const std::string& label,
    std::map<std::string, std::string>* metadata) {
    if (size < 8)
        return error(label, ": file too short for a safetensors header (", size, " bytes)");
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
    if (header_len > kMaxHeaderBytes)
        return error(label, ": header length ", header_len, " is implausible (corrupt file?)");
    if (header_len > size - 8)
        return error(label, ": header length ", header_len, " runs past the end of the file (",
                     size, " bytes; truncated?)");
    json header;
    try {
        header = json::parse(data + 8, data + 8 + header_len);
    } catch (const json::exception& e) {
        return error(label, ": header is not valid JSON: ", e.what());
    }
    if (!header.is_object()) return error(label, ": header is not a JSON object");
    const uint8_t* base = data + 8 + header_len;
    const uint64_t data_size = size - 8 - header_len;
    std::vector<TensorInfo> out;
    for (auto it = header.begin(); it != header.end(); ++it) {
        if (it.key() == "__metadata__") {
            if (!it.value().is_object()) return error(label, ": __metadata__ is not an object");
            if (metadata != nullptr) {
                for (auto m = it.value().begin(); m != it.value().end(); ++m) {
                    if (!m.value().is_string())
                        return error(label, ": __metadata__ value '", m.key(), "' is not a string");
                    (*metadata)[m.key()] = m.value().get<std::string>();
                }
            }
            continue;
        }
        auto t = parse_entry(it.key(), it.value(), base, data_size, label);
        if (!t) return t.status();
        out.push_back(std::move(*t));
    }
    std::vector<const TensorInfo*> sorted;
    for (const auto& t : out) sorted.push_back(&t);
    std::sort(sorted.begin(), sorted.end(),
              [](const TensorInfo* a, const TensorInfo* b) { return a->data < b->data; });
    for (size_t i = 1; i < sorted.size(); ++i) {
        const TensorInfo* a = sorted[i - 1];
        const TensorInfo* b = sorted[i];
        if (a->data + a->nbytes > b->data)
            return error(label, ": tensors '", a->name, "' and '", b->name, "' overlap");
    }
    return out;
}

Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
    DSV4_ASSIGN_OR_RETURN(auto mapped, MappedFile::open(path));
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    DSV4_ASSIGN_OR_RETURN(f->tensors_, parse(mapped->data(), mapped->size(), path, &f->metadata_));
    f->file_ = std::move(mapped);
    for (TensorInfo& t : f->tensors_) {
        if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) == 0) continue;
        auto copy = std::make_unique<uint64_t[]>((t.nbytes + 7) / 8);
        std::memcpy(copy.get(), t.data, t.nbytes);
        t.data = reinterpret_cast<const uint8_t*>(copy.get());
        f->realigned_.push_back(std::move(copy));
    }
    for (size_t i = 0; i < f->tensors_.size(); ++i) f->by_name_[f->tensors_[i].name] = i;
    return f;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Expected<TensorStore> TensorStore::open(const std::string& path) {
    namespace fs = std::filesystem;
    TensorStore store;
    std::error_code ec;
    if (fs::is_regular_file(path, ec)) {
        DSV4_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(path));
        store.files_.push_back(std::move(f));
    } else if (fs::is_directory(path, ec)) {
        const fs::path dir(path);
        const fs::path index_path = dir / "model.safetensors.index.json";
        if (fs::exists(index_path)) {
            json index;
            try {
                std::ifstream in(index_path);
                index = json::parse(in);
            } catch (const json::exception& e) {
                return error(index_path.string(), ": not valid JSON: ", e.what());
            }
            if (!index.is_object() || !index.contains("weight_map") ||
                !index["weight_map"].is_object())
                return error(index_path.string(), ": missing \"weight_map\" object");
            std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
            for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
                if (!it.value().is_string())
                    return error(index_path.string(), ": weight_map entry '", it.key(),
                                 "' is not a file name");
                const std::string shard = it.value().get<std::string>();
                if (shard.find('/') != std::string::npos || shard == "..")
                    return error(index_path.string(), ": shard name '", shard,
                                 "' must be a plain file name");
                if (!shards.count(shard)) {
                    auto f = SafetensorsFile::open((dir / shard).string());
                    if (!f) return f.status();
                    shards[shard] = std::shared_ptr<SafetensorsFile>(std::move(*f));
                    store.files_.push_back(shards[shard]);
                }
                if (shards[shard]->find(it.key()) == nullptr)
                    return error(index_path.string(), ": tensor '", it.key(), "' is mapped to ",
                                 shard, " but that file does not contain it");
            }
        } else if (fs::exists(dir / "model.safetensors")) {
            DSV4_ASSIGN_OR_RETURN(auto f,
                                  SafetensorsFile::open((dir / "model.safetensors").string()));
            store.files_.push_back(std::move(f));
        } else {
            return error(path, ": no model.safetensors.index.json or model.safetensors found");
        }
    } else {
        return error(path, ": no such file or directory");
    }
    for (const auto& f : store.files_) {
        for (const auto& t : f->tensors()) {
            auto [it, inserted] = store.index_.emplace(t.name, &t);
            if (!inserted)
                return error("tensor '", t.name, "' is in both ", it->second->file, " and ",
                             t.file);
        }
    }
    return store;
}

Status TensorStore::rename(const std::function<std::string(const std::string&)>& fn) {
    std::map<std::string, const TensorInfo*> renamed;
    for (const auto& [name, info] : index_) {
        auto [it, inserted] = renamed.emplace(fn(name), info);
        if (!inserted)
            return error("tensors '", it->second->name, "' and '", name, "' both mean '", it->first,
                         "'");
    }
    index_ = std::move(renamed);
    return Status::ok();
}

const TensorInfo* TensorStore::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> TensorStore::names() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : index_) out.push_back(k);
    return out;
}

size_t TensorStore::total_bytes() const {
    size_t n = 0;
    for (const auto& [k, v] : index_) n += v->nbytes;
    return n;
}

Expected<std::vector<int32_t>> read_ids(const SafetensorsFile& f, const std::string& name) {
    const TensorInfo* t = f.find(name);
    if (t == nullptr) return error(f.path(), ": no tensor '", name, "'");
    if (t->dtype != DType::kI64 && t->dtype != DType::kI32)
        return error(f.path(), ": '", name, "' must be I64 or I32");
    std::vector<int32_t> v(t->shape.numel());
    for (int64_t i = 0; i < t->shape.numel(); ++i)
        v[i] = static_cast<int32_t>(load_as_i64(t->data, t->dtype, i));
    return v;
}

}  // namespace dsv4
