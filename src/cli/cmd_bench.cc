// `dsv4 bench`: prefill and decode speed of a model on a device, with synthetic token ids.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "cli/commands.h"
#include "dsv4/engine.h"

namespace dsv4::cli {

namespace {

struct BenchArgs {
    EngineOptions engine;
    int prompt_len = 128;
    int decode_tokens = 32;
    int repeats = 3;
    bool context_given = false;  // --max-context on the command line: kept as given
};

int run_bench(BenchArgs a) {
    const int64_t need = int64_t{a.prompt_len} + a.decode_tokens;
    if (a.context_given && need > a.engine.max_context) {
        std::fprintf(stderr,
                     "error: --prompt-len %d + --decode %d = %lld tokens exceed --max-context "
                     "%lld\n",
                     a.prompt_len, a.decode_tokens, static_cast<long long>(need),
                     static_cast<long long>(a.engine.max_context));
        return kExitUsage;
    }
    if (!a.context_given) a.engine.max_context = need;
    auto engine = Engine::create(a.engine);
    if (!engine) {
        print_error(engine.status());
        return kExitError;
    }
    const ModelInfo& info = (*engine)->info();
    std::vector<int32_t> prompt(a.prompt_len);
    for (int i = 0; i < a.prompt_len; ++i) prompt[i] = (i * 7919 + 13) % info.vocab_size;
    auto made = (*engine)->new_session();
    if (!made) {
        print_error(made.status());
        return kExitError;
    }
    Session* session = made->get();
    using clock = std::chrono::steady_clock;
    double best_prefill = 1e30, best_decode = 1e30;
    std::vector<float> logits;
    for (int r = 0; r < a.repeats; ++r) {
        session->reset();
        const auto t0 = clock::now();
        Status st = session->feed(prompt, nullptr, &logits);
        const auto t1 = clock::now();
        for (int i = 0; st.is_ok() && i < a.decode_tokens; ++i)
            st = session->feed({(i * 31 + 7) % info.vocab_size}, nullptr, &logits);
        const auto t2 = clock::now();
        if (!st.is_ok()) {
            print_error(st);
            return kExitError;
        }
        best_prefill = std::min(best_prefill, std::chrono::duration<double>(t1 - t0).count());
        best_decode = std::min(best_decode, std::chrono::duration<double>(t2 - t1).count());
    }
    std::printf("model %s on %s: %s\n", a.engine.model_dir.c_str(), info.device.c_str(),
                info.summary.c_str());
    std::printf("prefill %d tokens: %.3f s, %.1f tokens/s\n", a.prompt_len, best_prefill,
                a.prompt_len / best_prefill);
    if (a.decode_tokens > 0)
        std::printf("decode %d tokens: %.2f ms/token, %.1f tokens/s (best of %d)\n",
                    a.decode_tokens, 1e3 * best_decode / a.decode_tokens,
                    a.decode_tokens / best_decode, a.repeats);
    return 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
    auto args = std::make_shared<BenchArgs>();
    CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode speed");
    cmd->footer("Example: dsv4 bench --model tests/data/golden/small-rates --prompt-len 256");
    add_engine_options(cmd, args->engine);
    cmd->add_option("--prompt-len", args->prompt_len, "Prompt tokens")
        ->capture_default_str()
        ->check(whole_number(1, 1 << 30));
    cmd->add_option("--decode", args->decode_tokens, "Decode steps")
        ->capture_default_str()
        ->check(whole_number(0, 1 << 30));
    cmd->add_option("--repeats", args->repeats, "Runs; the best is reported")
        ->capture_default_str()
        ->check(whole_number(1, 1000));
    cmd->callback([args, cmd] {
        args->context_given = cmd->get_option("--max-context")->count() > 0;
        set_exit_code(run_bench(*args));
    });
}

}  // namespace dsv4::cli
