// The op table a backend implements. Pointers passed to ops are backend memory (host memory
// for the CPU backend, device memory for CUDA).
//
// Ordering: every call below is enqueued in order on the backend's one stream. `upload` copies
// from host memory that may be reused as soon as it returns; `download` may complete later:
// the host reads its destination only after `synchronize()`. A forward step is a sequence of
// op calls whose host-side arguments do not depend on the sequences' positions (those live in
// the step descriptor, ops/step.h), with no allocation and no synchronisation inside it.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "formats/quant_weight.h"
#include "ops/attention.h"
#include "ops/collective.h"
#include "ops/compressor.h"
#include "ops/embed.h"
#include "ops/hyper_conn.h"
#include "ops/indexer.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "ops/quant.h"
#include "ops/rope.h"
#include "ops/sample.h"
#include "ops/weight.h"

namespace dsv4 {

// A step's op sequence recorded once and replayed (a CUDA graph): replay reads the same
// pointers and shapes, and whatever the step descriptor holds at the time.
class RecordedStep {
  public:
    virtual ~RecordedStep() = default;
};

// What crossed between host and backend since the backend was made (tests count them).
struct TransferCounts {
    int64_t uploads = 0, downloads = 0, synchronizes = 0, replays = 0;
};

// Shapes a backend's kernels take at most (Backend::shape_limits; the CPU reference: none).
struct ShapeLimits {
    int head_dim = INT32_MAX;           // attention's K=V rows
    int typed_row_width = INT32_MAX;    // a typed cache row a compressor writes (hd or hi)
    int hc_streams = INT32_MAX;         // mHC residual streams
    int experts_per_token = INT32_MAX;  // routed experts a token picks
    int routed_experts = INT32_MAX;     // a layer's routed experts
};

class Backend {
  public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;

    // Memory: allocation happens at load/setup only, never inside a step. try_alloc fails with
    // a clear error (never aborts) when the memory is not there; alloc is for internal sizes
    // already checked and aborts on failure. Contents start zeroed.
    virtual Expected<void*> try_alloc(size_t bytes) = 0;
    void* alloc(size_t bytes);
    template <typename T>
    T* alloc_array(int64_t n) {
        return static_cast<T*>(alloc(static_cast<size_t>(n) * sizeof(T)));
    }
    virtual void free(void* p) = 0;
    // Bytes this backend could still allocate (host: MemAvailable; CUDA: free device memory).
    virtual size_t memory_available() const = 0;
    // Bytes currently allocated through this backend (weights it copied, caches, workspaces).
    virtual size_t memory_in_use() const = 0;

    virtual void upload(void* dst, const void* src, size_t bytes) = 0;
    virtual void download(void* dst, const void* src, size_t bytes) = 0;
    virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // backend to backend
    virtual void fill(float* dst, float value, int64_t n) = 0;
    // Waits for everything enqueued (a no-op on the CPU).
    virtual void synchronize() = 0;

