// `dsv4 serve`: the OpenAI-compatible server (include/dsv4/server.h). SIGTERM / SIGINT shut
// it down gracefully (requests in flight are cancelled and told so) and it exits 0.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/ranks.h"
#include "dsv4/server.h"

namespace dsv4::cli {

namespace {

int run_serve(const ServerOptions& options) {
    // Before any thread exists (the engine starts its pool): every thread inherits the mask,
    // so the signals reach only the sigwait below. A client that disconnects must not kill
    // the process with SIGPIPE.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    signal(SIGPIPE, SIG_IGN);

    auto server = Server::create(options);
    if (!server) {
        print_error(server.status());
        return kExitError;
    }
    std::printf("dsv4 serve: listening on http://%s:%d (model \"%s\")\n", options.host.c_str(),
                (*server)->port(), (*server)->model_name().c_str());
    std::fflush(stdout);
    std::atomic<bool> finished{false};
    std::thread waiter([&] {
        const timespec tick{0, 200 * 1000 * 1000};
        while (!finished.load()) {
            const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
            if (sig == SIGTERM || sig == SIGINT) {
                std::fprintf(stderr, "dsv4 serve: %s, shutting down\n",
                             sig == SIGTERM ? "SIGTERM" : "SIGINT");
                (*server)->shutdown();
                return;
            }
        }
    });
    (*server)->run();
    finished = true;
    waiter.join();
    std::fprintf(stderr, "dsv4 serve: stopped\n");
    return kExitOk;
}

// With --rendezvous: this process's rank, rank 0 serving, the others following it.
int run_serve_rank(const ServerOptions& options, const RankArgs& r) {
    int code = kExitOk;
    const Status st = run_on_ranks(options.engine, r, [&](const EngineOptions& eo, int rank) {
        ServerOptions so = options;
        so.engine = eo;
        so.ranks = r.ranks;
        if (rank == 0) {
            code = run_serve(so);
            return Status::ok();
        }
        // (rank 0 ending, by its shutdown or its failure, ends this one)
        return Server::follow(so);
    });
    if (!st.is_ok()) {
        print_error(st);
        return kExitError;
    }
    return code;
}

}  // namespace

void add_serve_command(CLI::App& app) {
    auto o = std::make_shared<ServerOptions>();
    auto spec = std::make_shared<SpeculativeArgs>();
    o->engine.max_seqs = 16;
    CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
    cmd->footer(
        "Example: dsv4 serve --model DIR --port 8000 --max-batch 16\n"
        "Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, "
        "GET /health, GET /metrics (docs/server.md)");
    add_engine_options(cmd, o->engine, /*synthetic=*/true);
    cmd->add_option("--max-batch", o->engine.max_seqs,
                    "Requests running together (cache slots; same as --max-seqs)")
        ->capture_default_str();
    cmd->add_option("--max-queue", o->engine.max_queue,
                    "Requests waiting for a slot before new ones get 429")
        ->capture_default_str();
    cmd->add_option("--prefix-cache", o->prefix_cache,
                    "Finished requests' sequences kept in idle slots for the requests that "
                    "continue them (a conversation's next turn feeds only its new tokens; 0: off)")
        ->capture_default_str();
    cmd->add_option("--prefix-snapshots", o->prefix_snapshots,
                    "With --prefix-cache: snapshot buffers for the kept sequences, so a prompt "
                    "sharing only their start (a system prompt) skips that part (-1: 8 per kept "
                    "sequence; 0: whole sequences only)")
        ->capture_default_str();
    cmd->add_option("--prefix-block", o->prefix_block,
                    "With --prefix-cache: prompt tokens between snapshots (0: the model's block, "
                    "the least common multiple of its compress rates; else a multiple of it)")
        ->capture_default_str();
    cmd->add_option("--tokenizer", o->tokenizer, "tokenizer.json (default: the model folder's)");
    cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
    cmd->add_option("--port", o->port, "Port (0: any free port)")->capture_default_str();
    cmd->add_option("--api-key", o->api_key, "Require Authorization: Bearer KEY on /v1/*");
    cmd->add_option("--served-model-name", o->model_name,
                    "Model id clients send (default: the model folder's name)");
    cmd->add_option("--max-body-bytes", o->max_body_bytes, "Larger request bodies get 413")
        ->capture_default_str();
    cmd->add_option("--http-threads", o->http_threads,
                    "HTTP worker threads; each streaming client holds one (0: auto)")
        ->capture_default_str();
    cmd->add_option("--encoding", o->encoding, "Chat encoding: v4 or v4-flash-0731")
        ->capture_default_str();
    add_speculative_options(cmd, *spec);
    auto ranks = std::make_shared<RankArgs>();
    add_rank_options(cmd, *ranks);
    cmd->callback([o, spec, ranks] {
        o->speculative = spec->speculation();
        o->draft_tokens = spec->draft_tokens;
        if (Status st = check_rank_args(*ranks, o->engine); !st.is_ok()) {
            print_error(st);
            set_exit_code(kExitUsage);
            return;
        }
        if (!ranks->rendezvous.empty()) {
            set_exit_code(run_serve_rank(*o, *ranks));
            return;
        }
        o->ranks = ranks->ranks;
        set_exit_code(run_serve(*o));
    });
}

}  // namespace dsv4::cli
