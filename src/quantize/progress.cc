#include "quantize/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace dsv4::quant {

ProgressBar::ProgressBar(uint64_t total_bytes, bool enabled)
    : total_(std::max<uint64_t>(total_bytes, 1)),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void ProgressBar::update(uint64_t done, const std::string& label) {
    if (!enabled_ || !tty_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    draw(done, label, false);
}

void ProgressBar::step_done(uint64_t done, const std::string& label) {
    if (!enabled_) return;
    draw(done, label, !tty_);
}

void ProgressBar::finish() {
    if (enabled_ && tty_ && drawn_) std::fputc('\n', stderr);
    drawn_ = false;
}

void ProgressBar::draw(uint64_t done, const std::string& label, bool newline) {
    constexpr int kWidth = 30;
    const double frac = std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
    const int filled = static_cast<int>(frac * kWidth);
    char bar[kWidth + 1];
    for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
    bar[kWidth] = '\0';
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double mb = static_cast<double>(done) / 1e6;
    const double rate = secs > 0 ? mb / secs : 0.0;
    // On a terminal: back to the line start, and erase what a longer label left behind.
    std::fprintf(stderr, "%s[%s] %5.1f%%  %.1f / %.1f MB  %.1f MB/s  %s%s%s", tty_ ? "\r" : "", bar,
                 100.0 * frac, mb, static_cast<double>(total_) / 1e6, rate, label.c_str(),
                 tty_ ? "\033[K" : "", newline ? "\n" : "");
    std::fflush(stderr);
    drawn_ = true;
}

}  // namespace dsv4::quant