    // Records the ops `body` enqueues into a replayable step without running them. A backend
    // that does not record (the CPU) returns nullptr: the caller runs the ops itself. An error
    // when something inside `body` waited for the device or allocated (the capture breaks).
    virtual Expected<std::unique_ptr<RecordedStep>> record(const std::function<void()>& body) {
        (void)body;
        return std::unique_ptr<RecordedStep>();
    }
    // Enqueues a recorded step (from this backend's record()).
    virtual void replay(const RecordedStep& step) {
        (void)step;
        DSV4_ASSERT(false, name(), " backend has no recorded steps");
    }
    virtual TransferCounts transfer_counts() const { return {}; }
    // The most compressed entries per slot the indexer op takes for Hi heads of hi dims (the
    // CUDA kernel keeps a token's scores in shared memory); the engine checks it at create.
    virtual int64_t max_indexer_entries(int Hi, int hi) const {
        (void)Hi, (void)hi;
        return INT64_MAX;
    }
    // The model shapes the backend's kernels take (the CUDA kernels' fixed shared-memory and
    // register layouts); Engine::create refuses a model beyond them with one line.
    virtual ShapeLimits shape_limits() const { return {}; }
    // The most rows a window ring may hold beyond the window (AttentionArgs::ring_rows - W), which
    // steps with several speculative drafts need; the engine lays the cache out within it.
    virtual int max_ring_extra() const { return INT32_MAX; }
    // Per-op device time (benchmarks' breakdown): while on, each op's device time is summed by
    // op (linears by weight role); op_profile() returns the table so far as markdown and clears
    // it ("" where the backend does not profile). Steps run op by op while profiling.
    virtual void profile_ops(bool on) { (void)on; }
    virtual std::string op_profile() { return ""; }
    // Concurrency inside a step. The ops issued between branch_begin() and branch_end() (the
    // branch) depend only on ops issued before branch_begin(); the ops issued after branch_end()
    // up to branch_join() neither read what the branch writes nor write what it reads; and
    // branch_join() orders every later op behind the branch. A backend may run the branch
    // alongside those ops (CUDA: on a second stream, a fork and a join in the step's graph);
    // these defaults run everything in issue order, which the contract makes equivalent.
    virtual void branch_begin() {}
    virtual void branch_end() {}
    virtual void branch_join() {}
    // Inside a branch, branch_pause() issues the next ops on the main line, before the branch's
    // end: they depend only on ops issued before branch_begin() and neither read what the
    // branch's ops so far write nor write what they read (they may run beside them).
    // branch_resume() goes back to the branch, whose later ops may also depend on them (CUDA:
    // the second stream waits for the main one there).
    virtual void branch_pause() {}
    virtual void branch_resume() {}

    // Bytes/s of a pure streaming read of a buffer far larger than the caches, measured now
    // (benchmarks' roofline); an error where the backend does not measure it.
    virtual Expected<double> measure_read_bandwidth() {
        return error(name(), " backend does not measure its read bandwidth");
    }

    // Called once at load, after the weights: the most rows any op of a step sees (the step's
    // tokens times the hc streams). A backend sizes its own step scratch here (CUDA: the FP8
    // activation copies of the reference numerics), never inside a step.
    virtual Status prepare_steps(int64_t max_rows) { return Status::ok(); }

    // Weights: handed over once at bind time; the checkpoint's mapping outlives the backend.
    virtual Expected<ops::Weight> upload_weight(const QuantWeight& w,
                                                const ops::WeightPlacement& where) = 0;
    // The layer's shared expert as already uploaded (w1, w3 [I, D], w2 [D, I]; null: none). A
    // backend may also keep a copy of it beside the routed experts (CUDA: as expert E of the
    // GEMV stacks when the formats match, so a batch-1 MoE runs it in the routed launches).
    struct SharedExpert {
        const ops::Weight* w1 = nullptr;
        const ops::Weight* w3 = nullptr;
        const ops::Weight* w2 = nullptr;
    };
    // E experts' w1[e], w3[e] ([I, D]) and w2[e] ([D, I]) as one stacked object.
    virtual Expected<ops::ExpertWeights> upload_experts(const QuantWeight* w1,
                                                        const QuantWeight* w3,
                                                        const QuantWeight* w2, int E,
                                                        const ops::WeightPlacement& where,
                                                        const SharedExpert& shared) = 0;

    // Projections of one x packed at bind time (the outputs of a LinearGroupArgs, in order): one
    // weight whose rows are the parts' rows concatenated, which linear_group then reads in one
    // pass (LinearGroupArgs::packed; CUDA: one pass per run of parts in one format); the parts
    // stay valid weights. An empty (invalid) result when this backend does not pack them (the
    // CPU reference; no two neighbouring parts it could read in one pass).
    virtual Expected<ops::Weight> pack_rows(std::span<const ops::Weight* const> parts) {
        (void)parts;
        return ops::Weight{};
    }

