// dsv4 public API: load a DeepSeek-V4 model folder on a backend and run many sequences through
// it in batched steps. cli/ and server/ use only the headers of include/dsv4.
//
// Threading: an Engine and its Sessions are driven by one thread (a server's engine thread);
// other threads hand it work through their own queues.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dsv4/sampling.h"
#include "dsv4/status.h"

namespace dsv4 {

class RankGroup;

struct EngineOptions {
    std::string model_dir;
    // Instead of model_dir: a synthetic model of random weights with the real shapes, drawn
    // where it runs (benchmarks): "v4-flash", "v4-pro" or a config.json path; the layers to
    // keep (0: as many of the config's as fit in memory); "release" (FP8 + MXFP4 experts +
    // BF16) or "nvfp4" (everything NVFP4 but embed and head, as `dsv4 quantize --all`).
    std::string synthetic;
    int synthetic_layers = 0;
    std::string synthetic_format = "nvfp4";
    bool synthetic_mtp = false;  // the synthetic model with the config's MTP block
    // "cpu", "cuda", or "auto" (the CLI's default): cuda when this build has the CUDA backend
    // and a usable GPU is present; cpu otherwise.
    std::string device = "cpu";
    int64_t max_context = 0;  // tokens per sequence the caches hold; 0: min(4096, the model's)
    int max_seqs = 1;         // sequence slots in the cache pool (sessions + requests)
    double cache_gib = 0;     // > 0: as many slots as this KV-cache budget holds
    int max_chunk = 128;      // prompt tokens per step; a step holds this + max_seqs tokens
    int max_queue = 1024;     // requests waiting for a slot before submit refuses more
    int threads = 0;          // 0 = DSV4_THREADS or all cores
    // "float" (transformers' numerics), "reference" (DeepSeek's own bf16 configuration; CPU
    // only), "reference-fp32" (its quantization points: FP8 activations, FP8 KV, Hadamard +
    // FP4 indexer; fp32 elsewhere). docs/numerics.md.
    std::string numerics = "float";
    // Cache row types (docs/kv-cache.md): window rings and compressed K=V "f32", "bf16" or "fp8"
    // (DeepSeek's 584-byte entry); indexer keys "f32", "bf16", "fp8" or "fp4" (Hadamard + E2M1).
    // f32 keeps float mode equal to transformers. Every type runs on both backends.
    std::string kv_cache = "f32";
    std::string indexer_cache = "f32";
    // Steps of up to 64 tokens whose shape repeats (decode) replay a recording of their ops (a
    // CUDA graph on cuda: one launch per step). false: every step enqueues its ops one by one.
    bool step_graphs = true;
    // Prefix snapshots: buffers for this many snapshots of sequences at block boundaries
    // (Request::snapshot_every), from which other sessions start (Session::copy_prefix_from).
    // Each holds a sequence's window rings and overlapping compressor states
    // (ModelInfo::snapshot_bytes), allocated at load. 0: none.
    int snapshots = 0;
    // Called while the weights load (copied to the device on cuda), after each layer:
    // (layers done, layers in all). May be empty.
    std::function<void(int, int)> on_load_progress;
    // Ranks (include/dsv4/parallel.h): this engine is rank `rank` of the group and holds its
    // share of the routed experts; on cuda, GPU `rank` mod the GPUs visible, the ranks summing
    // over NCCL ("auto" picks the CPU for ranks). Empty: one rank.
    std::shared_ptr<RankGroup> rank_group;
    int rank = 0;
};

struct ModelInfo {
    int vocab_size = 0;
    int bos_token_id = 0;
    int eos_token_id = 1;
    int num_layers = 0;
    int hidden_size = 0;
    int hc_mult = 0;
    std::string summary;                      // one line: sizes and layer kinds
    std::string device;                       // the backend it runs on ("cpu" or "cuda")
    size_t weight_bytes = 0;                  // checkpoint bytes bound
    std::string cache_entry_type;             // "kv f32, indexer keys f32"
    int max_seqs = 0;                         // cache pool slots
    int64_t max_context = 0;                  // tokens per slot
    size_t cache_bytes = 0;                   // per sequence, at max_context
    double cache_bytes_per_token = 0;         // compressed entries + indexer keys, amortised
    size_t cache_fixed_bytes = 0;             // rings + compressor states per sequence
    size_t cache_pool_bytes = 0;              // all slots, allocated at load
    int step_tokens = 0;                      // tokens one step holds (all rows)
    bool has_mtp = false;                     // the checkpoint's MTP block is loaded
    int max_draft_tokens = 1;                 // speculative drafts a step can feed a row
    int64_t snapshot_block = 1;               // snapshot positions: its multiples (lcm of rates)
    int snapshots = 0;                        // prefix snapshot buffers (EngineOptions)
    size_t snapshot_bytes = 0;                // bytes of one
    std::vector<std::string> weight_formats;  // "group: format" lines
    std::string source;                       // the model folder, or "synthetic v4-flash (nvfp4)"
    // With ranks (EngineOptions::rank_group): this rank, the group's size and the routed
    // experts of every layer this rank binds ([experts_first, + experts_local) of
    // experts_total); one rank: 0, 1 and all of them.
    int rank = 0, ranks = 1;
    int experts_first = 0, experts_local = 0, experts_total = 0;
};

// What one decode step reads from memory (bytes as stored): the weights (every layer's dense
// part, the routed experts the step's rows pick — each distinct expert once — and the head)
// and the KV cache (window, compressed entries attended, indexer keys scored).
struct StepBytes {
    double weights = 0, cache = 0;
    double experts_per_layer = 0;  // distinct routed experts read per layer
    double total() const { return weights + cache; }
};

class Engine;

// Checks that a model folder loads: config.json valid, every tensor present with the shape and
// type the config calls for, nothing unexpected. Reads headers only (the weights are mapped).
Status check_model_folder(const std::string& dir);

// One sequence holding one cache slot until it is destroyed (it must not outlive its Engine).
class Session {
  public:
    ~Session();
    // Feeds tokens at the current position. `all_logits` receives [n, V] when not null,
    // `last_logits` the final position's [V].
    Status feed(const std::vector<int32_t>& ids, std::vector<float>* all_logits,
                std::vector<float>* last_logits);
    // Per-layer taps for debugging/conformance: layer < L gives the residual streams after
    // that layer [n_tokens, hc, D]; layer == L gives the final normed hidden state [n_tokens, D].
    Status feed_with_taps(const std::vector<int32_t>& ids, std::vector<float>* all_logits,
                          const std::function<void(int, const float*, int64_t)>& tap);
    // Feeds ids with the MTP block on every position: next[i] is the token after ids[i].
    // `logits` receives [n, V]; `mtp_logits` [n, V], the MTP's logits for the token after next.
    Status feed_with_mtp(const std::vector<int32_t>& ids, const std::vector<int32_t>& next,
                         std::vector<float>* logits, std::vector<float>* mtp_logits);
    int64_t position() const;
    // The tokens fed so far, in order (position() of them): what a request continuing the
    // session finds in front of its prompt.
    const std::vector<int32_t>& tokens() const;
    void reset();  // (its snapshots go too)
    // Continues from where `src` (a session of the same engine) is: its cache is copied into
    // this session's slot (a prefix fed once, several sequences from it).
    Status copy_from(const Session& src);
    // Continues from `src`'s first n tokens: n is one of src's snapshot positions (src may have
    // a request running), or src's position (as copy_from; src idle). src may be this session:
    // it goes back to position n. This session's snapshots after n go (all of them when src is
    // another session).
    Status copy_prefix_from(const Session& src, int64_t n);
    // A snapshot of the sequence where it is now (its position a multiple of
    // ModelInfo::snapshot_block, a buffer free; an error otherwise).
    Status snapshot();
    // The positions this session holds snapshots of, ascending (Request::snapshot_every).
    std::vector<int64_t> snapshot_positions() const;
    void drop_snapshots();  // gives its snapshot buffers back to the engine

