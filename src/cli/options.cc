// The CLI plumbing every subcommand shares: engine and sampling options with their range
// checks, one-line errors, exit codes.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"

namespace dsv4::cli {
namespace {

int g_exit_code = kExitOk;

}  // namespace

CLI::Validator whole_number(long long lo, long long hi) {
    const std::string desc = "INT in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    return CLI::Validator(
        [lo, hi](std::string& s) -> std::string {
            errno = 0;
            char* end = nullptr;
            const long long v = std::strtoll(s.c_str(), &end, 10);
            if (s.empty() || *end != '\0' || errno == ERANGE)
                return "'" + s + "' is not a whole number";
            if (v < lo || v > hi)
                return "'" + s + "' is out of range [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "]";
            return {};
        },
        desc);
}

CLI::Validator finite_number(double lo, double hi, bool lo_open) {
    auto fmt = [](double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", v);
        return std::string(buf);
    };
    const std::string range = (lo_open ? "(" : "[") + fmt(lo) + ", " + fmt(hi) + "]";
    return CLI::Validator(
        [lo, hi, lo_open, range](std::string& s) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(s.c_str(), &end);
            if (s.empty() || *end != '\0' || !std::isfinite(v))
                return "'" + s + "' is not a finite number";
            if (v < lo || v > hi || (lo_open && v == lo))
                return "'" + s + "' is out of range " + range;
            return {};
        },
        "NUMBER in " + range);
}

void add_engine_options(CLI::App* cmd, EngineOptions& e, bool synthetic) {
    e.device = "auto";
    // A progress bar on a terminal while the weights load (on cuda: copied and repacked).
    e.on_load_progress = [](int done, int total) {
        if (!isatty(STDERR_FILENO) || total <= 0) return;
        constexpr int kWidth = 30;
        const int fill = done * kWidth / total;
        std::fprintf(stderr, "\rloading weights [%.*s%*s] %d/%d layers", fill,
                     "##############################", kWidth - fill, "", done, total);
        if (done == total) std::fprintf(stderr, "\r\033[K");
        std::fflush(stderr);
    };
    CLI::Option* model =
        cmd->add_option("--model", e.model_dir, "Model folder (config.json + safetensors)");
    if (synthetic) {
        CLI::Option* synth = cmd->add_option(
            "--synthetic", e.synthetic,
            "Instead of --model: random weights with the real shapes, drawn on the device: "
            "v4-flash, v4-pro or a config.json (benchmarks)");
        model->excludes(synth);
        synth->excludes(model);
        cmd->add_option("--layers", e.synthetic_layers,
                        "Synthetic model: decoder layers to keep (0: as many as fit)")
            ->capture_default_str()
            ->check(whole_number(0, 1 << 10));
        cmd->add_option("--format", e.synthetic_format,
                        "Synthetic model: release (FP8 + MXFP4 experts + BF16) or nvfp4 "
                        "(everything but embed and head, as dsv4 quantize --all)")
            ->capture_default_str()
            ->check(CLI::IsMember({"release", "nvfp4"}));
        cmd->add_flag("--synthetic-mtp", e.synthetic_mtp,
                      "Synthetic model: with the config's MTP block (random: its drafts are "
                      "rarely accepted; for timing --speculative mtp)")
            ->needs(synth);
    } else {
        model->required();
    }
    cmd->add_option("--device", e.device,
                    "cpu, cuda, or auto (cuda when a usable GPU is present, else cpu)")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
    cmd->add_option("--max-context", e.max_context,
                    "Tokens each sequence's cache holds (default: 4096, or fewer if the model "
                    "has fewer positions)")
        ->check(whole_number(1, int64_t{1} << 40));
    cmd->add_option("--numerics", e.numerics,
                    "float (transformers' numerics), reference (DeepSeek's own bf16 "
                    "configuration) or reference-fp32 (its quantization points: FP8 "
                    "activations, FP8 KV, Hadamard + FP4 indexer keys, in float32 otherwise)")
        ->capture_default_str()
        ->check(CLI::IsMember({"float", "reference", "reference-fp32"}));
    cmd->add_option("--kv-cache", e.kv_cache,
                    "Window ring and compressed K=V storage: f32, bf16 or fp8 (DeepSeek's "
                    "584-byte entry: FP8 NoPE dims + bf16 RoPE dims)")
        ->capture_default_str()
        ->check(CLI::IsMember({"f32", "bf16", "fp8"}));
    cmd->add_option("--indexer-cache", e.indexer_cache,
                    "Indexer key storage: f32, bf16, fp8 (per 128) or fp4 (Hadamard + E2M1 per 32)")
        ->capture_default_str()
        ->check(CLI::IsMember({"f32", "bf16", "fp8", "fp4"}));
    cmd->add_option("--max-seqs", e.max_seqs, "Sequence slots in the KV-cache pool")
        ->capture_default_str()
        ->check(whole_number(1, 1 << 20));
    cmd->add_option("--cache-gib", e.cache_gib,
                    "KV-cache budget in GiB: as many sequence slots as it holds (instead of "
                    "--max-seqs)")
        ->check(finite_number(0, 1 << 20, true));
    cmd->add_option("--max-chunk", e.max_chunk, "Prompt tokens per forward step")
        ->capture_default_str()
        ->check(whole_number(1, 1 << 16));
    cmd->add_flag("!--no-graphs", e.step_graphs,
                  "Enqueue every step's ops one by one instead of replaying a recorded CUDA "
                  "graph of repeated step shapes");
    cmd->add_option("--threads", e.threads, "CPU threads (0 = all)")
        ->capture_default_str()
        ->check(whole_number(0, 4096));
}

