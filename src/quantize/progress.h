// A byte-count progress bar on stderr: redrawn in place on a terminal (at most 10 times a
// second), one line per step otherwise so logs stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace dsv4::quant {

class ProgressBar {
  public:
    ProgressBar(uint64_t total_bytes, bool enabled);
    // `done` bytes of the total are processed; `label` says where (e.g. the shard name).
    void update(uint64_t done, const std::string& label);
    // A step (shard) finished: on a non-terminal this prints its line.
    void step_done(uint64_t done, const std::string& label);
    void finish();

  private:
    void draw(uint64_t done, const std::string& label, bool newline);

    uint64_t total_;
    bool enabled_;
    bool tty_;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace dsv4::quant
