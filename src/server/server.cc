// dsv4::Server: the engine, the tokenizer, the engine thread and cpp-httplib put together, and
// the shutdown order (refuse new work, cancel what runs, let streams send their last event,
// close the listener).
#include "dsv4/server.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/routes.h"

namespace dsv4 {

using server::EngineLoop;
using server::Metrics;
using server::RouteContext;

struct Server::Impl {
    ServerOptions options;
    std::unique_ptr<Engine> engine;               // rank 0's
    std::vector<std::unique_ptr<Engine>> others;  // ranks 1.. (ServerOptions::ranks)
    std::shared_ptr<RankGroup> group;
    Tokenizer tokenizer;
    Metrics metrics;
    std::unique_ptr<EngineLoop> loop;
    std::unique_ptr<RouteContext> ctx;
    httplib::Server http;
    int port = 0;
    std::mutex mu;
    std::condition_variable cv;
    bool shutdown_requested = false;

    explicit Impl(Tokenizer tok) : tokenizer(std::move(tok)) {}
};

Expected<std::unique_ptr<Server>> Server::create(const ServerOptions& options) {
    const auto encoding = chat::parse_encoding_version(options.encoding);
    if (!encoding) return error("unknown encoding '", options.encoding, "' (v4 or v4-flash-0731)");
    if (options.max_body_bytes == 0) return error("the body limit must be > 0 bytes");
    std::string note;
    auto tok = load_model_tokenizer(options.engine.model_dir, options.tokenizer, &note);
    if (!tok) return tok.status();
    if (options.ranks < 1 || options.ranks > 64)
        return error("--ranks ", options.ranks, ": 1 to 64");
    if (options.prefix_cache < 0 || options.prefix_cache > options.engine.max_seqs)
        return error("--prefix-cache ", options.prefix_cache, ": 0 to --max-batch (",
                     options.engine.max_seqs, ")");
    if (options.prefix_snapshots < -1)
        return error("--prefix-snapshots ", options.prefix_snapshots,
                     ": -1 (8 per kept sequence) or a count >= 0");
    if (options.prefix_block < 0)
        return error("--prefix-block ", options.prefix_block, ": must be >= 0");
    if (options.prefix_cache == 0 && (options.prefix_snapshots > 0 || options.prefix_block > 0))
        return error("--prefix-snapshots and --prefix-block need --prefix-cache N");
    if (options.prefix_cache > 0 && (options.ranks > 1 || options.engine.rank_group != nullptr))
        return error(
            "--prefix-cache is not available with ranks (each rank would need the same "
            "kept sequences)");
    // Ranks as processes (engine.rank_group set by the caller): this is rank 0, the others run
    // Server::follow. In process: one engine a rank of one group (made one after another:
    // making an engine runs no collective), rank 0's first.
    std::shared_ptr<RankGroup> group = options.engine.rank_group;
    if (group != nullptr && options.engine.rank != 0)
        return error("rank ", options.engine.rank, " of a server follows rank 0 (Server::follow)");
    EngineOptions eo = options.engine;
    if (options.prefix_cache > 0)
        eo.snapshots =
            options.prefix_snapshots >= 0 ? options.prefix_snapshots : 8 * options.prefix_cache;
    // (An engine on a GPU joins its communicator as it is made, waiting for the other ranks:
    // made one after another, and stepped from passing threads, they need one process each.)
    if (group == nullptr && options.ranks > 1 && eo.device != "cpu" && eo.device != "auto")
        return error("--ranks ", options.ranks, " on device '", eo.device,
                     "': a server's ranks on GPUs run one process each (--gpus N, or --rank R "
                     "--rendezvous HOST:PORT)");
    if (group == nullptr && options.ranks > 1) {
        group = RankGroup::in_process(options.ranks);
        eo.rank_group = group;
        eo.rank = 0;
    }
    auto engine = Engine::create(eo);
    if (!engine) return engine.status();
    std::vector<std::unique_ptr<Engine>> others;  // (in process; processes: their own)
    for (int r = 1; options.engine.rank_group == nullptr && r < options.ranks; ++r) {
        eo.rank = r;
        auto other = Engine::create(eo);
        if (!other) return other.status();
        others.push_back(std::move(*other));
    }
    const ModelInfo& info = (*engine)->info();
    int64_t prefix_block = 0;
    if (eo.snapshots > 0) {
        prefix_block = options.prefix_block > 0 ? options.prefix_block : info.snapshot_block;
        if (prefix_block % info.snapshot_block != 0)
            return error("--prefix-block ", options.prefix_block, ": must be a multiple of ",
                         info.snapshot_block, " (the model's compress rates)");
    }
    // Every request gets the same speculation: refused now rather than each request.
    DSV4_RETURN_IF_ERROR((*engine)->check_speculation(options.speculative, options.draft_tokens));
    // Every id the tokenizer can produce must be one the model has, or prompts fail later.
    if (tok->vocab_size() > info.vocab_size)
        return error("the tokenizer has ids up to ", tok->vocab_size() - 1,
                     " but the model's vocabulary is ", info.vocab_size,
                     " (pass a matching --tokenizer)");
    auto impl = std::make_unique<Impl>(std::move(*tok));
    impl->options = options;
    impl->engine = std::move(*engine);
    impl->others = std::move(others);
    impl->group = group;
    if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
    if (options.prefix_cache > 0)
        std::fprintf(stderr,
                     "dsv4 serve: prefix cache of %d sequences, %d snapshots every %lld tokens "
                     "(%.1f MiB)\n",
                     options.prefix_cache, info.snapshots, static_cast<long long>(prefix_block),
                     static_cast<double>(info.snapshots) * info.snapshot_bytes / (1 << 20));

    std::string name = options.model_name;
    if (name.empty())
        name = std::filesystem::path(options.engine.model_dir).lexically_normal().filename();
    if (name.empty()) name = "dsv4";
    std::vector<Engine*> other_ranks;
    for (auto& e : impl->others) other_ranks.push_back(e.get());
    impl->loop = std::make_unique<EngineLoop>(
        *impl->engine, impl->metrics, static_cast<size_t>(options.engine.max_queue),
        std::move(other_ranks), impl->group, options.prefix_cache, prefix_block);
    impl->ctx.reset(new RouteContext{impl->tokenizer, impl->engine->info(), *impl->loop,
                                     impl->metrics, name, options.api_key, options.max_body_bytes,
                                     *encoding});
    impl->ctx->speculative = options.speculative;
    impl->ctx->draft_tokens = options.draft_tokens;
    impl->ctx->created = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    // A streaming client holds a thread for its whole response.
    const int threads = options.http_threads > 0 ? options.http_threads
                                                 : std::max(64, 2 * options.engine.max_seqs + 32);
    impl->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    impl->http.set_keep_alive_timeout(2);  // idle connections let go soon (and at shutdown)
    server::install_routes(impl->http, *impl->ctx);
    impl->port = options.port == 0
                     ? impl->http.bind_to_any_port(options.host)
                     : (impl->http.bind_to_port(options.host, options.port) ? options.port : -1);
    if (impl->port < 0)
        return error("cannot listen on ", options.host, ":", options.port,
                     " (address in use, or not a local address)");
    return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

int Server::port() const {
    return impl_->port;
}

const std::string& Server::model_name() const {
    return impl_->ctx->model_name;
}

void Server::run() {
    Impl& s = *impl_;
    s.loop->start();
    std::thread listener([&s] {
        s.http.listen_after_bind();
        // The listener may also end on its own (a socket error): that is a shutdown too.
        std::lock_guard<std::mutex> lock(s.mu);
        s.shutdown_requested = true;
        s.cv.notify_all();
    });
    {
        std::unique_lock<std::mutex> lock(s.mu);
        s.cv.wait(lock, [&] { return s.shutdown_requested; });
    }
    s.ctx->draining = true;
    s.loop->stop();  // every request in flight now has its end in its channel
    // Let the HTTP threads write those ends before the listener stops them (bounded wait).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (s.ctx->in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s.http.stop();
    listener.join();
}

Status Server::follow(const ServerOptions& options) {
    const std::shared_ptr<RankGroup>& group = options.engine.rank_group;
    const int rank = options.engine.rank;
    if (group == nullptr || rank <= 0)
        return error("Server::follow: ranks as processes, rank >= 1 (rank 0 serves)");
    auto engine = Engine::create(options.engine);
    if (!engine) {
        group->leave(rank);
        return engine.status();
    }
    std::fprintf(stderr, "dsv4 serve: rank %d of %d, following rank 0\n", rank, group->size());
    const Status s = server::follow_rank0(**engine, *group, rank);
    group->leave(rank);
    return s;
}

void Server::shutdown() {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->shutdown_requested = true;
    impl_->cv.notify_all();
}

}  // namespace dsv4
