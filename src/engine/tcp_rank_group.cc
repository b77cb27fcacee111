// Ranks as processes over TCP (RankGroup::connect): a star around rank 0. Written on POSIX
// sockets: none of the libraries we use has collectives over TCP (NCCL moves data between GPUs,
// and its own bootstrap needs just this: a rendezvous to pass the unique id on), and the
// protocol is a few fixed messages.
//
// Connection: rank 0 listens at the address and accepts ranks - 1 connections; every other rank
// connects (retrying until the deadline: rank 0 may start later) and sends {magic, rank, ranks};
// rank 0 checks that each rank comes once with the same rank count and answers {magic}. A sum:
// every other rank sends {n, x[0, n)} to rank 0, which adds 0.0f, its own x, then the others'
// in rank order (the in-process group's order: the same bits) and sends the sum back to each.
// shared_once (every call: RankGroup::broadcast's stream of values, a server's commands): rank 0
// makes the value and sends {length, bytes} to each. Any failure shuts every connection down, so
// the other ranks' next receive fails too instead of waiting forever.
//
// The watch (RankGroup::on_lost): a thread that polls the connections for a hangup only (it reads
// nothing), so it sees a rank's process end while this one is not in a TCP receive at all (a
// step waiting inside NCCL on a GPU). With a step timeout it also wakes every few tens of
// milliseconds to look at the engine's running step (step_begin / step_end): one older than the
// timeout (a rank hung alive, its connections open) makes it shut the connections down, so this
// rank's sum waiting in a receive fails with that reason and the other ranks see the loss. The
// connections' descriptors stay open until the group is destroyed, after the watch has stopped:
// failures shut them down, they do not close them.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/check.h"
#include "engine/rank_group.h"

namespace dsv4 {
namespace {

constexpr uint32_t kMagic = 0x34767364;  // "dsv4"
// Bytes of a shared_once value: a bound against a corrupt length (a server's command carries a
// prompt: ~7 bytes a token, a million tokens in 7 MB).
constexpr uint64_t kMaxShared = uint64_t{64} << 20;
using Clock = std::chrono::steady_clock;

// The steady clock in nanoseconds (the step marks' time base: an atomic integer).
int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
        .count();
}

struct Address {
    std::string host, port;
};

Expected<Address> parse_address(const std::string& a) {
    const size_t colon = a.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == a.size())
        return error("rendezvous address '", a, "': expected host:port");
    const std::string port = a.substr(colon + 1);
    if (!std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        port.size() > 5 || std::stoi(port) < 1 || std::stoi(port) > 65535)
        return error("rendezvous address '", a, "': the port must be 1..65535");
    return Address{a.substr(0, colon), port};
}

class Fd {
  public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
    Fd& operator=(Fd&& o) noexcept {
        std::swap(fd_, o.fd_);
        return *this;
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { close(); }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }
    // No more sends or receives either way: the peer's receive sees the end of the stream, and
    // a receive of ours waiting on it (another thread's) returns.
    void shutdown() {
        if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
    }
    int get() const { return fd_; }

  private:
    int fd_ = -1;
};

int ms_left(Clock::time_point deadline) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

Status send_all(int fd, const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
        const ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return error("send failed: ", std::strerror(errno));
        c += k;
        n -= static_cast<size_t>(k);
    }
    return Status::ok();
}

// With a deadline (the handshake), each wait is bounded; without, a receive waits for the peer
// (a step may take long) until the peer's process closes the connection.
Status recv_all(int fd, void* p, size_t n, const Clock::time_point* deadline = nullptr) {
    char* c = static_cast<char*>(p);
    while (n > 0) {
        if (deadline != nullptr) {
            pollfd pf{fd, POLLIN, 0};
            const int r = ::poll(&pf, 1, ms_left(*deadline));
            if (r == 0) return error("timed out");
            if (r < 0 && errno != EINTR) return error("poll failed: ", std::strerror(errno));
            if (r < 0) continue;
        }
        const ssize_t k = ::recv(fd, c, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) return error("the connection was closed");
        if (k < 0) return error("receive failed: ", std::strerror(errno));
        c += k;
        n -= static_cast<size_t>(k);
    }
    return Status::ok();
}

void no_delay(int fd) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

struct AddrInfo {
    addrinfo* list = nullptr;
    ~AddrInfo() {
        if (list != nullptr) ::freeaddrinfo(list);
    }
};

