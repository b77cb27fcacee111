// DeepSeek-V4: config + bound weights + activation workspaces on one backend, and the batched
// forward step: B rows (decode rows and prefill chunks of different sequences, each in its
// own cache slot) in one pass, logits only for the rows that need them, sampling on the
// backend. The op sequence of a step depends only on the batch's shape (tokens, rows, logit
// rows), never on positions: those are in the step descriptor in backend memory.
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "base/status.h"
#include "dsv4/sampling.h"
#include "formats/safetensors.h"
#include "model/cache_pool.h"
#include "model/config.h"
#include "model/numerics.h"
#include "model/synthetic.h"
#include "model/weights.h"
#include "ops/backend.h"

namespace dsv4 {

// Called after a step with layer < L and the residual streams after that layer [T, n, D], and
// with layer == L and the final normed hidden state of the logit rows [R, D]. Debug and
// conformance only: the step copies the states into a capture buffer; the host reads them
// after the step.
using LayerTap = std::function<void(int layer, const float* data, int64_t rows)>;

enum class LogitsWanted : uint8_t { kNone, kLast, kAll };

// One row of a step (host side).
struct StepRow {
    int slot = 0;                  // cache slot (held by the caller)
    int64_t pos0 = 0;              // position of the first token
    const int32_t* ids = nullptr;  // [len] host
    int32_t len = 0;
    LogitsWanted logits = LogitsWanted::kNone;
    std::vector<float>* logits_out = nullptr;  // receives [len or 1, V] when logits != kNone
    bool sample = false;                       // sample a token after the last position
    SamplingParams sampling;
    int32_t* sampled_out = nullptr;  // receives the sampled token when sample
    // Receives each sample's log-probabilities, the kMaxTopLogprobs most likely tokens (as
    // many as sampled_out's tokens), or nullptr.
    TokenLogprobs* logprobs_out = nullptr;
    // Sample after every position of the row (speculative verification), not only the last:
    // sampled_out then receives len tokens.
    bool sample_all = false;
    // With sample_all: the draft each sample verifies ([len], -1 none; ops/sample.h), or null.
    const int32_t* drafts = nullptr;
    // MTP: the token after each of the row's positions ([len], host); when set, the MTP block
    // runs on the row (its own cache in the slot) and mtp_logits_out receives [len, V], the
    // logits of the token after next.
    const int32_t* mtp_next = nullptr;
    std::vector<float>* mtp_logits_out = nullptr;
    // The slot's logits rules are on (CachePool::set_rules): the step runs the logits_rules op,
    // which marks the row's tokens and changes its sampled logits.
    bool rules = false;
};

class Model {
  public:
    // Loads config.json and the safetensors of `dir`; `step_tokens` bounds the tokens of one
    // step (all rows together); workspaces are made for batch-size buckets up to it.
    static Expected<std::unique_ptr<Model>> load(const std::string& dir, Backend& backend,
                                                 int step_tokens,
                                                 Numerics numerics = Numerics::kFloat,
                                                 const LoadProgress& progress = {});
    // A synthetic model (model/synthetic.h): random weights of the real shapes, for benchmarks.
    static Expected<std::unique_ptr<Model>> load_synthetic(const SynthSpec& spec, Backend& backend,
                                                           int step_tokens,
                                                           Numerics numerics = Numerics::kFloat,
                                                           const LoadProgress& progress = {});
    ~Model();

    const ModelConfig& config() const { return cfg_; }
    const ModelWeights& weights() const { return w_; }
    bool has_mtp() const { return !w_.mtp.empty(); }
    Backend& backend() { return backend_; }
    int step_tokens() const { return buckets_.back()->capacity; }

    // Checks the rows (ids in the vocabulary, positions within the pool's context, distinct
    // slots, tokens within step_tokens), writes the step descriptor (one upload), runs the
    // step, fetches the sampled ids and requested logits, and synchronizes once at the end.
    // A step of at most kGraphTokens tokens whose shape (Dims) was seen before replays the
    // recording of its first repeat (a CUDA graph) where the backend records.
    Status run_step(CachePool& pool, std::span<const StepRow> rows, const LayerTap& tap = nullptr);
    static constexpr int kGraphTokens = 64;
    static constexpr int kMaxRecorded = 128;  // recorded step shapes kept
    // Routing histogram (benchmarks): while on, every step adds its rows' routed-expert picks
    // to a [L, E] count in backend memory (one small op per layer). Switching drops the
    // recorded steps (their op sequence changes).
    Status count_expert_use(bool on);
    std::vector<int64_t> expert_use();  // [L, E] picks counted so far (waits for the device)
    // Off: every step enqueues its ops one by one (for comparison; on by default).
    void set_recorded_steps(bool on) { record_steps_ = on; }

