// Minimal leveled logging to stderr. Level from DSV4_LOG (error|warn|info|debug), default warn.
#pragma once

#include <string>

#include "base/check.h"

namespace dsv4 {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_message(LogLevel level, const std::string& message);

}  // namespace dsv4

#define DSV4_LOG(level, ...)                                                  \
    do {                                                                      \
        if (static_cast<int>(level) <= static_cast<int>(::dsv4::log_level())) \
            ::dsv4::log_message(level, ::dsv4::str_cat(__VA_ARGS__));         \
    } while (0)
#define DSV4_LOG_INFO(...) DSV4_LOG(::dsv4::LogLevel::kInfo, __VA_ARGS__)
#define DSV4_LOG_WARN(...) DSV4_LOG(::dsv4::LogLevel::kWarn, __VA_ARGS__)
#define DSV4_LOG_DEBUG(...) DSV4_LOG(::dsv4::LogLevel::kDebug, __VA_ARGS__)
