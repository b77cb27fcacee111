// safetensors reader: one file (mmap) or a sharded folder (model.safetensors.index.json),
// validated strictly at open so later code can trust every byte range it is handed.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor_view.h"
#include "formats/mmap.h"

namespace dsv4 {

struct TensorInfo {
    std::string name;
    DType dtype = DType::kF32;
    Shape shape;
    const uint8_t* data = nullptr;  // inside the mapped file
    size_t nbytes = 0;
    std::string file;  // path of the file holding it (for error messages)

    TensorView view() const { return TensorView(const_cast<uint8_t*>(data), dtype, shape); }
};

class SafetensorsFile {
  public:
    // Maps and validates: header length, JSON, known dtypes, shape vs byte range, ranges inside
    // the file, no overlaps. Errors name the file and the tensor.
    static Expected<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
    // Validates a header + data buffer already in memory (what open() and the fuzzer use).
    // `label` names the buffer in error messages.
    static Expected<std::vector<TensorInfo>> parse(const uint8_t* data, size_t size,
                                                   const std::string& label,
                                                   std::map<std::string, std::string>* metadata);

    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find(const std::string& name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    const std::string& path() const { return file_->path(); }

  private:
    std::unique_ptr<MappedFile> file_;
    // Copies of tensors whose bytes are not aligned to their element size in the file (the
    // format pads the header to 8 bytes, but not every writer does); readers may then load
    // elements through typed pointers.
    std::vector<std::unique_ptr<uint64_t[]>> realigned_;
    std::vector<TensorInfo> tensors_;
    std::map<std::string, size_t> by_name_;
    std::map<std::string, std::string> metadata_;
};

// The integer tensor `name` of `f` (I64 or I32, flattened) as int32 token ids; an error names
// the file when the tensor is missing or not an integer tensor.
Expected<std::vector<int32_t>> read_ids(const SafetensorsFile& f, const std::string& name);

// All tensors of a model folder: `model.safetensors.index.json` + its shards, or a single
// `model.safetensors`, or one explicit .safetensors file.
class TensorStore {
  public:
    static Expected<TensorStore> open(const std::string& path);
    // Renames every tensor through `fn` (checkpoint layouts → one canonical naming); two
    // tensors landing on one name is an error.
    Status rename(const std::function<std::string(const std::string&)>& fn);

    const TensorInfo* find(const std::string& name) const;
    std::vector<std::string> names() const;
    size_t size() const { return index_.size(); }
    size_t total_bytes() const;

  private:
    std::vector<std::shared_ptr<SafetensorsFile>> files_;
    std::map<std::string, const TensorInfo*> index_;
};

}  // namespace dsv4