    // The MTP block on positions the last run_step fed (speculative decoding drafts after the
    // step's tokens are known): row r covers `len` of the last step's tokens from token index
    // `h_start` (their last streams are h), at positions pos0.., with `next` the token after
    // each; it writes the MTP caches of those positions and draws the draft after the last one
    // (greedy). Must follow the run_step it reads, once. With `chained`, it follows a run_mtp
    // instead, and h_start indexes that call's tokens, whose MTP block outputs stand in for the
    // main model's last streams: the block applied to its own output drafts further ahead
    // (DeepSeek's recursive use of one MTP module), at the positions after those tokens.
    struct MtpRow {
        int slot = 0;
        int64_t pos0 = 0;
        int32_t h_start = 0, len = 0;
        const int32_t* next = nullptr;  // [len] host
        int32_t* draft_out = nullptr;   // the MTP's greedy token after next[len - 1]
    };
    Status run_mtp(CachePool& pool, std::span<const MtpRow> rows, bool chained = false);

    // The step itself, for tests that record it: the op sequence for a batch of T tokens in B
    // rows with R logit rows of which the first Rs are sampled, on the workspace whose
    // descriptor holds the step (written by run_step).
    struct Dims {
        int T = 0, B = 0, R = 0, Rs = 0;
        int Tm = 0, Bm = 0;     // MTP tokens and rows
        bool logprobs = false;  // the sampled rows' log-probabilities too
        bool rules = false;     // a row's slot has logits rules
    };

  private:
    struct Workspace;
    Model(ModelConfig cfg, TensorStore store, Backend& backend);
    Status init(int step_tokens, Numerics numerics, const LoadProgress& progress,
                const std::string& label);
    Status validate(const CachePool& pool, std::span<const StepRow> rows) const;
    void forward(const Workspace& ws, const CachePool& pool, const Dims& d, float* capture,
                 bool verify_drafts);
    void rules(const Workspace& ws, const ops::StepDesc& st, const CachePool& pool, const Dims& d);
    Status run_forward(const Workspace& ws, const CachePool& pool, const Dims& d,
                       bool verify_drafts);
    void mtp_forward(const Workspace& ws, const CachePool& pool, const Dims& d);
    // One decoder block on ws.streams [T, n, D] in place (streams_next is its scratch). Its last
    // hc_post is left in `pending` for the caller to run, fused into the next block's first
    // hc_pre (a `pending` given on entry runs fused into this block's) or by flush().
    void block(const Workspace& ws, const ops::StepDesc& st, const LayerWeights& w,
               const LayerSpec& spec, const LayerCache& lc,
               std::optional<ops::HcPostArgs>& pending);
    void flush(std::optional<ops::HcPostArgs>& pending);
    void attention_block(const Workspace& ws, const ops::StepDesc& st, const LayerWeights& w,
                         const LayerSpec& spec, const LayerCache& lc, const float* x, float* out);
    void ffn_block(const Workspace& ws, const ops::StepDesc& st, const LayerWeights& w,
                   const float* x, float* out);
    Status make_workspace(int capacity);
    void upload_mtp_desc(const Workspace& ws, const std::vector<int32_t>& src);

    // Whether x is rounded to FP8 before a product with w (reference numerics only).
    bool fp8_act(const Weight& w) const { return reference() && w.fp8_activations; }
    // DeepSeek's rounding points (both reference modes), and its bf16 configuration's roundings.
    bool reference() const { return numerics_ != Numerics::kFloat; }
    bool bf16() const { return numerics_ == Numerics::kReference; }