Speculation SpeculativeArgs::speculation() const {
    return mode == "mtp"     ? Speculation::kMtp
           : mode == "ngram" ? Speculation::kNgram
                             : Speculation::kNone;
}

void add_speculative_options(CLI::App* cmd, SpeculativeArgs& s) {
    cmd->add_option(
           "--speculative", s.mode,
           "Speculative decoding (fewer steps; greedy gives the same tokens, sampling the same "
           "distribution): drafts from the checkpoint's MTP block (mtp) or from the text "
           "itself (ngram)")
        ->capture_default_str()
        ->check(CLI::IsMember({"off", "mtp", "ngram"}));
    cmd->add_option("--draft-tokens", s.draft_tokens,
                    "Speculative drafts a step feeds at most (0: mtp 1, ngram 4); mtp drafts "
                    "after the first apply the MTP block to its own output; the cache rings "
                    "may allow fewer (dsv4 info)")
        ->capture_default_str()
        ->check(whole_number(0, kMaxDraftTokens));
}

void add_sampling_options(CLI::App* cmd, SamplingParams& s, bool with_top_k) {
    cmd->add_option("--temperature", s.temperature, "0 = greedy")
        ->capture_default_str()
        ->check(finite_number(0, 100));
    if (with_top_k)
        cmd->add_option("--top-k", s.top_k, "Sample among the k best (0 = all)")
            ->capture_default_str()
            ->check(whole_number(0, 1 << 30));
    cmd->add_option("--top-p", s.top_p, "Nucleus: the smallest set holding this mass (1 = all)")
        ->capture_default_str()
        ->check(finite_number(0, 1, true));
    cmd->add_option("--seed", s.seed, "Sampling seed")
        ->capture_default_str()
        ->check(whole_number(0, INT64_MAX));
}

void add_rules_options(CLI::App* cmd, LogitsRules& r) {
    cmd->add_option("--repetition-penalty", r.repetition_penalty,
                    "Divide a positive logit (multiply a negative one) of every token already in "
                    "the prompt or the output by this (1 = none)")
        ->capture_default_str()
        ->check(finite_number(0, 100, true));
    cmd->add_option("--frequency-penalty", r.frequency_penalty,
                    "Lower each token's logit by this times its count in the output")
        ->capture_default_str()
        ->check(finite_number(-2, 2));
    cmd->add_option("--presence-penalty", r.presence_penalty,
                    "Lower the logit of each token the output already holds by this")
        ->capture_default_str()
        ->check(finite_number(-2, 2));
    cmd->add_option("--min-tokens", r.min_tokens,
                    "Tokens generated before the end-of-sequence token may be")
        ->capture_default_str()
        ->check(whole_number(0, 1 << 30));
}

void print_error(const Status& status) {
    std::fprintf(stderr, "error: %s\n", status.message().c_str());
}

void note_reading_stdin(const char* what) {
    if (isatty(STDIN_FILENO))
        std::fprintf(stderr,
                     "reading %s from stdin, one JSON object per line (Ctrl-D ends; "
                     "--help shows the format)\n",
                     what);
}

int exit_code() {
    return g_exit_code;
}
void set_exit_code(int code) {
    g_exit_code = code;
}

}  // namespace dsv4::cli