// The stream addresses of a (passive: to listen at), into ai.
Status resolve(const Address& a, bool passive, AddrInfo& ai) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    if (const int r = ::getaddrinfo(a.host.c_str(), a.port.c_str(), &hints, &ai.list); r != 0)
        return error("rendezvous host '", a.host, "': ", ::gai_strerror(r));
    return Status::ok();
}

Expected<Fd> listen_at(const Address& a, int backlog) {
    AddrInfo ai;
    DSV4_RETURN_IF_ERROR(resolve(a, true, ai));
    std::string why = "no address";
    for (addrinfo* p = ai.list; p != nullptr; p = p->ai_next) {
        Fd fd(::socket(p->ai_family, p->ai_socktype, p->ai_protocol));
        if (fd.get() < 0) continue;
        const int one = 1;
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (::bind(fd.get(), p->ai_addr, p->ai_addrlen) == 0 && ::listen(fd.get(), backlog) == 0)
            return fd;
        why = std::strerror(errno);
    }
    return error("rank 0 cannot listen at ", a.host, ":", a.port, ": ", why);
}

Expected<Fd> connect_until(const Address& a, Clock::time_point deadline) {
    std::string why = "no address";
    do {
        AddrInfo ai;
        DSV4_RETURN_IF_ERROR(resolve(a, false, ai));
        for (addrinfo* p = ai.list; p != nullptr; p = p->ai_next) {
            Fd fd(::socket(p->ai_family, p->ai_socktype, p->ai_protocol));
            if (fd.get() < 0) continue;
            // Non-blocking, so an unreachable host costs the time left, not the system's
            // connect timeout.
            const int flags = ::fcntl(fd.get(), F_GETFL, 0);
            ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK);
            int err = ::connect(fd.get(), p->ai_addr, p->ai_addrlen) == 0 ? 0 : errno;
            if (err == EINPROGRESS) {
                pollfd pf{fd.get(), POLLOUT, 0};
                socklen_t len = sizeof err;
                err = ::poll(&pf, 1, ms_left(deadline)) == 1 &&
                              ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) == 0
                          ? err
                          : ETIMEDOUT;
            }
            if (err == 0) {
                ::fcntl(fd.get(), F_SETFL, flags);
                return fd;
            }
            why = std::strerror(err);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 not up yet
    } while (Clock::now() < deadline);
    return error("no rank 0 at ", a.host, ":", a.port, " in time (", why, ")");
}

class TcpRankGroup final : public RankGroup::Impl, public ops::Collective {
  public:
    TcpRankGroup(int rank, int ranks, std::vector<Fd> peers)
        : rank_(rank), ranks_(ranks), peers_(std::move(peers)) {}
    ~TcpRankGroup() override {
        ended_ = true;
        if (watch_.joinable()) {
            const char one = 1;
            while (::write(wake_[1].get(), &one, 1) < 0 && errno == EINTR) {
            }
            watch_.join();
        }
    }
    TcpRankGroup(const TcpRankGroup&) = delete;
    TcpRankGroup& operator=(const TcpRankGroup&) = delete;

    void on_lost(std::function<void(const std::string& why)> lost, RankGroupWatch what) override {
        DSV4_ASSERT(!watch_.joinable(), "RankGroup::on_lost called twice");
        what_ = what;
        int p[2];
        DSV4_ASSERT(::pipe(p) == 0, "a pipe for the rank group's watch: ", std::strerror(errno));
        wake_[0] = Fd(p[0]);
        wake_[1] = Fd(p[1]);
        watch_ = std::thread([this, lost = std::move(lost)] {
            // Signals are not this thread's (a server waits for them in its own thread).
            sigset_t all;
            sigfillset(&all);
            pthread_sigmask(SIG_BLOCK, &all, nullptr);
            if (const std::string why = watch(); !why.empty()) lost(why);
        });
    }

    void step_begin() override { step_since_.store(std::max<int64_t>(steady_ns(), 1)); }
    void step_end() override { step_since_.store(0); }

    ops::Collective* collective(int rank) override { return rank == rank_ ? this : nullptr; }
    int rank() const override { return rank_; }
    int size() const override { return ranks_; }
    void leave(int /*rank*/) override {
        if (failed_.empty()) fail("rank " + std::to_string(rank_) + " left the group");
    }