    // Synthetic routed experts (benchmarks) drawn where the backend keeps them: E experts of
    // w1|w3 [I, D] and w2 [D, I] in an FP4 format with formats/synth_weight.h's distribution.
    // An empty (invalid) result when this backend does not draw them itself: the caller then
    // draws them on the host and calls upload_experts.
    virtual Expected<ops::ExpertWeights> synth_experts(int E, int64_t I, int64_t D,
                                                       WeightFormat format, uint64_t seed,
                                                       const ops::WeightPlacement& where,
                                                       const SharedExpert& shared) {
        (void)E, (void)I, (void)D, (void)format, (void)seed, (void)where, (void)shared;
        return ops::ExpertWeights{};
    }

    virtual void embed(const ops::EmbedArgs& a) = 0;
    virtual void linear(const ops::LinearArgs& a) = 0;
    virtual void linear_group(const ops::LinearGroupArgs& a) = 0;
    virtual void swiglu(const ops::SwigluArgs& a) = 0;
    virtual void rms_norm(const ops::RmsNormArgs& a) = 0;
    virtual void rope(const ops::RopeArgs& a) = 0;
    virtual void hc_pre(const ops::HcPreArgs& a) = 0;
    virtual void hc_post(const ops::HcPostArgs& a) = 0;
    virtual void hc_head(const ops::HcHeadArgs& a) = 0;
    virtual void add_to_streams(const ops::AddToStreamsArgs& a) = 0;
    virtual void attention(const ops::AttentionArgs& a) = 0;
    virtual void ring_write(const ops::RingWriteArgs& a) = 0;
    virtual void compress(const ops::CompressArgs& a) = 0;
    virtual void indexer_topk(const ops::IndexerTopkArgs& a) = 0;
    virtual void router(const ops::RouterArgs& a) = 0;
    virtual void moe(const ops::MoeArgs& a) = 0;
    virtual void count_experts(const ops::CountExpertsArgs& a) = 0;
    virtual void gather_rows(const ops::GatherRowsArgs& a) = 0;
    virtual void sample(const ops::SampleArgs& a) = 0;
    virtual void logprobs(const ops::LogprobsArgs& a) = 0;
    virtual void logits_rules(const ops::LogitsRulesArgs& a) = 0;
    virtual void round_trip(const ops::RoundTripArgs& a) = 0;
    // x *= s (n elements).
    virtual void scale(float* x, float s, int64_t n) = 0;

    // Ranks (ops/collective.h, docs/parallel.md): the collective of this backend's rank, set
    // once before the weights load; none for a model on one rank. Every rank calls it at the
    // same point (a device backend makes its own communicator here, a collective itself); an
    // error when this backend cannot join.
    virtual Status set_collective(ops::Collective* c) {
        collective_ = c;
        return Status::ok();
    }
    int rank() const { return collective_ != nullptr ? collective_->rank() : 0; }
    int ranks() const { return collective_ != nullptr ? collective_->size() : 1; }
    // Ok, or why the ranks' collectives stopped (Collective::status; checked after each step).
    virtual Status collective_status() const {
        return collective_ != nullptr ? collective_->status() : Status::ok();
    }
    // x[0, n) := its sum over the ranks, in step order with the other ops; nothing on one rank.
    // This version is for backends whose memory is host memory (the CPU); a device backend
    // that takes ranks overrides it.
    virtual void all_reduce_sum(float* x, int64_t n) {
        if (collective_ != nullptr) collective_->all_reduce_sum(x, n);
    }

  private:
    ops::Collective* collective_ = nullptr;
};

inline void* Backend::alloc(size_t bytes) {
    auto p = try_alloc(bytes);
    DSV4_ASSERT(p.has_value(), p.status().message());
    return *p;
}

}  // namespace dsv4
