// `dsv4 bench`: prefill and decode speed of a model (or a synthetic one) on a device, with
// synthetic token ids. Decode is measured at each --context for each --batch: one sequence is
// prefilled to the context, copied into `batch` sessions, and `batch` requests decode from
// there in batched steps (only the sampled ids come back each step, as in serving). Each row
// gives the bytes a step reads (weights as stored + KV cache, Engine::decode_step_bytes) and
// that over the read bandwidth measured in the same run: the fraction of the roofline.
#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/ranks.h"
#include "dsv4/engine.h"

namespace dsv4::cli {

namespace {

struct BenchArgs {
    EngineOptions engine;
    int prompt_len = 128;
    int decode_tokens = 32;
    int repeats = 3;
    std::string batches = "1";
    std::string contexts;        // empty: the prompt length
    bool context_given = false;  // --max-context on the command line: kept as given
    bool seqs_given = false;     // --max-seqs likewise
    bool profile = false;
    SpeculativeArgs spec;  // the decode requests' (tokens/s counts what the steps yielded)
    // The decode requests' sampling (sequence i seeded seed + i), logits rules and
    // log-probabilities: what they add to a step is then measured (default: greedy, none).
    SamplingParams sampling;
    LogitsRules rules;
    int logprobs = -1;
    RankArgs ranks;
};

using clock_type = std::chrono::steady_clock;

// printf on the rank that prints (ranks.h), nothing on the others.
struct Say {
    bool on = true;
    __attribute__((format(printf, 2, 3))) void operator()(const char* fmt, ...) const {
        if (!on) return;
        va_list args;
        va_start(args, fmt);
        std::vfprintf(stdout, fmt, args);
        va_end(args);
    }
};

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

Expected<std::vector<int64_t>> parse_list(const std::string& s, const char* flag) {
    std::vector<int64_t> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        char* end = nullptr;
        const long long v = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || end == nullptr || *end != '\0' || v < 1 || v > (1ll << 30))
            return error(flag, ": '", item, "' is not a whole number in [1, 2^30]");
        out.push_back(v);
    }
    if (out.empty()) return error(flag, ": no values");
    return out;
}

std::vector<int32_t> synthetic_ids(int64_t n, int vocab, int salt) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        ids[i] = static_cast<int32_t>((i * 7919 + 13 + salt * 104729) % vocab);
    return ids;
}

struct DecodeRow {
    int64_t context = 0;
    int batch = 0;
    double ms_per_step = 0;
    double tokens_per_step = 0;  // over the batch (speculative steps may yield more)
    StepBytes bytes;
};

struct DecodeTiming {
    double ms_per_step = 0;
    double tokens_per_step = 0;  // over the timed steps, all sequences
    int steps = 0;               // all of them
    int drafted = 0, accepted = 0;
};

// A decode request as the command line asks for it (its prompt, length and session set by
// time_decode).
Request decode_request(const BenchArgs& a) {
    Request r;
    r.stop_at_eos = false;
    r.sampling = a.sampling;
    r.rules = a.rules;
    r.logprobs = a.logprobs;
    r.speculative = a.spec.speculation();
    r.draft_tokens = a.spec.draft_tokens;
    return r;
}

// `batch` requests like `proto` decode `steps` tokens from copies of `src` (speculative: fewer
// steps when drafts are kept); the mean time of the steps after the first two (the first runs
// a new step shape op by op, the second records it) and the tokens those steps yielded.
Expected<DecodeTiming> time_decode(Engine& engine, Session& src, std::vector<Session*>& sessions,
                                   int batch, int steps, const Request& proto) {
    const int vocab = engine.info().vocab_size;
    for (int i = 0; i < batch; ++i) {
        DSV4_RETURN_IF_ERROR(sessions[i]->copy_from(src));
        Request r = proto;
        r.prompt = {static_cast<int32_t>((17 * i + 3) % vocab)};
        r.max_tokens = steps;
        r.session = sessions[i];
        r.sampling.seed = proto.sampling.seed + static_cast<uint64_t>(i);
        DSV4_ASSIGN_OR_RETURN(RequestId id, engine.submit(std::move(r)));
        (void)id;
    }
    std::vector<double> step_s;
    std::vector<int> step_tokens;
    std::vector<TokenEvent> events;
    DecodeTiming out;
    while (!engine.idle()) {
        events.clear();
        const auto t0 = clock_type::now();
        DSV4_RETURN_IF_ERROR(engine.step(&events));
        step_s.push_back(seconds_since(t0));
        int tokens = 0;
        for (const TokenEvent& e : events) {
            if (e.finish == FinishReason::kError) return error("decode failed: ", e.error);
            tokens += e.token >= 0;
            out.drafted += e.drafted;
            out.accepted += e.accepted;
        }
        step_tokens.push_back(tokens);
    }
    const int skip = std::min<int>(2, static_cast<int>(step_s.size()) - 1);
    double sum = 0, tokens = 0;
    for (size_t i = skip; i < step_s.size(); ++i) {
        sum += step_s[i];
        tokens += step_tokens[i];
    }
    const double n = static_cast<double>(step_s.size() - skip);
    out.steps = static_cast<int>(step_s.size());
    out.ms_per_step = 1e3 * sum / n;
    out.tokens_per_step = tokens / n;
    return out;
}

