// `dsv4 generate`: prefill a prompt and stream the continuation.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/ranks.h"
#include "cli/text_model.h"
#include "dsv4/engine.h"
#include "dsv4/tokenizer.h"

namespace dsv4::cli {
namespace {

struct GenerateArgs {
    EngineOptions engine;
    std::string prompt_ids;
    std::string prompt;     // text, tokenized with the model's tokenizer.json
    std::string tokenizer;  // override for the tokenizer.json path
    bool no_bos = false;
    int max_tokens = 32;
    SamplingParams sampling;
    LogitsRules rules;
    bool ignore_eos = false;
    SpeculativeArgs spec;
    RankArgs ranks;
};

Expected<std::vector<int32_t>> parse_ids(const std::string& text) {
    std::vector<int32_t> ids;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        try {
            size_t used = 0;
            long v = std::stol(item, &used);
            if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
            ids.push_back(static_cast<int32_t>(v));
        } catch (const std::exception&) {
            return error("--prompt-ids: '", item, "' is not a token id");
        }
    }
    if (ids.empty()) return error("--prompt-ids: no token ids given");
    return ids;
}

// One rank's generation (every rank the same; rank 0 prints the text and the timings).
// prompt: the prompt's ids; the model's BOS goes first for a text prompt (tok) unless a.no_bos.
Status generate_on(const GenerateArgs& a, const EngineOptions& o, bool print, const Tokenizer* tok,
                   const std::vector<int32_t>& prompt) {
    const auto t0 = std::chrono::steady_clock::now();
    DSV4_ASSIGN_OR_RETURN(auto engine, Engine::create(o));
    std::vector<int32_t> ids;
    if (tok != nullptr && !a.no_bos) ids.push_back(engine->info().bos_token_id);
    ids.insert(ids.end(), prompt.begin(), prompt.end());
    std::optional<TokenStreamDecoder> stream;
    if (tok != nullptr && print) stream.emplace(*tok);
    const auto t1 = std::chrono::steady_clock::now();
    DSV4_ASSIGN_OR_RETURN(auto session, engine->new_session());
    std::chrono::steady_clock::time_point first;
    int n = 0;
    Engine::GenerateStats spec;
    auto out = engine->generate(
        *session, ids, a.max_tokens, a.sampling, !a.ignore_eos,
        [&](int32_t t) {
            if (n++ == 0) first = std::chrono::steady_clock::now();
            if (!print) return true;
            if (stream)
                std::fputs(stream->push(t).c_str(), stdout);
            else
                std::printf("%s%d", n > 1 ? "," : "", t);
            std::fflush(stdout);
            return true;
        },
        a.spec.speculation(), &spec, a.spec.draft_tokens, a.rules);
    if (print) {
        if (stream) std::fputs(stream->flush().c_str(), stdout);
        std::printf("\n");
        std::fflush(stdout);
    }
    if (!out) return out.status();
    if (!print) return Status::ok();
    const auto t2 = std::chrono::steady_clock::now();
    auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
    std::fprintf(
        stderr,
        "load %.2f s, prompt %zu tokens, time to first token %.3f s, %d tokens, %.2f tokens/s%s\n",
        secs(t1 - t0), ids.size(), n ? secs(first - t1) : 0.0, n,
        n > 1 ? (n - 1) / secs(t2 - first) : 0.0, ranks_note(a.ranks).c_str());
    if (a.spec.mode != "off") {
        std::fprintf(stderr, "speculative (%s): %d drafts, %d accepted (%.0f%%); by place:",
                     a.spec.mode.c_str(), spec.drafted, spec.accepted,
                     spec.drafted ? 100.0 * spec.accepted / spec.drafted : 0.0);
        for (int j = 0; j < kMaxDraftTokens && spec.drafted_at[j] > 0; ++j)
            std::fprintf(stderr, " %d/%d", spec.accepted_at[j], spec.drafted_at[j]);
        std::fprintf(stderr, "\n");
    }
    return Status::ok();
}

int run_generate(GenerateArgs a) {  // (a copy: check_rank_args resolves --gpus into it)
    if (a.prompt.empty() == a.prompt_ids.empty()) {
        std::fprintf(stderr, "error: give exactly one of --prompt and --prompt-ids\n");
        return kExitUsage;
    }
    if (Status st = check_rank_args(a.ranks, a.engine); !st.is_ok()) {
        print_error(st);
        return kExitUsage;
    }
    std::optional<Tokenizer> tok;
    std::vector<int32_t> ids;
    if (!a.prompt.empty()) {
        auto loaded = load_model_tokenizer(a.engine.model_dir, a.tokenizer);
        if (!loaded) {
            print_error(loaded.status());
            return kExitError;
        }
        tok.emplace(std::move(*loaded));
        ids = tok->encode(a.prompt, /*parse_special=*/true);
    } else {
        auto parsed = parse_ids(a.prompt_ids);
        if (!parsed) {
            print_error(parsed.status());
            return kExitUsage;
        }
        ids = std::move(*parsed);
    }
    const Tokenizer* t = tok ? &*tok : nullptr;
    const Status st = run_on_ranks(a.engine, a.ranks, [&](const EngineOptions& o, int rank) {
        return generate_on(a, o, /*print=*/rank == 0, t, ids);
    });
    if (!st.is_ok()) {
        print_error(st);
        return kExitError;
    }
    return kExitOk;
}

}  // namespace

void add_generate_command(CLI::App& app) {
    auto args = std::make_shared<GenerateArgs>();
    CLI::App* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt");
    cmd->footer(
        "Examples:\n  dsv4 generate --model DIR --prompt \"Pipeline parallelism in ai is \" "
        "--max-tokens 32\n  dsv4 generate --model tests/data/golden/small-rates --prompt-ids "
        "0,17,42 --max-tokens 16");
    add_engine_options(cmd, args->engine, /*synthetic=*/true);
    cmd->add_option("--prompt", args->prompt,
                    "Prompt text (tokenized with the model's tokenizer.json)");
    cmd->add_option("--prompt-ids", args->prompt_ids, "Comma-separated token ids");
    cmd->add_option("--tokenizer", args->tokenizer,
                    "tokenizer.json or a folder holding one (default: the model folder's)");
    cmd->add_flag("--no-bos", args->no_bos, "Do not start the text prompt with BOS");
    cmd->add_option("--max-tokens", args->max_tokens, "Tokens to generate")
        ->capture_default_str()
        ->check(whole_number(1, 1 << 30));
    add_sampling_options(cmd, args->sampling);
    add_rules_options(cmd, args->rules);
    cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep going after the end-of-sequence token");
    add_speculative_options(cmd, args->spec);
    add_rank_options(cmd, args->ranks);
    cmd->callback([args] { set_exit_code(run_generate(*args)); });
}

}  // namespace dsv4::cli
