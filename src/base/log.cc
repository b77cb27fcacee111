#include "base/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace dsv4 {
namespace {

LogLevel level_from_env() {
    const char* env = std::getenv("DSV4_LOG");
    if (env == nullptr) return LogLevel::kWarn;
    if (std::strcmp(env, "error") == 0) return LogLevel::kError;
    if (std::strcmp(env, "info") == 0) return LogLevel::kInfo;
    if (std::strcmp(env, "debug") == 0) return LogLevel::kDebug;
    return LogLevel::kWarn;
}

std::atomic<int>& level_storage() {
    static std::atomic<int> level{static_cast<int>(level_from_env())};
    return level;
}

}  // namespace

LogLevel log_level() {
    return static_cast<LogLevel>(level_storage().load());
}
void set_log_level(LogLevel level) {
    level_storage().store(static_cast<int>(level));
}

void log_message(LogLevel level, const std::string& message) {
    static const char* kNames[] = {"error", "warn", "info", "debug"};
    std::fprintf(stderr, "[dsv4 %s] %s\n", kNames[static_cast<int>(level)], message.c_str());
}

}  // namespace dsv4