// How evenly the routing spread over the experts (a benchmark whose tokens all go to a few
// experts would read less and flatter the numbers): per layer, each expert's picks relative
// to the mean, bucketed, plus the extremes.
void print_expert_use(const Say& say, const std::vector<int64_t>& counts, int layers) {
    if (layers <= 0 || counts.empty()) return;
    const size_t E = counts.size() / static_cast<size_t>(layers);
    const double edges[] = {0.25, 0.5, 0.8, 1.25, 2.0, 4.0};
    int64_t buckets[7] = {0};
    double lo = 1e30, hi = 0;
    int64_t total = 0, unused = 0;
    for (int l = 0; l < layers; ++l) {
        int64_t sum = 0;
        for (size_t x = 0; x < E; ++x) sum += counts[l * E + x];
        total += sum;
        if (sum == 0) continue;
        const double mean = static_cast<double>(sum) / static_cast<double>(E);
        for (size_t x = 0; x < E; ++x) {
            const double r = static_cast<double>(counts[l * E + x]) / mean;
            lo = std::min(lo, r);
            hi = std::max(hi, r);
            unused += counts[l * E + x] == 0;
            int b = 0;
            while (b < 6 && r >= edges[b]) ++b;
            ++buckets[b];
        }
    }
    say("expert use while prefilling (%lld picks, %d layers x %zu experts; share of "
        "experts by picks / layer mean):\n  <0.25: %lld  0.25-0.5: %lld  0.5-0.8: %lld  "
        "0.8-1.25: %lld  1.25-2: %lld  2-4: %lld  >=4: %lld  (min %.2f, max %.2f, "
        "never picked %lld)\n",
        static_cast<long long>(total), layers, E, static_cast<long long>(buckets[0]),
        static_cast<long long>(buckets[1]), static_cast<long long>(buckets[2]),
        static_cast<long long>(buckets[3]), static_cast<long long>(buckets[4]),
        static_cast<long long>(buckets[5]), static_cast<long long>(buckets[6]), lo, hi,
        static_cast<long long>(unused));
}

