// Read-only memory mapping of a whole file (RAII).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace dsv4 {

class MappedFile {
  public:
    static Expected<std::unique_ptr<MappedFile>> open(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

  private:
    MappedFile() = default;
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace dsv4