    ModelConfig cfg_;
    Numerics numerics_ = Numerics::kFloat;
    TensorStore store_;
    std::unique_ptr<SynthSource> synth_;  // a synthetic model's host tensors
    Backend& backend_;
    ModelWeights w_;
    struct RopeTable {
        const float* inv_freq = nullptr;  // [rd/2]
        float scale = 1.0f;               // cos/sin multiplier
    };
    RopeTable rope_main_, rope_compress_;
    const RopeTable& rope_for(const LayerSpec& spec) const {
        return spec.kind == LayerKind::kSliding ? rope_main_ : rope_compress_;
    }

    // Activations and the step descriptor for up to `capacity` tokens (backend memory,
    // allocated at load; one per batch-size bucket so each bucket's pointers stay fixed).
    struct Workspace {
        int capacity = 0;
        ops::StepDesc step;        // pointers into desc_* below
        int32_t* ids;              // [T]
        int32_t* tok_row;          // [T]
        int64_t* tok_pos;          // [T]
        int32_t* row_slot;         // [T] (B <= T)
        int32_t* row_start;        // [T]
        int32_t* row_len;          // [T]
        int64_t* row_pos0;         // [T]
        int32_t* logit_idx;        // [T] token of each logit row
        SamplingParams* sampling;  // [T] per sampled row
        int32_t* sample_slot;      // [T]
        int32_t* sample_draft;     // [T] per sampled row, -1 = none
        int32_t* sampled;          // [T]
        float* logprobs;           // [T * (1 + 2 kMaxTopLogprobs)] words: LogprobsArgs' outputs
        float* streams;            // [T, n, D]
        float* streams_next;       // [T, n, D]
        float* y;                  // [T, D] collapsed sub-block input
        float* xn;                 // [T, D] normed
        float* post;               // [T, n]
        float* comb;               // [T, n, n]
        float* qa;                 // [T, Rq]
        float* q;                  // [T, H*hd]
        float* kv;                 // [T, hd]
        float* o;                  // [T, H*hd]
        float* u;                  // [T, g*Ro]
        float* sub_out;            // [T, D]
        float* ckv;                // [T, 2*hd]
        float* cgate;              // [T, 2*hd]
        float* ikv;                // [T, 2*hi]
        float* igate;              // [T, 2*hi]
        float* qi;                 // [T, Hi*hi]
        float* wts;                // [T, Hi]
        int32_t* topk;             // [T, K]
        float* router_logits;      // [T, E]
        int32_t* sel;              // [T, k]
        float* route_w;            // [T, k]
        float* shared;             // [T, 2*I + D] shared-expert scratch
        float* routed;             // routed-expert scratch (ops::moe_routed_scratch_floats)
        float* head_streams;       // [T, n, D] streams of the logit rows
        float* head_y;             // [T, D]
        float* head_xn;            // [T, D]
        float* logits;             // [T, V]
        // The MTP block's step: its own descriptor over the MTP rows, the step token each MTP
        // token reads its h from, and its logits.
        ops::StepDesc mtp_step;
        int32_t *m_ids, *m_tok_row, *m_row_slot, *m_row_start, *m_row_len, *m_src;  // [T]
        int64_t *m_tok_pos, *m_row_pos0;                                            // [T]
        float* mtp_logits;                                                          // [T, V]
    };
    std::vector<std::unique_ptr<Workspace>> buckets_;
    std::vector<void*> blocks_;           // workspace and table memory, freed with the model
    const Workspace* last_ws_ = nullptr;  // the workspace of the last run_step
    int last_T_ = 0;                      // its tokens
    int last_mtp_T_ = 0;  // the last run_mtp's tokens, whose outputs its streams hold (0: none)
    float* capture_ = nullptr;  // [L+1, step_tokens, n*D] when a tap was asked for
    // Recorded steps by shape: the workspace and pool they point into, the Dims, draft
    // verification. A null entry: the shape was seen once (recorded on its next step).
    using StepKey = std::tuple<const Workspace*, const CachePool*, int, int, int, int, int, int,
                               bool, bool, bool>;
    std::map<StepKey, std::unique_ptr<RecordedStep>> recorded_;
    int recorded_count_ = 0;
    bool record_steps_ = true;
    int32_t* expert_counts_ = nullptr;  // [L, E], allocated when counting is first switched on
    bool count_experts_ = false;
    std::vector<char> desc_image_;   // the step descriptor's host image (one upload)
    ops::HostStep host_, mtp_host_;  // the descriptors being built (host)
};

}  // namespace dsv4