    void all_reduce_sum(float* x, int64_t n) override {
        if (!failed_.empty()) return;
        const size_t bytes = static_cast<size_t>(n) * sizeof(float);
        if (rank_ != 0) {
            const int64_t header = n;
            in_.resize(static_cast<size_t>(n));
            Status s = send_all(peers_[0].get(), &header, sizeof header);
            if (s) s = send_all(peers_[0].get(), x, bytes);
            if (s) s = recv_all(peers_[0].get(), in_.data(), bytes);
            if (!s)
                return fail("rank " + std::to_string(rank_) +
                            ": the sum with rank 0: " + s.message());
            std::copy(in_.begin(), in_.end(), x);
            return;
        }
        sum_.assign(static_cast<size_t>(n), 0.0f);
        for (int64_t i = 0; i < n; ++i) sum_[static_cast<size_t>(i)] += x[i];
        in_.resize(static_cast<size_t>(n));
        for (int r = 1; r < ranks_; ++r) {
            int64_t header = 0;
            Status s = recv_all(peers_[r].get(), &header, sizeof header);
            if (s && header != n)
                s = error("it sums ", header, " floats, rank 0 ", n, " (different steps)");
            if (s) s = recv_all(peers_[r].get(), in_.data(), bytes);
            if (!s)
                return fail("rank 0: the sum with rank " + std::to_string(r) + ": " + s.message());
            for (int64_t i = 0; i < n; ++i)
                sum_[static_cast<size_t>(i)] += in_[static_cast<size_t>(i)];
        }
        for (int r = 1; r < ranks_; ++r)
            if (Status s = send_all(peers_[r].get(), sum_.data(), bytes); !s)
                return fail("rank 0: the sum to rank " + std::to_string(r) + ": " + s.message());
        std::copy(sum_.begin(), sum_.end(), x);
    }

    std::string shared_once(const std::function<std::string()>& make) override {
        if (!failed_.empty()) return {};
        if (rank_ == 0) {
            const std::string v = make();
            const uint64_t len = v.size();
            for (int r = 1; r < ranks_; ++r) {
                Status s = send_all(peers_[r].get(), &len, sizeof len);
                if (s) s = send_all(peers_[r].get(), v.data(), v.size());
                if (!s) {
                    fail("rank 0: a shared value to rank " + std::to_string(r) + ": " +
                         s.message());
                    return {};
                }
            }
            return v;
        }
        uint64_t len = 0;
        Status s = recv_all(peers_[0].get(), &len, sizeof len);
        if (s && len > kMaxShared) s = error("a shared value of ", len, " bytes");
        std::string v(s ? len : 0, '\0');
        if (s) s = recv_all(peers_[0].get(), v.data(), v.size());
        if (!s) {
            fail("rank " + std::to_string(rank_) + ": a shared value from rank 0: " + s.message());
            return {};
        }
        return v;
    }

    Status status() const override {
        return failed_.empty() ? Status::ok() : Status::error(failed_);
    }

  private:
    void fail(std::string why) {
        ended_ = true;  // (first: the watch must not take our own shutdown for a lost rank)
        // (A receive failing because the watch shut the connections down: the watch's reason.)
        failed_ = stalled_.load(std::memory_order_acquire) ? stall_why_ : std::move(why);
        for (Fd& p : peers_) p.shutdown();  // the others' next receive fails instead of waiting
    }

