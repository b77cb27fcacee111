// One request's line from the engine thread to the HTTP thread that serves it: the engine
// pushes its acceptance (or refusal), tokens and the end; the HTTP side waits on it and raises
// `cancelled` when the client went away or a stop string ended the output. A response of
// several choices (one engine request each) has a channel a choice and waits on their shared
// Notifier.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dsv4/engine.h"
#include "server/api_error.h"

namespace dsv4::server {

struct ChannelEvent {
    enum class Kind : uint8_t { kAccepted, kRejected, kToken, kFinished };
    Kind kind = Kind::kToken;
    int32_t token = -1;                         // kToken, or kFinished with the last token
    std::optional<TokenLogprobs> logprobs;      // the token's, when the request asked
    FinishReason finish = FinishReason::kNone;  // kFinished
    std::string error;                          // kFinished with kError
    ApiError rejection;                         // kRejected
    // kAccepted with the prefix cache on: the prompt tokens found in it (0: none).
    std::optional<int64_t> cached_tokens;
};

// Wakes the thread that waits on several channels: every push to one of them counts.
class Notifier {
  public:
    void notify() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            ++count_;
        }
        cv_.notify_all();
    }
    uint64_t count() {
        std::lock_guard<std::mutex> lock(mu_);
        return count_;
    }
    // Waits up to `timeout` for a push after count() returned `seen`. False: none came.
    bool wait_after(uint64_t seen, std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(mu_);
        return cv_.wait_for(lock, timeout, [&] { return count_ != seen; });
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    uint64_t count_ = 0;
};

class Channel {
  public:
    explicit Channel(std::shared_ptr<Notifier> notifier = nullptr)
        : notifier_(std::move(notifier)) {}
    void push(ChannelEvent e) {
        {
            std::lock_guard<std::mutex> lock(mu_);
            events_.push_back(std::move(e));
        }
        cv_.notify_one();
        if (notifier_) notifier_->notify();
    }
    // Moves every waiting event into `out`; waits up to `timeout` for one. False: none came.
    bool wait(std::vector<ChannelEvent>& out, std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(mu_);
        if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
        for (auto& e : events_) out.push_back(std::move(e));
        events_.clear();
        return true;
    }
    void cancel() { cancelled_.store(true); }
    bool cancelled() const { return cancelled_.load(); }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<ChannelEvent> events_;
    std::atomic<bool> cancelled_{false};
    std::shared_ptr<Notifier> notifier_;
};

}  // namespace dsv4::server
