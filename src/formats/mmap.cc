#include "formats/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace dsv4 {

Expected<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return error(path, ": cannot open: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        return error(path, ": cannot stat: ", std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return error(path, ": not a regular file");
    }
    std::unique_ptr<MappedFile> f(new MappedFile());
    f->path_ = path;
    f->size_ = static_cast<size_t>(st.st_size);
    if (f->size_ > 0) {
        void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            return error(path, ": cannot mmap: ", std::strerror(e));
        }
        f->data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
    return f;
}

MappedFile::~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace dsv4