    // Waits until a connection hangs up (what_.hangups), a step outlives what_.step_timeout_s or
    // the group ends; why, or "" if this rank ended first.
    std::string watch() {
        std::vector<pollfd> fds;
        std::vector<int> whose;  // [i] the rank at the other end of fds[i]
        for (size_t r = 0; r < peers_.size() && what_.hangups; ++r)
            if (peers_[r].get() >= 0) {
                fds.push_back({peers_[r].get(), POLLRDHUP, 0});
                whose.push_back(static_cast<int>(r));
            }
        fds.push_back({wake_[0].get(), POLLIN, 0});
        const double limit = what_.step_timeout_s;
        // (A quarter of the timeout between looks, within [10, 200] ms: late by at most that.)
        const int every_ms =
            limit > 0 ? static_cast<int>(std::clamp(limit * 250.0, 10.0, 200.0)) : -1;
        for (;;) {
            const int n = ::poll(fds.data(), fds.size(), every_ms);
            if (ended_) return "";
            if (n < 0 && errno == EINTR) continue;
            if (n < 0)
                return str_cat("rank ", rank_,
                               ": watching the other ranks: ", std::strerror(errno));
            for (size_t i = 0; i + 1 < fds.size(); ++i)
                if ((fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0)
                    return str_cat("rank ", rank_, ": the connection to rank ", whose[i],
                                   " closed (its process ended, or its host went away)");
            const int64_t since = step_since_.load();
            if (limit > 0 && since != 0 &&
                1e-9 * static_cast<double>(steady_ns() - since) > limit) {
                char secs[32];
                std::snprintf(secs, sizeof secs, "%g", limit);
                const char* what = ": a step has not ended within the step timeout (";
                stall_why_ = str_cat("rank ", rank_, what, secs, " s): another rank may be hung");
                stalled_.store(true, std::memory_order_release);
                for (Fd& p : peers_) p.shutdown();  // (see the file comment)
                return stall_why_;
            }
        }
    }

    int rank_, ranks_;
    std::vector<Fd> peers_;  // rank 0: [r] the connection to rank r (r >= 1); others: [0]
    std::vector<float> sum_, in_;
    std::string failed_;
    std::atomic<bool> ended_{false};  // this rank left or failed: a hangup is not news
    Fd wake_[2];                      // a pipe: the destructor wakes the watch
    RankGroupWatch what_;             // (set before the watch starts)
    // The running step's start (steady clock, ns; 0: none), and the watch's verdict on it:
    // stall_why_ is written before stalled_ is set and read only after it was seen set.
    std::atomic<int64_t> step_since_{0};  // (steady_ns)
    std::atomic<bool> stalled_{false};
    std::string stall_why_;
    std::thread watch_;
};

struct Hello {
    uint32_t magic = kMagic;
    int32_t rank = 0, ranks = 0;
};

}  // namespace

Expected<std::unique_ptr<RankGroup::Impl>> connect_tcp_rank_group(int rank, int ranks,
                                                                  const std::string& address,
                                                                  double timeout_s) {
    DSV4_ASSIGN_OR_RETURN(const Address a, parse_address(address));
    if (!(timeout_s > 0)) return error("rendezvous timeout ", timeout_s, " s");
    const auto deadline = Clock::now() + std::chrono::milliseconds(
                                             static_cast<int64_t>(std::min(timeout_s, 1e6) * 1e3));
    std::vector<Fd> peers(static_cast<size_t>(rank == 0 ? ranks : 1));
    if (rank == 0) {
        DSV4_ASSIGN_OR_RETURN(Fd listener, listen_at(a, ranks));
        for (int joined = 1; joined < ranks;) {
            pollfd pf{listener.get(), POLLIN, 0};
            const int r = ::poll(&pf, 1, ms_left(deadline));
            if (r == 0)
                return error("rank 0: ", joined - 1, " of ", ranks - 1, " ranks joined at ",
                             address, " in ", timeout_s, " s");
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return error("rank 0: waiting for ranks: ", std::strerror(errno));
            Fd fd(::accept(listener.get(), nullptr, nullptr));
            if (fd.get() < 0) continue;
            Hello h;
            // A stranger (not a dsv4 rank, or a late duplicate) is dropped, not trusted.
            if (!recv_all(fd.get(), &h, sizeof h, &deadline) || h.magic != kMagic) continue;
            if (h.ranks != ranks)
                return error("rank 0: rank ", h.rank, " was started with ", h.ranks,
                             " ranks, rank 0 with ", ranks);
            if (h.rank < 1 || h.rank >= ranks || peers[static_cast<size_t>(h.rank)].get() >= 0)
                return error("rank 0: a second rank ", h.rank, " (or out of range) joined");
            no_delay(fd.get());
            const uint32_t ack = kMagic;
            DSV4_RETURN_IF_ERROR(send_all(fd.get(), &ack, sizeof ack));
            peers[static_cast<size_t>(h.rank)] = std::move(fd);
            ++joined;
        }
    } else {
        DSV4_ASSIGN_OR_RETURN(Fd fd, connect_until(a, deadline));
        no_delay(fd.get());
        const Hello h{kMagic, rank, ranks};
        uint32_t ack = 0;
        Status s = send_all(fd.get(), &h, sizeof h);
        if (s) s = recv_all(fd.get(), &ack, sizeof ack, &deadline);
        if (s && ack != kMagic) s = error("not a dsv4 rank 0");
        if (!s)
            return error("rank ", rank, ": joining rank 0 at ", address, ": ", s.message(),
                         " (another rank ", rank, ", or a different rank count?)");
        peers[0] = std::move(fd);
    }
    return std::unique_ptr<RankGroup::Impl>(
        std::make_unique<TcpRankGroup>(rank, ranks, std::move(peers)));
}

}  // namespace dsv4
