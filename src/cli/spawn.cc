#include "cli/spawn.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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
            (void)wait_children(pids, std::vector<std::string>(pids.size()), true);
            return why;
        }
        pids.push_back(pid);
    }
    return pids;
}

Status wait_children(const std::vector<int>& pids, const std::vector<std::string>& names,
                     bool terminate) {
    if (terminate)
        for (int pid : pids) kill(pid, SIGTERM);
    Status first = Status::ok();
    for (size_t i = 0; i < pids.size(); ++i) {
        int st = 0;
        pid_t got;
        do {
            got = waitpid(pids[i], &st, 0);
        } while (got < 0 && errno == EINTR);
        if (!first.is_ok()) continue;
        const std::string who =
            i < names.size() && !names[i].empty() ? names[i] : "process " + std::to_string(pids[i]);
        if (got < 0)
            first = error(who, ": ", std::strerror(errno));
        else if (WIFSIGNALED(st))
            first = error(who, " was killed by signal ", WTERMSIG(st), " (",
                          strsignal(WTERMSIG(st)), ")");
        else if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
            first = error(who, " exited with status ", WEXITSTATUS(st),
                          WEXITSTATUS(st) == 127 ? " (this program could not be started again)"
                                                 : " (its error is above)");
    }
    return first;
}

}  // namespace dsv4::cli
