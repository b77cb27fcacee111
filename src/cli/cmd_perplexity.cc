// `dsv4 perplexity`: sliding-window perplexity of a text file, computed the way transformers'
// guide "Perplexity of fixed-length models" does, so the two can be compared number for number.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/text_model.h"
#include "dsv4/engine.h"
#include "dsv4/tokenizer.h"

namespace dsv4::cli {
namespace {

struct PerplexityArgs {
    EngineOptions engine;
    std::string text_file;
    std::string tokenizer;
    int context = 512;
    int stride = 0;  // 0: context / 2
    bool no_bos = false;
    bool no_progress = false;
};

// -log softmax(logits)[target], in double.
double nll(const float* logits, int64_t V, int32_t target) {
    const double mx = *std::max_element(logits, logits + V);
    double sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
    return std::log(sum) + mx - logits[target];
}

int run_perplexity(PerplexityArgs a) {
    if (a.stride == 0) a.stride = std::max(1, a.context / 2);
    if (a.stride > a.context) {
        std::fprintf(stderr, "error: --stride %d is larger than --context %d\n", a.stride,
                     a.context);
        return kExitUsage;
    }
    std::ifstream in(a.text_file, std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "error: %s: cannot read the text file\n", a.text_file.c_str());
        return kExitError;
    }
    std::stringstream text;
    text << in.rdbuf();
    auto tok = load_model_tokenizer(a.engine.model_dir, a.tokenizer);
    if (!tok) {
        print_error(tok.status());
        return kExitError;
    }
    a.engine.max_context = a.context;
    auto engine = Engine::create(a.engine);
    if (!engine) {
        print_error(engine.status());
        return kExitError;
    }
    std::vector<int32_t> ids;
    if (!a.no_bos) ids.push_back((*engine)->info().bos_token_id);
    const std::vector<int32_t> body = tok->encode(text.str(), /*parse_special=*/true);
    ids.insert(ids.end(), body.begin(), body.end());
    const int64_t n = static_cast<int64_t>(ids.size());
    if (n < 2) {
        std::fprintf(stderr, "error: %s: fewer than 2 tokens, nothing to score\n",
                     a.text_file.c_str());
        return kExitError;
    }
    auto session = (*engine)->new_session();
    if (!session) {
        print_error(session.status());
        return kExitError;
    }
    const int64_t V = (*engine)->info().vocab_size;
    const bool tty = isatty(fileno(stderr));
    const auto t0 = std::chrono::steady_clock::now();
    // Windows of `context` tokens every `stride`; each scores the tokens the previous one did
    // not. Like the guide, a window's mean loss is weighted by its valid labels minus one.
    double nll_sum = 0;
    int64_t weight = 0, fed = 0, windows = 0;
    std::vector<float> logits;
    for (int64_t begin = 0, prev_end = 0; begin < n; begin += a.stride) {
        const int64_t end = std::min(begin + a.context, n), trg = end - prev_end;
        (*session)->reset();
        const std::vector<int32_t> window(ids.begin() + begin, ids.begin() + end);
        if (Status st = (*session)->feed(window, &logits, nullptr); !st.is_ok()) {
            print_error(st);
            return kExitError;
        }
        double sum = 0;
        int64_t count = 0;
        for (int64_t t = std::max<int64_t>(1, end - begin - trg); t < end - begin; ++t) {
            const double v = nll(logits.data() + (t - 1) * V, V, window[t]);
            if (!std::isfinite(v)) {
                std::fprintf(stderr, "error: non-finite logits at token %lld of the text\n",
                             static_cast<long long>(begin + t - 1));
                return kExitError;
            }
            sum += v;
            ++count;
        }
        nll_sum += count ? sum / count * static_cast<double>(trg - 1) : 0.0;
        weight += trg - 1;
        fed += end - begin;
        ++windows;
        prev_end = end;
        if (!a.no_progress) {
            const double secs =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::fprintf(stderr, "%sperplexity: %lld / %lld tokens, %.0f tokens/s%s",
                         tty ? "\r" : "", static_cast<long long>(end), static_cast<long long>(n),
                         fed / std::max(secs, 1e-9), tty ? "" : "\n");
        }
        if (end == n) break;
    }
    if (!a.no_progress && tty) std::fputc('\n', stderr);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double mean = nll_sum / static_cast<double>(weight);
    std::printf(
        "perplexity %.4f  mean NLL %.6f nats over %lld scored tokens (%lld tokens, %lld "
        "windows of %d, stride %d)\n",
        std::exp(mean), mean, static_cast<long long>(weight), static_cast<long long>(n),
        static_cast<long long>(windows), a.context, a.stride);
    std::fprintf(stderr, "%.1f s, %.0f tokens/s\n", secs, fed / std::max(secs, 1e-9));
    return kExitOk;
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
    auto args = std::make_shared<PerplexityArgs>();
    CLI::App* cmd = app.add_subcommand(
        "perplexity", "Sliding-window perplexity of a text file (transformers' method)");
    cmd->footer(
        "Example: dsv4 perplexity --model models/kjv-tiny --text models/kjv-tiny/heldout.txt "
        "--context 512 --stride 256");
    add_engine_options(cmd, args->engine);
    cmd->add_option("--text", args->text_file, "UTF-8 text file")->required();
    cmd->add_option("--tokenizer", args->tokenizer,
                    "tokenizer.json or a folder holding one (default: the model folder's)");
    cmd->add_option("--context", args->context, "Window length in tokens")
        ->capture_default_str()
        ->check(whole_number(2, 1 << 24));
    cmd->add_option("--stride", args->stride, "Window step (default: context / 2)")
        ->check(whole_number(1, 1 << 24));
    cmd->add_flag("--no-bos", args->no_bos, "Do not start the token stream with BOS");
    cmd->add_flag("--no-progress", args->no_progress, "No progress line on stderr");
    cmd->callback([args] { set_exit_code(run_perplexity(*args)); });
}

}  // namespace dsv4::cli
