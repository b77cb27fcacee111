#include "base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4 {
namespace {

// True on pool workers and on a thread inside run(): nested parallel_for calls run serially
// instead of waiting for workers that are busy with the outer loop.
thread_local bool t_inside_pool = false;

class Pool {
  public:
    explicit Pool(int n) { resize(n); }
    ~Pool() { stop(); }

    int size() const { return static_cast<int>(workers_.size()) + 1; }

    void resize(int n) {
        stop();
        stopping_ = false;
        for (int i = 1; i < n; ++i) workers_.emplace_back([this] { loop(); });
    }

    void run(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
        const int64_t parts =
            std::min<int64_t>(size(), std::max<int64_t>(1, n / std::max<int64_t>(1, min_chunk)));
        if (parts <= 1 || t_inside_pool) {
            fn(0, n);
            return;
        }
        std::lock_guard<std::mutex> run_lock(run_mutex_);
        // The job lives on this stack frame; a worker only touches it between taking it (users
        // + 1, under m_) and giving it back, and this call returns only when every part is done
        // and no worker holds it, so no worker can see a later job's state through it.
        Job job{&fn, n, parts};
        job.pending = parts;
        {
            std::lock_guard<std::mutex> lk(m_);
            job_ = &job;
            ++generation_;
        }
        cv_.notify_all();
        t_inside_pool = true;
        run_parts(job);
        t_inside_pool = false;
        std::unique_lock<std::mutex> lk(m_);
        job_ = nullptr;
        done_cv_.wait(lk, [&] { return job.pending == 0 && job.users == 0; });
    }

  private:
    struct Job {
        const std::function<void(int64_t, int64_t)>* fn;
        int64_t n, parts;
        std::atomic<int64_t> next{0};
        int64_t pending = 0;  // parts not finished (guarded by m_)
        int users = 0;        // workers holding this job (guarded by m_)
    };

    void run_parts(Job& j) {
        for (;;) {
            const int64_t p = j.next.fetch_add(1);
            if (p >= j.parts) break;
            (*j.fn)(j.n * p / j.parts, j.n * (p + 1) / j.parts);
            std::lock_guard<std::mutex> lk(m_);
            if (--j.pending == 0) done_cv_.notify_all();
        }
    }

    void loop() {
        t_inside_pool = true;
        uint64_t seen = 0;
        for (;;) {
            Job* job = nullptr;
            {
                std::unique_lock<std::mutex> lk(m_);
                cv_.wait(lk, [&] { return stopping_ || (job_ != nullptr && generation_ != seen); });
                if (stopping_) return;
                seen = generation_;
                job = job_;
                ++job->users;
            }
            run_parts(*job);
            std::lock_guard<std::mutex> lk(m_);
            if (--job->users == 0) done_cv_.notify_all();
        }
    }

    void stop() {
        {
            std::lock_guard<std::mutex> lk(m_);
            stopping_ = true;
        }
        cv_.notify_all();
        for (auto& t : workers_) t.join();
        workers_.clear();
    }

    std::vector<std::thread> workers_;
    std::mutex run_mutex_, m_;
    std::condition_variable cv_, done_cv_;
    Job* job_ = nullptr;  // the running job, if any (guarded by m_)
    uint64_t generation_ = 0;
    bool stopping_ = false;
};

int default_threads() {
    if (const char* env = std::getenv("DSV4_THREADS")) {
        int n = std::atoi(env);
        if (n > 0) return n;
    }
    return std::max(1u, std::thread::hardware_concurrency());
}

Pool& pool() {
    static Pool p(default_threads());
    return p;
}

}  // namespace

int num_threads() {
    return pool().size();
}
void set_num_threads(int n) {
    pool().resize(std::max(1, n));
}

void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    pool().run(n, min_chunk, fn);
}

}  // namespace dsv4
