// Internal invariants: abort with file:line and a message. For programmer errors only;
// bad user input goes through Status / Expected (status.h).
#pragma once

#include <sstream>
#include <string>

namespace dsv4 {

[[noreturn]] void fatal_abort(const char* file, int line, const std::string& message);

template <typename... Args>
std::string str_cat(const Args&... args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}

}  // namespace dsv4

#define DSV4_ASSERT(cond, ...)                                                               \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            ::dsv4::fatal_abort(__FILE__, __LINE__,                                          \
                                ::dsv4::str_cat("check failed: " #cond " ", ##__VA_ARGS__)); \
        }                                                                                    \
    } while (0)

#ifdef NDEBUG
#define DSV4_DASSERT(cond, ...) \
    do {                        \
    } while (0)
#else
#define DSV4_DASSERT(cond, ...) DSV4_ASSERT(cond, ##__VA_ARGS__)
#endif

#define DSV4_UNREACHABLE(...) \
    ::dsv4::fatal_abort(__FILE__, __LINE__, ::dsv4::str_cat("unreachable: ", ##__VA_ARGS__))
