#include "base/check.h"

#include <cstdio>
#include <cstdlib>

namespace dsv4 {

void fatal_abort(const char* file, int line, const std::string& message) {
    std::fprintf(stderr, "dsv4 internal error at %s:%d: %s\n", file, line, message.c_str());
    std::fflush(stderr);
    std::abort();
}

}  // namespace dsv4
