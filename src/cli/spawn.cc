#include "cli/spawn.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

namespace dsv4::cli {
namespace {

std::vector<std::string>& program_args() {
    static std::vector<std::string> args;
    return args;
}

}  // namespace

void set_program_args(int argc, char** argv) {
    program_args().assign(argv, argv + argc);
}

Expected<int> free_local_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return error("a socket for a free port: ", std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
    const int err = errno;
    close(fd);
    if (!ok) return error("a free port on 127.0.0.1: ", std::strerror(err));
    return static_cast<int>(ntohs(a.sin_port));
}

Expected<std::vector<int>> spawn_self(const std::vector<std::vector<std::string>>& extra) {
    const std::vector<std::string>& args = program_args();
    if (args.size() < 2) return error("starting ranks: no subcommand in the command line");
    std::vector<int> pids;
    for (const std::vector<std::string>& mine : extra) {
        // Everything the child needs, made before fork (after it only exec-safe calls).
        std::vector<std::string> child = {args[0], args[1]};
        child.insert(child.end(), mine.begin(), mine.end());
        child.insert(child.end(), args.begin() + 2, args.end());
        std::vector<char*> argv;
        for (std::string& s : child) argv.push_back(s.data());
        argv.push_back(nullptr);
        const pid_t parent = getpid();
        const pid_t pid = fork();
        if (pid == 0) {
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent) _exit(1);  // (the parent died before prctl)
            execv("/proc/self/exe", argv.data());
            _exit(127);
        }
        if (pid < 0) {
            const Status why = error("starting a rank's process: ", std::strerror(errno));
            for (int started : pids) {
                kill(started, SIGTERM);
                int st = 0;
                while (waitpid(started, &st, 0) < 0 && errno == EINTR) {
                }
            }
            return why;
        }
        pids.push_back(pid);
    }
    return pids;
}

namespace {

// Why a child's wait status is a failure, or "" for exit 0.
std::string failure(int st) {
    if (WIFSIGNALED(st))
        return str_cat(" was killed by signal ", WTERMSIG(st), " (", strsignal(WTERMSIG(st)), ")");
    if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
        return str_cat(" exited with status ", WEXITSTATUS(st),
                       WEXITSTATUS(st) == 127 ? " (this program could not be started again)"
                                              : " (its error is above)");
    return "";
}

}  // namespace

bool StopAfterLoss::step(std::chrono::steady_clock::duration since_loss, const std::string& why) {
    if (!termed_ && since_loss > std::chrono::seconds(3)) {
        std::fprintf(stderr, "error: %s; %s cannot go on without it: stopping\n", why.c_str(),
                     who_.c_str());
        kill(getpid(), SIGTERM);
        termed_ = true;
    } else if (!killed_ && since_loss > std::chrono::seconds(13)) {
        kill(getpid(), SIGKILL);
        killed_ = true;
    }
    return !killed_;
}

namespace {

// Signals for the process are not a watch thread's: a server waits for SIGTERM / SIGINT with
// them blocked in its own threads, and one left unblocked here would take them.
void block_signals() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

}  // namespace

struct RankWatch::State {
    using Clock = std::chrono::steady_clock;
    // How long the ranks left get after rank 0 ended well before SIGTERM (a rank that follows
    // rank 0 out may free a large model's memory first), and after SIGTERM before SIGKILL.
    static constexpr int kGraceS = 30, kKillS = 10;
    std::vector<int> pids;
    std::vector<std::string> names;
    std::mutex m;
    bool finishing = false;                    // rank 0 ended (under m)
    std::optional<Clock::time_point> term_at;  // when the ranks left get SIGTERM (under m)
    bool rank0_failed = false;                 // (under m)
    Status first = Status::ok();               // the first started rank's failure (under m)
    std::thread thread;

    // Once rank 0 has ended: SIGTERM at term_at, SIGKILL kKillS later, to the ranks not reaped
    // (`sent`: 0 nothing yet, 1 SIGTERM, 2 SIGKILL), each named in `first` if nothing was and
    // rank 0 ended well (else they were only told to follow it).
    void end_the_rest(const std::vector<bool>& done, int& sent) {
        std::lock_guard<std::mutex> lock(m);
        if (!term_at || sent == 2) return;
        const Clock::time_point now = Clock::now();
        const int due = now >= *term_at + std::chrono::seconds(kKillS) ? 2
                        : now >= *term_at                              ? 1
                                                                       : 0;
        if (due <= sent) return;
        for (size_t i = 0; i < pids.size(); ++i) {
            if (done[i]) continue;
            kill(pids[i], due == 2 ? SIGKILL : SIGTERM);
            if (rank0_failed) continue;
            if (first.is_ok() && due == 2)
                first = error(names[i], " had not ended ", kKillS, " s after its SIGTERM: killed");
            else if (first.is_ok())
                first = error(names[i], " had not ended ", kGraceS,
                              " s after rank 0: stopped (SIGTERM)");
        }
        sent = due;
    }