// One rank's benchmark (every rank runs the same steps; `say` prints on the printing rank
// only). *usage (when given): set when the error is the command line's.
Status bench_on(const BenchArgs& a, const EngineOptions& o, const Say& say, bool* usage,
                const std::vector<int64_t>& batches, const std::vector<int64_t>& contexts) {
    DSV4_ASSIGN_OR_RETURN(auto engine, Engine::create(o));
    Engine& e = *engine;
    const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
    const ModelInfo& info = e.info();
    if (Status st = e.check_speculation(a.spec.speculation(), a.spec.draft_tokens); !st.is_ok()) {
        const bool hint = !a.engine.synthetic.empty() && !info.has_mtp;
        if (usage != nullptr) *usage = true;
        return error(st.message(), hint ? " (add --synthetic-mtp)" : "");
    }
    std::vector<std::unique_ptr<Session>> owned;
    for (int64_t i = 0; i <= max_batch; ++i) {
        auto s = e.new_session();
        if (!s) return s.status();
        owned.push_back(std::move(*s));
    }
    Session& src = *owned[0];
    std::vector<Session*> sessions;
    for (size_t i = 1; i < owned.size(); ++i) sessions.push_back(owned[i].get());

    say("model %s on %s%s: %s\n", info.source.c_str(), info.device.c_str(),
        ranks_note(a.ranks).c_str(), info.summary.c_str());
    for (const auto& line : info.weight_formats) say("  %s\n", line.c_str());
    // Prefill: the best of --repeats feeds of --prompt-len tokens.
    const std::vector<int32_t> prompt = synthetic_ids(a.prompt_len, info.vocab_size, 0);
    double best_prefill = 1e30;
    for (int r = 0; r < a.repeats; ++r) {
        src.reset();
        const auto t0 = clock_type::now();
        const Status st = src.feed(prompt, nullptr, nullptr);
        if (!st.is_ok()) return st;
        best_prefill = std::min(best_prefill, seconds_since(t0));
    }
    say("prefill %d tokens: %.3f s, %.1f tokens/s (best of %d)\n", a.prompt_len, best_prefill,
        a.prompt_len / best_prefill, a.repeats);
    if (a.profile) {
        // One more prefill, op by op with device events around each op.
        src.reset();
        e.profile_ops(true);
        const auto t0 = clock_type::now();
        const Status st = src.feed(prompt, nullptr, nullptr);
        const double s = seconds_since(t0);
        e.profile_ops(false);
        if (!st.is_ok()) return st;
        say("op profile, prefill of %d tokens op by op (%.3f s):\n%s", a.prompt_len, s,
            e.op_profile().c_str());
    }
    if (a.decode_tokens == 0) return Status::ok();

    Expected<double> bw = e.measure_read_bandwidth();
    if (bw)
        say("read bandwidth (pure streaming read, this run): %.0f GB/s\n", *bw / 1e9);
    else
        say("read bandwidth: not measured (%s)\n", bw.status().message().c_str());
    // Speculative decoding: the drafts a step feeds a sequence at most.
    const Speculation spec = a.spec.speculation();
    const Request proto = decode_request(a);
    const int drafts = e.drafts_a_step(spec, a.spec.draft_tokens);
    std::vector<DecodeRow> rows;
    int drafted = 0, accepted = 0;
    for (size_t ci = 0; ci < contexts.size(); ++ci) {
        const int64_t ctx = contexts[ci];
        src.reset();
        // The first context's prefill also counts the routing (a small op per layer, timed
        // with it; switching the count drops the recorded steps, which record again).
        if (ci == 0) {
            const Status st = e.count_expert_use(true);
            if (!st.is_ok()) return st;
        }
        const auto t0 = clock_type::now();
        const Status st = src.feed(synthetic_ids(ctx, info.vocab_size, 1), nullptr, nullptr);
        if (!st.is_ok()) return st;
        const double prefill_s = seconds_since(t0);
        if (ci == 0) {
            const Status off = e.count_expert_use(false);
            if (!off.is_ok()) return off;
            print_expert_use(say, e.expert_use(), info.num_layers);
        }
        say("context %lld: prefilled in %.2f s (%.1f tokens/s)\n", static_cast<long long>(ctx),
            prefill_s, ctx / prefill_s);
        for (int64_t b : batches) {
            auto tm = time_decode(e, src, sessions, static_cast<int>(b), a.decode_tokens, proto);
            if (!tm) return tm.status();
            drafted += tm->drafted;
            accepted += tm->accepted;
            // The bytes at the drafts the steps fed on average (fewer than asked for: a chain
            // ends at a block-completing position, none past max_tokens); the MTP block and
            // the head run every step, once a draft made.
            const double fed = static_cast<double>(tm->drafted) / (tm->steps * b);
            rows.push_back({ctx, static_cast<int>(b), tm->ms_per_step, tm->tokens_per_step,
                            e.decode_step_bytes(static_cast<int>(b), ctx, fed,
                                                spec == Speculation::kMtp ? drafts : 0)});
            if (a.profile && ci == 0 && b == batches.front()) {
                // The same decode again, op by op with device events around each op.
                e.profile_ops(true);
                auto pms =
                    time_decode(e, src, sessions, static_cast<int>(b), a.decode_tokens, proto);
                e.profile_ops(false);
                if (!pms) return pms.status();
                say("op profile, context %lld, batch %lld, %d steps op by op (%.3f ms/step):\n%s",
                    static_cast<long long>(ctx), static_cast<long long>(b), a.decode_tokens,
                    pms->ms_per_step, e.op_profile().c_str());
            }
        }
    }
    if (spec != Speculation::kNone)
        say("speculative (%s, up to %d draft(s) a step): %d drafts, %d accepted (%.1f%%); GB "
            "read/step counts the draft rows fed%s\n",
            a.spec.mode.c_str(), drafts, drafted, accepted,
            drafted ? 100.0 * accepted / drafted : 0.0,
            spec == Speculation::kMtp ? " and the MTP block + head once a draft made" : "");
    say("\n| context | batch | ms/step | tokens/s | GB read/step (weights + cache) | experts/layer "
        "| GB/s | roofline |\n|---|---|---|---|---|---|---|---|\n");
    for (const DecodeRow& r : rows) {
        const double gbs = r.bytes.total() / (r.ms_per_step * 1e-3) / 1e9;
        char roof[32] = "n/a";
        if (bw) std::snprintf(roof, sizeof roof, "%.1f%%", 100.0 * gbs * 1e9 / *bw);
        say("| %lld | %d | %.3f | %.1f | %.3f (%.3f + %.3f) | %.1f | %.0f | %s |\n",
            static_cast<long long>(r.context), r.batch, r.ms_per_step,
            r.tokens_per_step * 1e3 / r.ms_per_step, r.bytes.total() / 1e9, r.bytes.weights / 1e9,
            r.bytes.cache / 1e9, r.bytes.experts_per_layer, gbs, roof);
    }
    return Status::ok();
}