  private:
    friend class Engine;
    struct Impl;
    explicit Session(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Several sessions fed in one step (each row's tokens at that session's position).
struct BatchFeed {
    Session* session = nullptr;
    std::vector<int32_t> ids;
    bool all_logits = false;               // [n, V] instead of the last position's [V]
    std::vector<float>* logits = nullptr;  // may be null
};

using RequestId = uint64_t;

// Where speculative drafts come from: the checkpoint's MTP block (release layout), or the
// sequence itself (the token that followed the latest earlier occurrence of the last two, else
// the last, tokens: "prompt lookup", for text that repeats itself; needs no MTP).
enum class Speculation : uint8_t { kNone, kMtp, kNgram };

struct Request {
    std::vector<int32_t> prompt;  // at least one token
    int max_tokens = 16;          // tokens to generate (0: prefill only)
    SamplingParams sampling;
    bool stop_at_eos = true;
    // Continue this session's sequence (and keep it there afterwards, the last sampled token
    // not yet fed); nullptr: the request takes a slot of its own while it runs.
    Session* session = nullptr;
    // Speculative decoding: each step also feeds a draft of the next token and keeps it when
    // the model agrees, so a step can yield two tokens. Greedy: exactly the tokens of plain
    // greedy decoding. Temperature: the draft is kept with the model's probability for it, else
    // the token is drawn from the rest (ops/sample.h), so the output is distributed exactly as
    // without drafts (the draws themselves differ from a run without them).
    Speculation speculative = Speculation::kNone;
    // Drafts fed a step at most, 0..kMaxDraftTokens (0: the source's default, the MTP's 1 and
    // n-gram's 4). MTP drafts after the first come from the block applied to its own output.
    // The cache rings may allow fewer (EngineInfo::max_draft_tokens).
    int draft_tokens = 0;
    // Log-probabilities with each generated token (dsv4/sampling.h): -1 none; 0 to
    // kMaxTopLogprobs the token's own and this many of the most likely tokens.
    int logprobs = -1;
    // Penalties, logit_bias, min_tokens (dsv4/sampling.h). The penalties need a request
    // without speculative drafts (a rejected draft would have been counted). On a session,
    // the tokens it already holds count as prompt (the repetition penalty's seen tokens).
    LogitsRules rules{};
    // Requests submitted with the same nonzero key and the same prompt (no session, at least
    // two prompt tokens, max_tokens > 0, no penalties) prefill the prompt once: the first of
    // them feeds all but the last token, each other one then starts from a copy of its cache
    // and every one feeds the last token itself, sampling with its own settings. The tokens are
    // those of the requests run apart: on the CPU bit for bit (a row's logits do not depend on
    // how the steps are cut), on CUDA within its tolerance (docs/engine.md).
    // One submitted or given its slot only after the prefix is done (submit the requests
    // together, before a step), or whose first request ended before, prefills on its own.
    uint64_t share_prompt = 0;
    // Prefix snapshots (EngineOptions::snapshots): on a session, a snapshot of the sequence at
    // each multiple of this (a multiple of ModelInfo::snapshot_block) that its prompt reaches,
    // while the engine has free buffers; the prompt's chunks end there. 0: none.
    int64_t snapshot_every = 0;
};
inline constexpr int kMaxDraftTokens = 4;

enum class FinishReason : uint8_t { kNone, kLength, kEos, kCancelled, kError };
const char* finish_reason_name(FinishReason r);

// What a step produced for one request: a token, and/or the end of the request.
struct TokenEvent {
    RequestId id = 0;
    int32_t token = -1;  // -1: none in this event
    // With a token of a request that asked for logprobs (top_n: the request's count).
    std::optional<TokenLogprobs> logprobs;
    FinishReason finish = FinishReason::kNone;
    std::string error;  // with kError
    // With the finish of a speculative request: drafts fed and drafts accepted, in all and by
    // the draft's place in its step (index 0: the first draft after the fed token).
    int drafted = 0, accepted = 0;
    std::array<int, kMaxDraftTokens> drafted_at{}, accepted_at{};
};

class Engine {
  public:
    struct Impl;  // opaque: the engine's state (named here so sessions can point to it)
    static Expected<std::unique_ptr<Engine>> create(const EngineOptions& options);
    ~Engine();
    const ModelInfo& info() const;

    // A session with its own cache slot; an error when every slot is held.
    Expected<std::unique_ptr<Session>> new_session();
    // One step over several sessions' rows (their tokens together fit step_tokens).
    Status feed_batch(std::vector<BatchFeed>& feeds);

    // Queues a request (checked now: ids in the vocabulary, prompt within the context, queue
    // not full). It waits for a free slot, then runs in the batched steps.
    Expected<RequestId> submit(Request request);
    // Whether requests may ask for `speculative` with `draft_tokens` (submit's own check; for a
    // server or benchmark to refuse a setting before any request).
    Status check_speculation(Speculation speculative, int draft_tokens) const;
    // The drafts a step feeds a request that asks for `draft_tokens` (0: the source's default)
    // at most: what the engine's cache rings allow of it (EngineInfo::max_draft_tokens).
    int drafts_a_step(Speculation speculative, int draft_tokens) const;
    // Ends a request at the next step (its slot is freed then); unknown ids are ignored.
    void cancel(RequestId id);
    // One batched step: admits waiting requests while slots are free, runs every running
    // request's decode row plus prompt chunks up to the step's capacity, and appends the
    // produced tokens and finished requests to `events`.
    Status step(std::vector<TokenEvent>* events);
    bool idle() const;      // nothing queued or running
    size_t queued() const;  // waiting for a slot (not cancelled; not those on a session)
    size_t running() const;
    int free_slots() const;
    int free_snapshots() const;  // prefix snapshot buffers no session holds
    // Prompt tokens the requests have fed through the model so far (a shared prefix once).
    int64_t prompt_tokens_fed() const;
    // Bytes allocated through the backend (weights it copied, cache pool, workspaces).
    size_t memory_in_use() const;

    // The bytes a decode step of `batch` sequences at `context` tokens each reads. Batch 1 reads
    // k experts per layer; more rows the expected number of distinct experts when each row
    // picks k of E uniformly: E (1 - (1 - k/E)^rows). Speculative steps: `drafts` draft rows a
    // sequence ride along on average (rows = batch (1 + drafts); the cache is read once a
    // sequence), and the MTP block and the head are read `mtp_runs` times more on average (its
    // draft in the step, each further draft chained on it; the block's experts for `batch`
    // rows).
    StepBytes decode_step_bytes(int batch, int64_t context, double drafts = 0,
                                double mtp_runs = 0) const;
    // The device's read bandwidth in bytes/s, measured now by a pure streaming read of a buffer
    // far larger than the caches (the roofline's denominator); an error on a backend that does
    // not measure it.
    Expected<double> measure_read_bandwidth();
    // Routing histogram: while on, the routed-expert picks of every step are counted per layer
    // (switching it on starts from zero); expert_use() returns them, [num_layers][E] flat.
    Status count_expert_use(bool on);
    std::vector<int64_t> expert_use();
    // Per-op device time while on (steps then run op by op, not as recorded graphs);
    // op_profile() returns the table so far (markdown, "" on the CPU) and clears it.
    void profile_ops(bool on);
    std::string op_profile();

    // Runs one request on `session` to its end (the engine must be otherwise idle). on_token
    // is called for each token as it is produced; returning false stops the request.
    // `speculative`, `draft_tokens` and `rules` as Request's; `stats` (when not null) receives
    // the drafts fed and accepted.
    struct GenerateStats {
        int drafted = 0, accepted = 0;
        std::array<int, kMaxDraftTokens> drafted_at{}, accepted_at{};  // as TokenEvent's
    };
    Expected<std::vector<int32_t>> generate(Session& session, const std::vector<int32_t>& prompt,
                                            int max_tokens, const SamplingParams& sampling,
                                            bool stop_at_eos,
                                            const std::function<bool(int32_t)>& on_token,
                                            Speculation speculative = Speculation::kNone,
                                            GenerateStats* stats = nullptr, int draft_tokens = 0,
                                            const LogitsRules& rules = {});

  private:
    explicit Engine(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

}  // namespace dsv4