    // Reaps the children as they end; escalates while rank 0 outlives a lost rank, and against
    // the ranks that outlive rank 0.
    void watch() {
        std::vector<bool> done(pids.size(), false);
        size_t left = pids.size();
        std::optional<Clock::time_point> lost;
        StopAfterLoss stop("rank 0");
        int sent = 0;
        // Until every started rank is reaped, and while rank 0 outlives a lost one.
        for (bool escalating = false; left > 0 || escalating;) {
            end_the_rest(done, sent);
            for (size_t i = 0; i < pids.size(); ++i) {
                if (done[i]) continue;
                int st = 0;
                const pid_t got = waitpid(pids[i], &st, WNOHANG);
                if (got == 0 || (got < 0 && errno == EINTR)) continue;
                done[i] = true;
                --left;
                const std::string why = got < 0 ? str_cat(": ", std::strerror(errno)) : failure(st);
                std::lock_guard<std::mutex> lock(m);
                if (!why.empty() && first.is_ok()) {
                    first = error(names[i], why);
                    lost = Clock::now();
                }
            }
            bool ended;
            Status why;
            {
                std::lock_guard<std::mutex> lock(m);
                ended = finishing;
                why = first;
            }
            escalating = lost && !ended && stop.step(Clock::now() - *lost, why.message());
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
};

RankWatch::RankWatch(std::vector<int> pids, std::vector<std::string> names)
    : s_(std::make_unique<State>()) {
    s_->pids = std::move(pids);
    s_->names = std::move(names);
    s_->thread = std::thread([this] {
        block_signals();
        s_->watch();
    });
}

RankWatch::~RankWatch() {
    if (s_->thread.joinable()) (void)finish(/*terminate=*/true);
}

Status RankWatch::finish(bool terminate) {
    {
        std::lock_guard<std::mutex> lock(s_->m);
        s_->finishing = true;
        s_->rank0_failed = terminate;
        s_->term_at = State::Clock::now() + std::chrono::seconds(terminate ? 0 : State::kGraceS);
    }
    if (s_->thread.joinable()) s_->thread.join();
    std::lock_guard<std::mutex> lock(s_->m);
    return s_->first;
}

struct PeerWatch::State {
    std::mutex m;
    std::condition_variable cv;
    bool finishing = false;                                     // this rank's run ended (under m)
    std::optional<std::chrono::steady_clock::time_point> lost;  // (under m)
    Status why = Status::ok();                                  // the loss (under m)
    bool stopping = false;                                      // SIGTERM sent for it (under m)
};

PeerWatch::PeerWatch(RankGroup& group, int rank, RankGroupWatch what)
    : s_(std::make_shared<State>()) {
    group.on_lost(
        [s = s_](const std::string& why) {
            std::lock_guard<std::mutex> lock(s->m);
            s->lost = std::chrono::steady_clock::now();
            s->why = Status::error(why);
            s->cv.notify_all();
        },
        what);
    thread_ = std::thread([s = s_, rank] {
        block_signals();
        StopAfterLoss stop("rank " + std::to_string(rank));
        std::unique_lock<std::mutex> lock(s->m);
        s->cv.wait(lock, [&] { return s->finishing || s->lost; });
        while (!s->finishing &&
               stop.step(std::chrono::steady_clock::now() - *s->lost, s->why.message())) {
            s->stopping = stop.stopping();
            s->cv.wait_for(lock, std::chrono::milliseconds(20));
        }
        s->stopping = stop.stopping();
    });
}

PeerWatch::~PeerWatch() {
    if (thread_.joinable()) (void)finish();
}

Status PeerWatch::finish() {
    {
        std::lock_guard<std::mutex> lock(s_->m);
        s_->finishing = true;
        s_->cv.notify_all();
    }
    if (thread_.joinable()) thread_.join();
    std::lock_guard<std::mutex> lock(s_->m);
    return s_->stopping ? s_->why : Status::ok();
}

}  // namespace dsv4::cli