int run_bench(BenchArgs a) {
    auto batches = parse_list(a.batches, "--batch");
    auto contexts =
        parse_list(a.contexts.empty() ? std::to_string(a.prompt_len) : a.contexts, "--context");
    if (!batches || !contexts) {
        print_error(!batches ? batches.status() : contexts.status());
        return kExitUsage;
    }
    if (Status st = check_rank_args(a.ranks, a.engine); !st.is_ok()) {
        print_error(st);
        return kExitUsage;
    }
    // (Engine::submit refuses these too, but only after the model is loaded and prefilled,
    // which can take minutes here: a usage error first.)
    if (a.rules.min_tokens > a.decode_tokens) {
        std::fprintf(stderr, "error: --min-tokens %d exceeds --decode %d\n", a.rules.min_tokens,
                     a.decode_tokens);
        return kExitUsage;
    }
    if (a.rules.penalties() && a.spec.speculation() != Speculation::kNone) {
        std::fprintf(stderr, "error: penalties need --speculative off\n");
        return kExitUsage;
    }
    const int64_t max_batch = *std::max_element(batches->begin(), batches->end());
    const int64_t max_ctx = *std::max_element(contexts->begin(), contexts->end());
    const int64_t need = std::max<int64_t>(a.prompt_len, max_ctx) + a.decode_tokens + 1;
    if (a.context_given && need > a.engine.max_context) {
        std::fprintf(stderr,
                     "error: the longest context %lld + --decode %d tokens exceed --max-context "
                     "%lld\n",
                     static_cast<long long>(std::max<int64_t>(a.prompt_len, max_ctx)),
                     a.decode_tokens, static_cast<long long>(a.engine.max_context));
        return kExitUsage;
    }
    if (!a.context_given) a.engine.max_context = need;
    // The prefilled source sequence plus one session per decoded sequence.
    if (!a.seqs_given) a.engine.max_seqs = static_cast<int>(max_batch) + 1;
    if (a.engine.max_seqs < max_batch + 1) {
        std::fprintf(stderr, "error: --batch %lld needs --max-seqs >= %lld\n",
                     static_cast<long long>(max_batch), static_cast<long long>(max_batch + 1));
        return kExitUsage;
    }
    bool usage = false;  // (written by the printing rank's thread only)
    const Status st = run_on_ranks(a.engine, a.ranks, [&](const EngineOptions& o, int rank) {
        return bench_on(a, o, Say{rank == 0}, rank == 0 ? &usage : nullptr, *batches, *contexts);
    });
    if (!st.is_ok()) {
        print_error(st);
        return usage ? kExitUsage : kExitError;
    }
    return kExitOk;
}

}  // namespace

void add_bench_command(CLI::App& app) {
    auto args = std::make_shared<BenchArgs>();
    CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode speed");
    cmd->footer(
        "Examples:\n  dsv4 bench --model tests/data/golden/small-rates --prompt-len 256\n"
        "  dsv4 bench --synthetic v4-flash --format nvfp4 --context 8192 --batch 1,8,32");
    add_engine_options(cmd, args->engine, /*synthetic=*/true);
    cmd->add_option("--prompt-len", args->prompt_len, "Prompt tokens of the prefill measurement")
        ->capture_default_str()
        ->check(whole_number(1, 1 << 30));
    cmd->add_option("--decode", args->decode_tokens, "Decode steps per measurement")
        ->capture_default_str()
        ->check(whole_number(0, 1 << 30));
    cmd->add_option("--batch", args->batches,
                    "Sequences decoded together, a comma-separated list (e.g. 1,8,32)")
        ->capture_default_str();
    cmd->add_option("--context", args->contexts,
                    "Tokens already in each sequence when decode is measured, a comma-separated "
                    "list (default: --prompt-len)");
    cmd->add_flag("--profile", args->profile,
                  "Also prefill once and decode the first context at the first batch op by op "
                  "with device time per op (CUDA), and print the breakdowns");
    add_speculative_options(cmd, args->spec);
    add_sampling_options(cmd, args->sampling);
    add_rules_options(cmd, args->rules);
    cmd->add_option("--logprobs", args->logprobs,
                    "Log-probabilities with each decoded token: its own and this many of the most "
                    "likely (-1 = none)")
        ->capture_default_str()
        ->check(whole_number(-1, kMaxTopLogprobs));
    add_rank_options(cmd, args->ranks);
    cmd->add_option("--repeats", args->repeats, "Prefill runs; the best is reported")
        ->capture_default_str()
        ->check(whole_number(1, 1000));
    cmd->callback([args, cmd] {
        args->context_given = cmd->get_option("--max-context")->count() > 0;
        args->seqs_given = cmd->get_option("--max-seqs")->count() > 0;
        set_exit_code(run_bench(*args));
    });
}

}  // namespace dsv4::cli
