#include "backend/cuda/cuda_backend.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/device.h"
#include "backend/cuda/common/nccl_comm.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/gemm_op.h"
#include "backend/cuda/gemv_op.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/basic/basic.h"
#include "backend/cuda/kernels/compressor/compress.h"
#include "backend/cuda/kernels/gemv/gemv_chain.h"
#include "backend/cuda/kernels/hyper_conn/hyper_conn.h"
#include "backend/cuda/kernels/indexer/indexer_topk.h"
#include "backend/cuda/kernels/moe/moe.h"
#include "backend/cuda/kernels/moe/route.h"
#include "backend/cuda/kernels/quant/round_trip.h"
#include "backend/cuda/kernels/sample/sample.h"
#include "base/check.h"
#include "formats/synth_weight.h"

namespace dsv4 {
namespace {

constexpr size_t kAlign = 256;

// What a Weight handle's impl points at: a dense copy (f32 or bf16, read by the embedding
// lookup and the dense linear) and/or the weight GEMV's tile layout (FP8, MXFP4, NVFP4, BF16).
struct CudaWeight {
    int64_t rows = 0, cols = 0;
    DType dtype = DType::kF32;    // of `dense`: kF32 or kBF16
    const void* dense = nullptr;  // [rows, cols], or nullptr
    bool has_gemv = false;
    cuda::GemvWeight gemv;
    bool gemm_exact = false;  // the tensor-core linear reproduces it (gemm_exact, at load)
    ops::WeightRole role = ops::WeightRole::kAttention;  // for the op profile's labels
    // A pack_rows weight: its parts in row order, in runs read by one GEMV launch each (a run of
    // one part: that part's own weight; longer runs: the parts' gemv point into the run's).
    struct Run {
        int first = 0, count = 0;
        cuda::GemvWeight gemv;
    };
    std::vector<const CudaWeight*> parts;
    std::vector<Run> runs;
};

// A layer's routed experts: dense stacks ([E][2I][D] w1|w3 and [E][D][I] w2, f32 or bf16), or
// the GEMV layout (w1|w3 concatenated per expert, and w2).
struct CudaExperts {
    DType dtype = DType::kF32;
    const void* w13 = nullptr;
    const void* w2 = nullptr;
    bool has_gemv = false;
    cuda::GemvWeight g13, g2;
    // The layer's shared expert copied in as expert E of g13 / g2 (its formats match): a
    // one-token MoE runs it as a 7th group of the routed launches.
    bool shared_stacked = false;
};

struct CudaRecordedStep final : RecordedStep {
    cuda::CudaGraph graph;
};

const CudaWeight& cuda_weight(const ops::Weight* w) {
    DSV4_ASSERT(w != nullptr && w->valid(), "CUDA op given an empty weight");
    return *static_cast<const CudaWeight*>(w->impl);
}

// A row range [row0, row0 + n) of a GEMV weight as a weight of its own: ranges that start on a
// row-block quad (64 rows) are contiguous in the tile layout (gemv_layout.h).
cuda::GemvArgs gemv_rows(const cuda::GemvWeight& w, int64_t row0, int64_t n) {
    const cuda::GemvShape& s = w.shape;
    constexpr int64_t kQuadRows = cuda::kGemvRowBlock * cuda::kGemvQuad;
    DSV4_ASSERT(row0 % kQuadRows == 0 && (n % kQuadRows == 0 || row0 + n == s.n),
                "GEMV weight rows [", row0, ", ", row0 + n, ") of ", s.n,
                " do not fall on its 64-row blocks");
    const int64_t quad0 = row0 / kQuadRows;
    cuda::GemvArgs a;
    a.format = s.format;
    a.w_tiles = static_cast<const uint8_t*>(w.tiles) +
                quad0 * s.k_tiles() * cuda::kGemvQuad * cuda::kGemvTileBytes;
    a.w_scales = w.scales == nullptr ? nullptr
                                     : static_cast<const uint8_t*>(w.scales) +
                                           quad0 * s.k_tiles() * cuda::kGemvQuad *
                                               cuda::gemv_tile_scale_bytes(s.format);
    a.out_scale = w.out_scale + quad0 * cuda::kGemvQuad;
    a.w_tiles_expert_stride = s.tiles_expert_bytes();
    a.w_scales_expert_stride = s.scales_expert_bytes();
    a.n = static_cast<int32_t>(n);
    a.k = static_cast<int32_t>(s.k);
    a.row_blocks = static_cast<int32_t>((n + kQuadRows - 1) / kQuadRows * cuda::kGemvQuad);
    a.k_tiles = static_cast<int32_t>(s.k_tiles());
    return a;
}

// Backend::profile_ops: device time per op, from an event pair around each op's launches,
// summed by label. Meant for steps run op by op: events are not recorded while a step is being
// recorded as a graph.
class OpProfile {
  public:
    struct Scope {
        OpProfile* p;
        const char* label;
        cudaEvent_t start = nullptr;
        ~Scope() {
            if (p != nullptr) p->end(label, start);
        }
    };
    bool on = false;
    cudaStream_t stream = nullptr;
    Scope scope(const char* label, bool recording) {
        if (!on || recording) return {nullptr, label};
        return {this, label, take()};
    }
    // Resolves the pending pairs (after a synchronize).
    void collect() {
        for (const Pending& q : pending_) {
            float ms = 0;
            DSV4_CHECK_CUDA(cudaEventElapsedTime(&ms, q.start, q.end));
            Total& t = totals_[q.label];
            t.ms += ms;
            ++t.calls;
            free_.push_back(q.start);
            free_.push_back(q.end);
        }
        pending_.clear();
    }
    // The table so far (then cleared), largest first.
    std::string report() {
        collect();
        std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
        std::sort(rows.begin(), rows.end(),
                  [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
        double sum = 0;
        for (const auto& r : rows) sum += r.second.ms;
        std::string out = "| op | calls | ms | us/call | share |\n|---|---|---|---|---|\n";
        char line[160];
        for (const auto& [label, t] : rows) {
            std::snprintf(line, sizeof line, "| %s | %lld | %.3f | %.2f | %.1f%% |\n",
                          label.c_str(), static_cast<long long>(t.calls), t.ms,
                          1e3 * t.ms / static_cast<double>(t.calls), 100.0 * t.ms / sum);
            out += line;
        }
        totals_.clear();
        return out;
    }
    ~OpProfile() {
        for (cudaEvent_t e : free_) cudaEventDestroy(e);
        for (const Pending& q : pending_) {
            cudaEventDestroy(q.start);
            cudaEventDestroy(q.end);
        }
    }

  private:
    struct Pending {
        const char* label;
        cudaEvent_t start, end;
    };
    struct Total {
        double ms = 0;
        int64_t calls = 0;
    };
    cudaEvent_t take() {
        cudaEvent_t e = nullptr;
        if (!free_.empty()) {
            e = free_.back();
            free_.pop_back();
        } else {
            DSV4_CHECK_CUDA(cudaEventCreate(&e));
        }
        DSV4_CHECK_CUDA(cudaEventRecord(e, stream));
        return e;
    }
    void end(const char* label, cudaEvent_t start) { pending_.push_back({label, start, take()}); }
    std::vector<Pending> pending_;
    std::vector<cudaEvent_t> free_;
    std::map<std::string, Total> totals_;
};

// Profile labels of linears by weight role (ops::WeightRole's order).
const char* linear_label(ops::WeightRole r) {
    static constexpr const char* kLabels[] = {
        "linear:embed",   "linear:head",   "linear:attention", "linear:compressor",
        "linear:indexer", "linear:router", "linear:shared",    "linear:experts"};
    return kLabels[static_cast<int>(r)];
}

// An op that is one launch: the profile scope around it.
#define DSV4_CUDA_OP(op, Args, launch)                     \
    void op(const ops::Args& a) override {                 \
        const auto prof = profile_.scope(#op, recording_); \
        cuda::launch(a, cur());                            \
    }

// Step rows the scratch holds before prepare_steps asks for more.
constexpr int64_t kDefaultStepRows = 256;
// Expert pairs a row of a rank's step may hold (its top-k), for the local-id scratch.
constexpr int64_t kMaxLocalSlots = 16;
// Counts the GEMV chains' workspace holds (gemv_chain.h): a one-token MoE's groups, or the 64-row
// quads of a grouped output projection (V4-Flash's wo_a: 128).
constexpr int64_t kMaxChainCounts = 4096;

// An on/off switch from the environment: unset or empty gives dflt, "0" off, anything else on.
bool env_flag(const char* name, bool dflt) {
    const char* v = std::getenv(name);
    if (v == nullptr || v[0] == '\0') return dflt;
    return std::string(v) != "0";
}

class CudaBackend final : public Backend {
  public:
    explicit CudaBackend(cuda::DeviceInfo info)
        : info_(std::move(info)), stream_(cuda::CudaStream::create()) {
        // Diagnostics (docs/numerics-cuda.md): every weight dequantized to f32 at load and
        // multiplied by the plain f32 kernels (exact products, ~4x the memory, slow), to tell
        // the GEMV's hi + lo rounding apart from anything else.
        f32_weights_ = env_flag("DSV4_CUDA_F32_WEIGHTS", false);
        // Measurements (docs/perf.md): the fewest rows a linear runs on the tensor-core path
        // (gemm_op.h) instead of GEMV launches of 16 rows; 0 turns the path off.
        if (const char* rows = std::getenv("DSV4_CUDA_GEMM_MIN_ROWS"); rows != nullptr)
            gemm_min_rows_ = std::atoll(rows);
        // Measurements (docs/perf.md, session 11): the GEMVs clear their own outputs inside
        // the launch (GemvArgs::y_zero) instead of after a memset node each. Off by default:
        // 1.6% slower at batch-1 decode in the run that measured both.
        gemv_memset_ = !env_flag("DSV4_CUDA_GEMV_ZERO", false);
        // Measurements (docs/perf.md, session 12): decode steps take the split attention
        // kernel; DSV4_CUDA_ATTN_SPLIT=0 keeps them on the cluster kernel (for comparisons).
        attn_split_ = env_flag("DSV4_CUDA_ATTN_SPLIT", true);
        // Measurements (docs/perf.md, session 13): DSV4_CUDA_Y_CLEARED=0 clears every
        // accumulating GEMV's output by its own memset node, as before LinearArgs::y_cleared.
        trust_y_cleared_ = env_flag("DSV4_CUDA_Y_CLEARED", true);
        // Measurements (docs/perf.md, session 14): =0 puts back the launches these fusions
        // removed: the ring write after the attention (AttentionArgs::ring_out), the MoE's
        // expert-id kernel after the routing (MoeArgs::route).
        ring_in_attention_ = env_flag("DSV4_CUDA_RING_IN_ATTN", true);
        route_prepares_moe_ = env_flag("DSV4_CUDA_ROUTE_PREPARES_MOE", true);
        // Measurements (docs/perf.md, session 15): =0 runs Backend branches in issue order.
        branches_ = env_flag("DSV4_CUDA_BRANCHES", true);
        // Measurements (docs/perf.md, session 18): =0 runs f32-activation GEMVs of up to 8
        // tokens with hi and lo as two MMAs instead of two columns of one (GemvArgs::x_split).
        gemv_split_x_ = env_flag("DSV4_CUDA_GEMV_SPLIT_X", true);
        // Measurements (docs/perf.md, session 19): =0 runs a decode batch's expert pairs one
        // row a group (every pair reads and decodes its expert's weights).
        moe_compact_ = env_flag("DSV4_CUDA_MOE_COMPACT", true);
        // Measurements (docs/perf.md, session 21): =0 runs decode hc_pre launches on the split
        // kernel (blocks meeting through global memory) instead of one cluster a token.
        hc_cluster_ = env_flag("DSV4_CUDA_HC_CLUSTER", true);
        // Measurements (docs/perf.md, session 21): =0 merges the split attention kernel's
        // partials through global memory (the last block) instead of a cluster's shared memory.
        attn_merge_cluster_ = env_flag("DSV4_CUDA_ATTN_MERGE_CLUSTER", true);
        // Measurements (docs/perf.md, session 25): =0 runs the queries' per-head norm
        // (AttentionArgs::q_norm) as a launch of its own before the split attention kernel.
        attn_norm_in_kernel_ = env_flag("DSV4_CUDA_ATTN_QNORM", true);
        // A one-token MoE's w1|w3, SwiGLU and w2 as one launch (gemv_chain.h). Off by
        // default: slower than the separate launches (docs/perf.md, session 30); =1 turns it
        // on.
        moe_chain_ = env_flag("DSV4_CUDA_MOE_CHAIN", false);
        // Measurements (docs/perf.md, sessions 33-34): a main-line GEMV beside a branch that
        // launched a GEMV (CSA's wq_b beside the indexer) runs at most 2 CTAs an SM
        // (gemv_config), so the indexer's kernels find room; =N sets the cap, =0 lifts it.
        if (const char* n = std::getenv("DSV4_CUDA_BRANCH_GEMV_CTAS"); n != nullptr)
            branch_gemv_ctas_ = std::max(0, std::atoi(n));
        // The same for wo_a then wo_b (LinearArgs::then). Both chains take
        // DSV4_CUDA_CHAIN_DEPTH=4 for four copy stages a warp instead of two.
        linear_chain_ = env_flag("DSV4_CUDA_LINEAR_CHAIN", false);
        if (const char* d = std::getenv("DSV4_CUDA_CHAIN_DEPTH"); d != nullptr)
            chain_depth_ = std::atoi(d) == 4 ? 4 : 2;
        side_ = cuda::CudaStream::create();
        DSV4_CHECK_CUDA(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
        DSV4_CHECK_CUDA(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
        DSV4_CHECK_CUDA(cudaEventCreateWithFlags(&resume_, cudaEventDisableTiming));
        profile_.stream = stream_.get();
    }

    ~CudaBackend() override {
        stream_.synchronize();
        gemm_ = cuda::GemmLinear();                    // before its workspace goes
        for (auto& [p, bytes] : blocks_) cudaFree(p);  // teardown: errors have nowhere to go
        cudaEventDestroy(fork_);
        cudaEventDestroy(join_);
        cudaEventDestroy(resume_);
    }

    const char* name() const override { return "cuda"; }

  private:
    // The stream ops are issued to: the branch's inside a branch, else the main one.
    cudaStream_t cur() const { return in_branch_ ? side_.get() : stream_.get(); }
    // Backend scratch an op uses (uses()): a branch must not share one with the ops beside it.
    enum Scratch : unsigned {
        kActCopies = 1,      // act_: the FP8 activation copies
        kGemvWorkspace = 2,  // gemv_ws_: plain-mode partials and y_zero counters
        kHcScratch = 4,      // hc_ws_
        kAttentionScratch = 8,
        kIndexerScratch = 16,
    };
    // Inside a branch: remembered. After it, before its join: an op using scratch the branch
    // used joins it first (runs after it), so the two never touch one scratch at once.
    void uses(unsigned scratch) {
        if (in_branch_)
            branch_uses_ |= scratch;
        else if (branch_pending_ && (scratch & branch_uses_) != 0)
            branch_join();
        DSV4_ASSERT(!paused_ || (scratch & branch_uses_) == 0,
                    "an op of a paused branch's main line uses the branch's scratch");
    }
    // The rest of an open branch runs in order on the main stream (for an op bound to it).
    void leave_branch() {
        if (!in_branch_) return;
        branch_end();
        branch_join();
    }

  public:
    int64_t gemm_runs() const { return gemm_runs_; }
    int64_t attention_split_runs() const { return attn_split_runs_; }
    void set_attention_split(bool on) { attn_split_ = on; }
    void set_moe_compact(bool on) { moe_compact_ = on; }
    void set_moe_chain(bool on) { moe_chain_ = on; }
    int64_t moe_chain_runs() const { return moe_chain_runs_; }
    void set_linear_chain(bool on) { linear_chain_ = on; }
    int64_t linear_chain_runs() const { return linear_chain_runs_; }
    void set_hc_cluster(bool on) { hc_cluster_ = on; }
    void set_attention_merge_cluster(bool on) { attn_merge_cluster_ = on; }

    Expected<void*> try_alloc(size_t bytes) override {
        if (broke_recording("allocate")) return error("allocation inside a recorded step");
        const size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
        // Checked first, so the error says what is needed and what is there.
        const size_t avail = memory_available();
        if (rounded > avail)
            return error("out of GPU memory on ", info_.name, ": need ", rounded / 1048576.0,
                         " MiB more, ", avail / 1048576.0, " MiB free");
        void* p = nullptr;
        const cudaError_t err = cudaMalloc(&p, rounded);
        if (err != cudaSuccess) {
            cudaGetLastError();  // clear the sticky-free allocation error
            return error("cudaMalloc of ", rounded / 1048576.0,
                         " MiB failed: ", cudaGetErrorString(err));
        }
        DSV4_CHECK_CUDA(cudaMemsetAsync(p, 0, rounded, stream_.get()));
        blocks_[p] = rounded;
        in_use_ += rounded;
        return p;
    }
    void free(void* p) override {
        if (p == nullptr) return;
        auto it = blocks_.find(p);
        DSV4_ASSERT(it != blocks_.end(), "free of memory this backend did not allocate");
        in_use_ -= it->second;
        blocks_.erase(it);
        DSV4_CHECK_CUDA(cudaFree(p));  // waits for the device: free happens at teardown only
    }
    size_t memory_available() const override {
        size_t free_b = 0, total = 0;
        DSV4_CHECK_CUDA(cudaMemGetInfo(&free_b, &total));
        return free_b;
    }
    size_t memory_in_use() const override { return in_use_; }

    // Host-to-device from pageable memory returns once the source is staged (CUDA's documented
    // behaviour), so the caller may reuse it at once. A pinned source would be read later by the
    // DMA: then the copy is waited for before returning.
    void upload(void* dst, const void* src, size_t bytes) override {
        if (bytes == 0 || broke_recording("upload")) return;
        ++counts_.uploads;
        DSV4_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.get()));
        cudaPointerAttributes attr{};
        DSV4_CHECK_CUDA(cudaPointerGetAttributes(&attr, src));
        if (attr.type == cudaMemoryTypeHost) stream_.synchronize();
    }
    // Completes by synchronize() at the latest (pageable: when the call returns).
    void download(void* dst, const void* src, size_t bytes) override {
        if (bytes == 0 || broke_recording("download")) return;
        ++counts_.downloads;
        DSV4_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_.get()));
    }
    void copy(void* dst, const void* src, size_t bytes) override {
        if (bytes == 0) return;
        DSV4_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cur()));
    }
    void fill(float* dst, float value, int64_t n) override {
        cuda::launch_fill(dst, value, n, cur());
    }
    void synchronize() override {
        DSV4_ASSERT(!in_branch_ && !branch_pending_ && !paused_,
                    "synchronize with a branch not joined");
        if (broke_recording("synchronize")) return;
        ++counts_.synchronizes;
        stream_.synchronize();
        if (profile_.on) profile_.collect();
    }

    // A CUDA graph captured in global mode: any synchronising call (a host wait, a blocking
    // copy, cudaMalloc) anywhere in the process during `body` fails the capture. With ranks, in
    // thread-local mode (NCCL's threads, and other ranks' in one process, run meanwhile).
    // Host transfers and waits inside `body` are not run: they end the recording with an error
    // naming the call (the step contract, ops/backend.h).
    Expected<std::unique_ptr<RecordedStep>> record(const std::function<void()>& body) override {
        DSV4_ASSERT(!recording_, "nested record()");
        auto step = std::make_unique<CudaRecordedStep>();
        cuda::CudaGraph::begin_capture(stream_.get(), /*thread_local_mode=*/nccl_ != nullptr);
        recording_ = true;
        breaker_ = nullptr;
        body();
        DSV4_ASSERT(!in_branch_ && !branch_pending_ && !paused_,
                    "a recorded step left a branch not joined");
        recording_ = false;
        const cudaError_t err = cuda::CudaGraph::end_capture(stream_.get(), &step->graph);
        if (breaker_ != nullptr)
            return error("a recorded step must not ", breaker_, " (the step contract)");
        if (err != cudaSuccess) {
            cudaGetLastError();  // clear it: the backend stays usable without the graph
            return error("recording the step as a CUDA graph failed: ", cudaGetErrorString(err));
        }
        return std::unique_ptr<RecordedStep>(std::move(step));
    }
    void replay(const RecordedStep& step) override {
        const auto* s = dynamic_cast<const CudaRecordedStep*>(&step);
        DSV4_ASSERT(s != nullptr && s->graph.valid(), "replay of a step another backend recorded");
        ++counts_.replays;
        s->graph.launch(stream_.get());
    }
    TransferCounts transfer_counts() const override { return counts_; }

    // Branches (Backend::branch_begin): the branch's ops go to a second stream, forked from the
    // main one by an event and joined back by another (in a recording: a fork and a join in the
    // graph). Not while profiling (the op times are the main stream's events) or under
    // DSV4_CUDA_BRANCHES=0.
    void branch_begin() override {
        DSV4_ASSERT(!in_branch_ && !branch_pending_ && !paused_, "branch_begin: a branch is open");
        if (!branches_ || profile_.on) return;
        DSV4_CHECK_CUDA(cudaEventRecord(fork_, stream_.get()));
        DSV4_CHECK_CUDA(cudaStreamWaitEvent(side_.get(), fork_, 0));
        in_branch_ = true;
        branch_uses_ = 0;
        branch_gemv_ = false;
    }
    void branch_end() override {
        DSV4_ASSERT(!paused_, "branch_end of a paused branch");
        if (!in_branch_) return;
        DSV4_CHECK_CUDA(cudaEventRecord(join_, side_.get()));
        in_branch_ = false;
        branch_pending_ = true;
    }
    void branch_join() override {
        DSV4_ASSERT(!in_branch_ && !paused_, "branch_join inside the branch");
        if (!branch_pending_) return;
        DSV4_CHECK_CUDA(cudaStreamWaitEvent(stream_.get(), join_, 0));
        branch_pending_ = false;
    }
    // A pause: the ops go to the main stream; the resume has the side stream wait for them.
    void branch_pause() override {
        if (!in_branch_) return;  // (branches off: everything in order)
        in_branch_ = false;
        paused_ = true;
    }
    void branch_resume() override {
        if (!paused_) return;
        DSV4_CHECK_CUDA(cudaEventRecord(resume_, stream_.get()));
        DSV4_CHECK_CUDA(cudaStreamWaitEvent(side_.get(), resume_, 0));
        paused_ = false;
        in_branch_ = true;
    }
    ShapeLimits shape_limits() const override {
        return {cuda::kAttnMaxHeadDim, cuda::kCompressMaxTypedWidth, cuda::kHcMaxStreams,
                cuda::kRouteMaxK, cuda::kRouteMaxExperts};
    }
    int64_t max_indexer_entries(int Hi, int hi) const override {
        return cuda::indexer_max_entries(Hi, hi);
    }
    // Ops inside others (the MoE's shared expert, the router's gate, a linear's FP8 copy) also
    // count in their parent's time.
    // The profiled steps are also the profiler's capture range (cudaProfilerStart/Stop), so
    // `ncu --profile-from-start off` times exactly their kernels (tools/gpu/run.sh kprof).
    void profile_ops(bool on) override {
        stream_.synchronize();
        profile_.collect();
        profile_.on = on;
        DSV4_CHECK_CUDA(on ? cudaProfilerStart() : cudaProfilerStop());
    }
    std::string op_profile() override {
        stream_.synchronize();
        return profile_.report();
    }

    // A read of 4 GiB (2 GiB, 1 GiB, ... when less is free), cuda::measure_read_bandwidth.
    Expected<double> measure_read_bandwidth() override {
        size_t bytes = size_t{4} << 30;
        while (bytes > (size_t{256} << 20) && bytes + (size_t{1} << 30) > memory_available())
            bytes /= 2;
        DSV4_ASSIGN_OR_RETURN(void* buf, try_alloc(bytes + 256));
        uint32_t* sink = reinterpret_cast<uint32_t*>(static_cast<char*>(buf) + bytes);
        const double bw = cuda::measure_read_bandwidth(buf, static_cast<int64_t>(bytes), sink,
                                                       info_.sm_count * 8, stream_.get());
        free(buf);
        return bw;
    }

    // Dense F32 weights stay dense (f32 products, the transformers-saved checkpoints); FP8,
    // MXFP4, NVFP4 and BF16 go to the GEMV layout, packed, except the embedding table (dense,
    // read by row) and weights read in row ranges off the GEMV's 64-row blocks (dequantized to
    // f32: wo_a of small test models).
    Expected<ops::Weight> upload_weight(const QuantWeight& w,
                                        const ops::WeightPlacement& where) override {
        CudaWeight cw;
        cw.role = where.role;
        cw.rows = w.rows;
        cw.cols = w.cols;
        max_cols_ = std::max(max_cols_, w.cols);
        const bool dense_in = w.format == WeightFormat::kDense;
        const bool embed = where.role == ops::WeightRole::kEmbed;
        if (embed && !dense_in)
            return error("CUDA backend: a ", weight_format_name(w.format),
                         " embedding table is not supported (dense F32/BF16 only)");
        const bool off_blocks =
            where.row_block != 0 && where.row_block % (cuda::kGemvRowBlock * cuda::kGemvQuad) != 0;
        const bool keep_bf16 = dense_in && w.dtype == DType::kBF16 && !f32_weights_;
        if (embed || off_blocks || f32_weights_ || (dense_in && !keep_bf16)) {
            if (keep_bf16) {
                DSV4_ASSIGN_OR_RETURN(void* p, try_alloc(w.nbytes()));
                upload(p, w.data, w.nbytes());
                cw.dtype = DType::kBF16;
                cw.dense = p;
            } else {
                DSV4_ASSIGN_OR_RETURN(cw.dense, upload_dequantized(w));
            }
        } else {
            const QuantWeight* parts[] = {&w};
            DSV4_ASSIGN_OR_RETURN(cw.gemv, upload_gemv(parts, 1, 1));
            cw.has_gemv = true;
            if (gemm_.ready()) cw.gemm_exact = cuda::gemm_exact(cw.gemv, gemm_flag_, stream_.get());
        }
        weights_.push_back(cw);
        return ops::Weight{w.rows, w.cols, &weights_.back()};
    }
    // Parts of one x packed in runs: consecutive parts of one format (and whole 64-row blocks)
    // have their GEMV tiles, scales and output scales copied back to back into one weight (the
    // layout is quad-major, so whole 64-row parts concatenate as byte ranges), read by one launch;
    // each part is then pointed at its range and its own copy freed, so packing costs no memory.
    // Invalid (nothing packed) when no run has two parts or a part is not on the GEMV.
    Expected<ops::Weight> pack_rows(std::span<const ops::Weight* const> parts) override {
        constexpr int64_t kQuadRows = cuda::kGemvRowBlock * cuda::kGemvQuad;
        if (parts.size() < 2 || parts.size() > static_cast<size_t>(cuda::kGemvMaxSegments))
            return ops::Weight{};
        const CudaWeight& first = cuda_weight(parts[0]);
        auto joins = [&](const CudaWeight& a, const CudaWeight& b) {  // b may follow a in a run
            return a.gemv.shape.format == b.gemv.shape.format && a.rows % kQuadRows == 0 &&
                   b.rows % kQuadRows == 0;
        };
        std::vector<CudaWeight::Run> runs;
        int64_t rows = 0;
        for (size_t i = 0; i < parts.size(); ++i) {
            const CudaWeight& w = cuda_weight(parts[i]);
            if (!w.has_gemv || w.gemv.shape.n_experts != 1 || w.cols != first.cols ||
                !w.parts.empty())
                return ops::Weight{};
            if (i > 0 && joins(cuda_weight(parts[i - 1]), w))
                ++runs.back().count;
            else
                runs.push_back({static_cast<int>(i), 1, w.gemv});
            rows += w.rows;
        }
        if (runs.size() == parts.size()) return ops::Weight{};
        CudaWeight packed;
        packed.rows = rows;
        packed.cols = first.cols;
        packed.role = first.role;
        for (const ops::Weight* p : parts) packed.parts.push_back(&cuda_weight(p));
        for (CudaWeight::Run& r : runs) {
            if (r.count < 2) continue;
            DSV4_ASSIGN_OR_RETURN(r.gemv, pack_run(parts.subspan(r.first, r.count)));
        }
        packed.runs = std::move(runs);
        weights_.push_back(std::move(packed));
        return ops::Weight{rows, first.cols, &weights_.back()};
    }
    // One run of pack_rows.
    Expected<cuda::GemvWeight> pack_run(std::span<const ops::Weight* const> parts) {
        cuda::GemvShape shape = cuda_weight(parts[0]).gemv.shape;
        shape.n = 0;
        for (const ops::Weight* p : parts) shape.n += cuda_weight(p).rows;
        const size_t scale_bytes = static_cast<size_t>(shape.scales_expert_bytes());
        DSV4_ASSIGN_OR_RETURN(void* tiles,
                              try_alloc(static_cast<size_t>(shape.tiles_expert_bytes())));
        void* scales = nullptr;
        if (scale_bytes > 0) {
            DSV4_ASSIGN_OR_RETURN(scales, try_alloc(scale_bytes));
        }
        DSV4_ASSIGN_OR_RETURN(void* out_scale,
                              try_alloc(static_cast<size_t>(shape.row_blocks()) * sizeof(float)));
        DSV4_RETURN_IF_ERROR(reserve_gemv_workspace(shape.row_blocks()));
        size_t t_off = 0, s_off = 0, o_off = 0;
        std::vector<cuda::GemvWeight> old;
        for (const ops::Weight* p : parts) {
            // (The handles are const views of weights_' elements, which this backend owns.)
            auto& w = const_cast<CudaWeight&>(cuda_weight(p));
            const cuda::GemvShape& ps = w.gemv.shape;
            const size_t tb = static_cast<size_t>(ps.tiles_expert_bytes()),
                         sb = static_cast<size_t>(ps.scales_expert_bytes()),
                         ob = static_cast<size_t>(ps.row_blocks()) * sizeof(float);
            auto* t = static_cast<uint8_t*>(tiles) + t_off;
            auto* sc = scales == nullptr ? nullptr : static_cast<uint8_t*>(scales) + s_off;
            auto* o = static_cast<uint8_t*>(out_scale) + o_off;
            DSV4_CHECK_CUDA(
                cudaMemcpyAsync(t, w.gemv.tiles, tb, cudaMemcpyDeviceToDevice, stream_.get()));
            if (sb > 0)
                DSV4_CHECK_CUDA(cudaMemcpyAsync(sc, w.gemv.scales, sb, cudaMemcpyDeviceToDevice,
                                                stream_.get()));
            DSV4_CHECK_CUDA(
                cudaMemcpyAsync(o, w.gemv.out_scale, ob, cudaMemcpyDeviceToDevice, stream_.get()));
            old.push_back(w.gemv);
            w.gemv.tiles = t;
            w.gemv.scales = sc;
            w.gemv.out_scale = reinterpret_cast<const float*>(o);
            t_off += tb;
            s_off += sb;
            o_off += ob;
        }
        stream_.synchronize();
        for (const cuda::GemvWeight& g : old) {
            free(const_cast<void*>(g.tiles));
            free(const_cast<void*>(g.scales));
            free(const_cast<float*>(g.out_scale));
        }
        return cuda::GemvWeight{shape, tiles, scales, static_cast<const float*>(out_scale)};
    }
    Expected<ops::ExpertWeights> upload_experts(const QuantWeight* w1, const QuantWeight* w3,
                                                const QuantWeight* w2, int E,
                                                const ops::WeightPlacement&,
                                                const SharedExpert& shared) override {
        DSV4_ASSERT(E >= 1, E);
        const int64_t I = w1[0].rows, D = w1[0].cols;
        max_cols_ = std::max({max_cols_, I, D});
        for (int e = 0; e < E; ++e) {
            const QuantWeight* ws[] = {&w1[e], &w3[e], &w2[e]};
            for (const QuantWeight* q : ws)
                if (q->format != w1[0].format || q->dtype != w1[0].dtype)
                    return error("CUDA backend: expert ", e, " mixes weight formats (",
                                 weight_format_name(q->format), " ", dtype_name(q->dtype), " vs ",
                                 weight_format_name(w1[0].format), " ", dtype_name(w1[0].dtype),
                                 ")");
        }
        CudaExperts ce;
        if (f32_weights_ || (w1[0].format == WeightFormat::kDense && w1[0].dtype != DType::kBF16)) {
            // Dense f32 experts stacked for the dense grouped linear (f32 products).
            DSV4_ASSIGN_OR_RETURN(void* p13, try_alloc(static_cast<size_t>(E) * 2 * I * D * 4));
            DSV4_ASSIGN_OR_RETURN(void* p2, try_alloc(static_cast<size_t>(E) * D * I * 4));
            std::vector<float> host(static_cast<size_t>(2 * I * D));
            for (int e = 0; e < E; ++e) {
                for (int64_t r = 0; r < I; ++r) {
                    dequant_row(w1[e], r, host.data() + r * D);
                    dequant_row(w3[e], r, host.data() + (I + r) * D);
                }
                upload_sync(static_cast<float*>(p13) + e * 2 * I * D, host.data(), 2 * I * D * 4);
                for (int64_t r = 0; r < D; ++r) dequant_row(w2[e], r, host.data() + r * I);
                upload_sync(static_cast<float*>(p2) + e * D * I, host.data(), D * I * 4);
            }
            ce.w13 = p13;
            ce.w2 = p2;
        } else {
            std::vector<const QuantWeight*> p13(2 * static_cast<size_t>(E)), p2(E);
            for (int e = 0; e < E; ++e) {
                p13[2 * e] = &w1[e];
                p13[2 * e + 1] = &w3[e];
                p2[e] = &w2[e];
            }
            auto gf = cuda::gemv_format_of(w1[0]);
            const bool stack = gf.has_value() && can_stack_shared(shared, *gf, I, D);
            DSV4_ASSIGN_OR_RETURN(ce.g13, upload_gemv(p13.data(), E, 2, stack ? 1 : 0));
            DSV4_ASSIGN_OR_RETURN(ce.g2, upload_gemv(p2.data(), E, 1, stack ? 1 : 0));
            ce.has_gemv = true;
            if (stack) stack_shared(ce, E, shared);
        }
        return keep_experts(ce, E, I, D);
    }

    // Drawn in device memory straight into the GEMV layout: random E2M1 codes, scale codes in
    // the range synth_weight.h draws (the same distribution as the host's synthetic weights,
    // not the same numbers). Shapes off the tile grid go through the host (empty result).
    Expected<ops::ExpertWeights> synth_experts(int E, int64_t I, int64_t D, WeightFormat f,
                                               uint64_t seed, const ops::WeightPlacement&,
                                               const SharedExpert& shared) override {
        // Whole 64-row quads and whole 64-wide k-tiles, both ways (w1|w3 is [2I, D], w2 [D, I]).
        constexpr int64_t kQuadRows = cuda::kGemvRowBlock * cuda::kGemvQuad;
        const bool fp4 = f == WeightFormat::kMxfp4 || f == WeightFormat::kNvfp4;
        if (f32_weights_ || !fp4 || I % kQuadRows != 0 || D % kQuadRows != 0)
            return ops::ExpertWeights{};
        const cuda::GemvFormat gf =
            f == WeightFormat::kNvfp4 ? cuda::GemvFormat::kNvfp4 : cuda::GemvFormat::kMxfp4;
        CudaExperts ce;
        // A stacked shared expert takes slot E (drawn, then overwritten by the copy).
        const bool stack = can_stack_shared(shared, gf, I, D);
        const int slots = E + (stack ? 1 : 0);
        DSV4_ASSIGN_OR_RETURN(ce.g13, synth_gemv(gf, 2 * I, D, slots, seed));
        DSV4_ASSIGN_OR_RETURN(ce.g2, synth_gemv(gf, D, I, slots, ~seed));
        // (The workspace's counters serve the experts' launches that clear their outputs.)
        DSV4_RETURN_IF_ERROR(reserve_gemv_workspace(ce.g13.shape.row_blocks()));
        ce.has_gemv = true;
        if (stack) stack_shared(ce, E, shared);
        max_cols_ = std::max({max_cols_, I, D});
        return keep_experts(ce, E, I, D);
    }

    // Scratch sized for steps of up to max_rows rows: the FP8 activation copies and the mHC
    // partial sums (grown, never shrunk); the decode indexer's (fixed size, ~1 MB) and the
    // decode attention's (fixed size, ~4.3 MB on an H200).
    Status prepare_steps(int64_t max_rows) override {
        const int64_t hc = cuda::hc_scratch_doubles(max_rows, cuda::kHcMaxStreams, info_.sm_count);
        if (hc > hc_ws_.doubles || max_rows > hc_ws_.max_tokens) {
            // The partials, then the arrival counters (zeroed by try_alloc).
            const size_t bytes = static_cast<size_t>(hc) * sizeof(double) +
                                 static_cast<size_t>(max_rows) * sizeof(unsigned);
            DSV4_ASSIGN_OR_RETURN(void* p, try_alloc(bytes));
            free(hc_ws_.part);
            auto* part = static_cast<double*>(p);
            hc_ws_ = {part, reinterpret_cast<unsigned*>(part + hc), hc, max_rows, info_.sm_count};
        }
        if (indexer_ws_.scores == nullptr) {
            DSV4_ASSIGN_OR_RETURN(void* p, try_alloc(cuda::indexer_scratch_bytes()));
            indexer_ws_ = cuda::indexer_scratch(p, info_.sm_count);
        }
        if (attn_ws_.part == nullptr) {
            DSV4_ASSIGN_OR_RETURN(void* p,
                                  try_alloc(cuda::attention_scratch_bytes(info_.sm_count)));
            attn_ws_ = cuda::attention_scratch(p, info_.sm_count);
        }
        if (sample_ws_.best == nullptr) {
            DSV4_ASSIGN_OR_RETURN(void* p, try_alloc(cuda::sample_scratch_bytes(info_.sm_count)));
            sample_ws_ = cuda::sample_scratch(p, info_.sm_count);
        }
        // A step's own K=V rows as typed cache rows store them (no typed row is wider than
        // float32's).
        if (const int64_t rows = max_rows * 4 * cuda::kAttnMaxHeadDim; rows > attn_ws_.rows_bytes) {
            DSV4_ASSIGN_OR_RETURN(void* p, try_alloc(static_cast<size_t>(rows)));
            free(attn_ws_.rows);
            attn_ws_.rows = static_cast<uint8_t*>(p);
            attn_ws_.rows_bytes = rows;
        }
        if (gemm_min_rows_ > 0 && !gemm_.ready()) DSV4_RETURN_IF_ERROR(start_gemm());
        // A rank's share of the experts: a step's expert pairs in its ids and their weights
        // (moe; 128 bytes a row).
        if (const int64_t n = max_rows * kMaxLocalSlots; n > local_slots_) {
            DSV4_ASSIGN_OR_RETURN(void* p, try_alloc(static_cast<size_t>(n) * 8));
            free(local_sel_);
            local_sel_ = static_cast<int32_t*>(p);
            local_weight_ = reinterpret_cast<float*>(local_sel_ + n);
            local_slots_ = n;
        }
        const int64_t floats = max_rows * max_cols_;
        if (floats <= act_floats_) return Status::ok();
        DSV4_ASSIGN_OR_RETURN(void* p, try_alloc(static_cast<size_t>(floats) * sizeof(float)));
        free(act_);
        act_ = static_cast<float*>(p);
        act_floats_ = floats;
        return Status::ok();
    }

    void embed(const ops::EmbedArgs& a) override {
        const auto prof = profile_.scope("embed", recording_);
        const CudaWeight& t = cuda_weight(a.table);
        DSV4_ASSERT(t.dense != nullptr, "CUDA embed: the table has no dense copy");
        cuda::launch_embed_dense(a.ids, t.dense, t.dtype == DType::kBF16, t.cols, a.out, a.T, a.n,
                                 cur());
    }
    void linear(const ops::LinearArgs& a) override {
        if (a.then != nullptr) {
            // A pair: one launch when the chain takes it, else the plain sequence.
            if (linear_chain(a, *a.then)) return;
            ops::LinearArgs first = a;
            first.then = nullptr;
            linear(first);
            linear(*a.then);
            return;
        }
        const CudaWeight& w = cuda_weight(a.w);
        if (a.round_bf16) {
            // The bf16 reference mode: the linear, then its output rounded to bf16 in place (the
            // op's definition; y may be accumulated by several blocks, so not in the epilogue).
            DSV4_ASSERT(a.y_type == ops::ActType::kF32, "CUDA linear: round_bf16 of a bf16 y");
            ops::LinearArgs plain = a;
            plain.round_bf16 = false;
            linear(plain);
            const int64_t cols = a.N * a.groups;
            round_trip({static_cast<float*>(a.y), a.M, static_cast<int>(a.ldy ? a.ldy : cols),
                        static_cast<int>(cols), 1, ops::RoundTrip::kBf16});
            return;
        }
        const auto prof = profile_.scope(linear_label(w.role), recording_);
        constexpr int64_t kQuadRows = cuda::kGemvRowBlock * cuda::kGemvQuad;
        if (a.groups > 1 &&
            (a.act_fp8 || !w.has_gemv || a.N % kQuadRows != 0 || a.row0 % kQuadRows != 0)) {
            // Groups the GEMV cannot take as one launch: one linear each.
            for (int j = 0; j < a.groups; ++j) linear(ops::linear_group_part(a, w.cols, j));
            return;
        }
        if (a.act_fp8) {
            // Reference numerics: the product reads x rounded to FP8 per 128 along K.
            DSV4_ASSERT(a.x_type == ops::ActType::kF32 && a.M * w.cols <= act_floats_,
                        "act_fp8 of ", a.M, " x ", w.cols, " (prepare_steps not called?)");
            uses(kActCopies);
            cuda::launch_act_fp8_copy(static_cast<const float*>(a.x), a.ldx ? a.ldx : w.cols, act_,
                                      a.M, w.cols, cur());
            ops::LinearArgs r = a;
            r.x = act_;
            r.ldx = w.cols;
            r.act_fp8 = false;
            linear(r);
            return;
        }
        DSV4_ASSERT(a.groups >= 1 && a.row0 >= 0 && a.row0 + a.N * a.groups <= w.rows, "rows [",
                    a.row0, ", ", a.row0 + a.N * a.groups, ") outside weight of ", w.rows);
        const int64_t ldx = a.ldx ? a.ldx : w.cols * a.groups;
        const int64_t ldy = a.ldy ? a.ldy : a.N * a.groups;
        if (use_gemm(w, a.M, a.N, a.groups) && a.x_type == ops::ActType::kF32 &&
            a.y_type == ops::ActType::kF32 && a.y != a.x) {
            leave_branch();  // (the cuBLAS handle is bound to the main stream)
            gemm_.run({&w.gemv, static_cast<const float*>(a.x), ldx, static_cast<float*>(a.y), ldy,
                       a.M, a.N, a.row0, a.groups},
                      cur());
            ++gemm_runs_;
            return;
        }
        if (w.has_gemv) {
            // The GEMV takes up to 16 tokens a launch: longer steps (prefill) run in slices.
            cuda::GemvArgs g = linear_gemv_args(a, w);
            // An f32 y: accumulate mode into y cleared first (docs/perf.md: accumulating is
            // 1.1-1.5x faster than the plain mode's finish at M <= 16), by a 2-D memset of the
            // written columns (or inside the launch, y_zero, under DSV4_CUDA_GEMV_ZERO), and
            // programmatic dependent launch (the weights stream in while the previous kernel
            // drains; x is read after the GEMV's wait). Nothing to clear when an earlier op
            // did (LinearArgs::y_cleared), and then nothing cuts the programmatic edge.
            g.pdl = true;
            cuda::gemv_workspace_bind(gemv_ws_, gemv_ws_row_blocks_, &g);
            if (!g.y_bf16) {
                DSV4_ASSERT(a.y != a.x, "CUDA linear: y aliases x");
                g.y_accumulate = true;
                const bool cleared = a.y_cleared && trust_y_cleared_;
                g.y_zero = !gemv_memset_ && !cleared;
                if (gemv_memset_ && !cleared)
                    DSV4_CHECK_CUDA(cudaMemset2DAsync(a.y, static_cast<size_t>(ldy) * 4, 0,
                                                      static_cast<size_t>(a.N * a.groups) * 4,
                                                      static_cast<size_t>(a.M), cur()));
            }
            if (!g.y_accumulate || g.y_zero) uses(kGemvWorkspace);
            const size_t xe = g.x_f32 ? 4 : 2, ye = g.y_bf16 ? 2 : 4;
            if (in_branch_) branch_gemv_ = true;  // (gemv_config)
            for (int64_t m0 = 0; m0 < a.M; m0 += cuda::kGemvMaxM) {
                g.m = static_cast<int32_t>(std::min<int64_t>(cuda::kGemvMaxM, a.M - m0));
                g.x = static_cast<const uint8_t*>(a.x) + m0 * ldx * xe;
                g.y = static_cast<uint8_t*>(a.y) + m0 * ldy * ye;
                cuda::launch_gemv(g, gemv_config(), cur());
            }
            return;
        }
        DSV4_ASSERT(w.dense != nullptr, "CUDA linear: weight without a device copy");
        cuda::DenseLinearArgs d;
        d.x = a.x;
        d.x_bf16 = a.x_type == ops::ActType::kBF16;
        d.w = w.dense;
        d.w_bf16 = w.dtype == DType::kBF16;
        d.y = a.y;
        d.y_bf16 = a.y_type == ops::ActType::kBF16;
        d.M = a.M;
        d.N = a.N;
        d.K = w.cols;
        d.row0 = a.row0;
        d.ldx = ldx;
        d.ldy = ldy;
        cuda::launch_dense_linear(d, cur());
    }
    void linear_group(const ops::LinearGroupArgs& a) override {
        DSV4_ASSERT(a.n_out >= 0 && a.n_out <= ops::LinearGroupArgs::kMaxOutputs, a.n_out);
        if (a.packed != nullptr && linear_packed(a)) return;
        for (int i = 0; i < a.n_out; ++i)
            linear({a.x, a.out[i].w, a.out[i].y, a.M, a.out[i].w->rows, 0, 0, 0, ops::ActType::kF32,
                    ops::ActType::kF32, a.out[i].act_fp8, a.out[i].round_bf16});
        memset_clears(a.clear);  // (no GEMV launch took them)
    }
    // An op's clears (ops::Clear) by memset nodes, where no launch of the op takes them.
    void memset_clears(const ops::Clear (&clears)[ops::kMaxClears]) {
        for (const ops::Clear& c : clears)
            if (c.p != nullptr && c.n > 0)
                DSV4_CHECK_CUDA(cudaMemsetAsync(c.p, 0, static_cast<size_t>(c.n) * 4, cur()));
    }
    // A packed group (pack_rows) in one GEMV launch per run and 16 rows, each part's rows written
    // to its own output (the GEMV's row segments), in plain mode: no clearing of the outputs
    // (under DSV4_CUDA_GEMV_ZERO: accumulated into outputs the launch clears, y_zero). False
    // (nothing run) when an output needs what the packed launch does not do (FP8 activations, a
    // bf16 rounding).
    bool linear_packed(const ops::LinearGroupArgs& a) {
        const CudaWeight& w = cuda_weight(a.packed);
        DSV4_ASSERT(static_cast<int>(w.parts.size()) == a.n_out, "linear_group: packed weight of ",
                    w.parts.size(), " parts for ", a.n_out, " outputs");
        for (int i = 0; i < a.n_out; ++i) {
            DSV4_ASSERT(a.out[i].w->impl == w.parts[i], "linear_group: output ", i, " is not part ",
                        i, " of the packed weight");
            if (a.out[i].act_fp8 || a.out[i].round_bf16) return false;
        }
        const auto prof = profile_.scope(linear_label(w.role), recording_);
        // Long steps: each part on the tensor-core path (when every part can take it).
        bool gemm = true;
        for (const CudaWeight* p : w.parts) gemm = gemm && use_gemm(*p, a.M, p->rows, 1);
        if (gemm) {
            leave_branch();  // (the cuBLAS handle is bound to the main stream)
            for (int i = 0; i < a.n_out; ++i) {
                const CudaWeight& p = *w.parts[i];
                gemm_.run({&p.gemv, a.x, p.cols, a.out[i].y, p.rows, a.M, p.rows, 0, 1}, cur());
            }
            gemm_runs_ += a.n_out;
            memset_clears(a.clear);
            return true;
        }
        // The clears ride on the first launch (GemvArgs::clears), which writes them while it
        // reads x and writes the outputs: the contract's no-overlap, checked.
        static_assert(ops::kMaxClears <= cuda::kGemvMaxClears);
        const auto at = [](const float* p) { return reinterpret_cast<uintptr_t>(p); };
        for (const ops::Clear& c : a.clear) {
            if (c.p == nullptr || c.n == 0) continue;
            const auto apart = [&](const float* p, int64_t n) {
                return at(c.p + c.n) <= at(p) || at(p + n) <= at(c.p);
            };
            bool ok = apart(a.x, a.M * w.cols);
            for (int i = 0; i < a.n_out; ++i) ok = ok && apart(a.out[i].y, a.M * a.out[i].w->rows);
            DSV4_ASSERT(ok, "linear_group: a clear overlaps x or an output");
        }
        bool clears_taken = false;
        for (const CudaWeight::Run& r : w.runs) {
            cuda::GemvArgs g = gemv_rows(r.gemv, 0, r.gemv.shape.n);
            g.x_f32 = true;
            g.x_split = gemv_split_x_;
            g.ldx = w.cols;
            g.pdl = true;
            cuda::gemv_workspace_bind(gemv_ws_, gemv_ws_row_blocks_, &g);
            g.y_accumulate = !gemv_memset_;
            g.y_zero = g.y_accumulate;
            uses(kGemvWorkspace);  // (plain mode, or y_zero's counters)
            g.n_segments = r.count;
            int64_t row = 0;
            for (int i = 0; i < r.count; ++i) {
                const int64_t n = a.out[r.first + i].w->rows;
                g.segments[i] = {static_cast<int32_t>(row), a.out[r.first + i].y, n};
                row += n;
            }
            for (int64_t m0 = 0; m0 < a.M; m0 += cuda::kGemvMaxM) {
                g.m = static_cast<int32_t>(std::min<int64_t>(cuda::kGemvMaxM, a.M - m0));
                g.x = a.x + m0 * w.cols;
                for (int i = 0; i < r.count; ++i)
                    g.segments[i].y = a.out[r.first + i].y + m0 * g.segments[i].ldy;
                g.n_clears = 0;
                if (!clears_taken) {
                    for (const ops::Clear& c : a.clear)
                        if (c.p != nullptr && c.n > 0) g.clears[g.n_clears++] = {c.p, c.n};
                    clears_taken = true;
                }
                cuda::launch_gemv(g, {info_.sm_count}, cur());
            }
        }
        return true;
    }
    DSV4_CUDA_OP(swiglu, SwigluArgs, launch_swiglu)
    DSV4_CUDA_OP(rms_norm, RmsNormArgs, launch_rms_norm)
    DSV4_CUDA_OP(rope, RopeArgs, launch_rope)
    // The mHC ops in the bf16 reference mode run as their definitions' plain composition (the
    // fused hc_post and norm as launches of their own, each rounding a round trip after the
    // kernel that wrote it): a checking mode, where launches cost nothing that matters.
    void hc_pre(const ops::HcPreArgs& a) override {
        if (a.round_bf16) {
            if (a.post_in != nullptr) hc_post(*a.post_in);
            ops::HcPreArgs plain = a;
            plain.post_in = nullptr;
            plain.y_norm = nullptr;
            plain.round_bf16 = false;
            hc_pre(plain);
            round_bf16_rows(a.y, a.T, a.D);
            if (a.y_norm != nullptr)
                rms_norm({a.y, a.norm_weight, a.y_norm, a.T, a.D, a.y_norm_eps, true});
            return;
        }
        const auto prof = profile_.scope("hc_pre", recording_);
        uses(kHcScratch);
        cuda::launch_hc_pre(a, hc_ws_, cur(), hc_cluster_);
    }
    void hc_post(const ops::HcPostArgs& a) override {
        {
            const auto prof = profile_.scope("hc_post", recording_);
            cuda::launch_hc_post(a, cur());
        }
        if (a.round_bf16) round_bf16_rows(a.out, a.T, int64_t{a.n} * a.D);
    }
    void hc_head(const ops::HcHeadArgs& a) override {
        {
            const auto prof = profile_.scope("hc_head", recording_);
            uses(kHcScratch);
            cuda::launch_hc_head(a, hc_ws_, cur());
        }
        if (a.round_bf16) round_bf16_rows(a.out, a.T, a.D);
    }
    // x [rows, cols] rounded to bf16 in place (RoundTrip::kBf16).
    void round_bf16_rows(float* x, int64_t rows, int64_t cols) {
        DSV4_ASSERT(cols <= 0x7fffffff, "bf16 rounding of rows of ", cols);
        round_trip(
            {x, rows, static_cast<int>(cols), static_cast<int>(cols), 1, ops::RoundTrip::kBf16});
    }
    DSV4_CUDA_OP(add_to_streams, AddToStreamsArgs, launch_add_to_streams)
    DSV4_CUDA_OP(round_trip, RoundTripArgs, launch_round_trip)
    void attention(const ops::AttentionArgs& a) override {
        const auto prof = profile_.scope("attention", recording_);
        DSV4_ASSERT(a.ring_out == nullptr || a.ring_out == a.ring,
                    "CUDA attention: ring_out must be the ring read");
        uses(kAttentionScratch);
        cuda::AttentionScratch ws = attn_ws_;
        if (!attn_split_) ws.part = nullptr;  // (the cluster kernel for every step)
        ws.merge_in_cluster = attn_merge_cluster_;
        ws.norm_in_kernel = attn_norm_in_kernel_;
        if (cuda::launch_attention(a, ws, cur(), ring_in_attention_)) ++attn_split_runs_;
    }
    void ring_write(const ops::RingWriteArgs& a) override {
        const auto prof = profile_.scope("ring_write", recording_);
        cuda::launch_ring_write(a, cur());
    }
    void compress(const ops::CompressArgs& a) override {
        const auto prof = profile_.scope("compress", recording_);
        cuda::launch_compress(a, cur());
    }
    void indexer_topk(const ops::IndexerTopkArgs& a) override {
        const auto prof = profile_.scope("indexer_topk", recording_);
        uses(kIndexerScratch);
        cuda::launch_indexer_topk(a, indexer_ws_, cur());
    }
    // Fused (a dense gate: the product inside the routing kernel, one launch), else two
    // kernels (the gate through linear, then the routing kernel).
    void router(const ops::RouterArgs& a) override { route(a, nullptr); }
    // The router, its kernel also preparing a one-token MoE's launches when prep is given.
    void route(const ops::RouterArgs& a, const cuda::MoePrep* prep) {
        const auto prof = profile_.scope("router", recording_);
        const CudaWeight& g = cuda_weight(a.gate);
        const ops::RouteArgs r{a.logits, a.bias, a.tid2eid, a.ids, a.sel,
                               a.weight, a.T,    a.E,       a.k,   a.scale};
        if (g.dense != nullptr) {
            const cuda::RouterGate fused{a.x, g.dense, g.dtype == DType::kBF16, g.cols, a.logits};
            cuda::launch_route(r, cur(), &fused, prep);
            return;
        }
        ops::LinearArgs gate{a.x, a.gate, a.logits, a.T, a.E};
        gate.y_cleared = a.logits_cleared;
        linear(gate);
        cuda::launch_route(r, cur(), nullptr, prep);
    }
    // Decode: every (token, slot) pair is a group of one row. Prefill (pairs >= 4x experts,
    // ops::moe_grouped_by_expert): the pairs are grouped by expert into groups of 16 rows, so an
    // expert's weights are read once per 16 of its rows. Then w1|w3 for all groups in one
    // launch, the clipped SwiGLU, w2 in one launch, and the weighted sum in slot order plus the
    // shared expert (the reference's order). Dense f32 experts: the dense kernel, one row each.
    void moe(const ops::MoeArgs& a) override {
        const auto prof = profile_.scope("moe", recording_);
        DSV4_ASSERT(a.routed_scratch != nullptr, "CUDA moe needs MoeArgs::routed_scratch");
        if (a.T == 0) return;
        if (a.experts->first != 0 || a.experts->E != a.E) {
            // A rank's share of the experts (docs/parallel.md; Engine::create does not make CUDA
            // ranks yet): the routing (global ids), then the pairs in this rank's ids (the
            // others' weights 0), then the MoE over the share alone.
            DSV4_ASSERT(a.T * a.k <= local_slots_, "moe: ", a.T * a.k,
                        " expert pairs on a rank (prepare_steps not called?)");
            if (a.route != nullptr) route(*a.route, nullptr);
            cuda::launch_moe_local_slots(a.sel, a.weight, a.T * a.k, a.experts->first, a.experts->E,
                                         local_sel_, local_weight_, cur());
            ops::ExpertWeights share = *a.experts;
            share.first = 0;
            ops::MoeArgs l = a;
            l.sel = local_sel_;
            l.weight = local_weight_;
            l.E = share.E;
            l.experts = &share;
            l.route = nullptr;
            moe(l);
            return;
        }
        const CudaExperts& ex = *static_cast<const CudaExperts*>(a.experts->impl);
        const int64_t P = a.T * a.k, D = a.D, I = a.I;
        const bool grouped = ex.has_gemv && ops::moe_grouped_by_expert(a.T, a.k, a.E);
        // One token (batch-1 decode): the k groups read x itself (no per-pair copy), and w2 adds
        // each expert's output times its routing weight straight into the output, which the
        // shared expert has written first (no combine). The sum's order differs from the
        // reference's (slot order, then the shared expert) by float rounding only.
        const bool direct = ex.has_gemv && !grouped && a.T == 1 && !a.act_fp8 && !a.round_bf16;
        // Decode batches of at least E / 3 pairs: one expert's pairs in groups of up to
        // kMoeDecodeGroupRows rows (tokens are the GEMV's MMA columns, so a group of 4 costs the
        // MMAs and the weight decoding of one row), the groups formed on the device and counted
        // there (GemvArgs::n_groups_dev): each expert's weights are read and decoded once a group
        // instead of once a pair. Measured at V4-Flash size (docs/perf.md, sessions 19 and
        // 20; pairs of 256 experts, a step): 192 pairs (batch 32) -12%, 120 (batch 20) -5%, 96
        // (batch 16) -2%, but 72 (batch 12) +1.2% and 48 (batch 8) +5.5% (few experts picked
        // twice there): hence the bound, between 72 and 96.
        const bool compact = ex.has_gemv && !grouped && !direct && !a.act_fp8 && !a.round_bf16 &&
                             3 * P >= a.E && moe_compact_;
        const int64_t n_groups = grouped ? (P + 15) / 16 + a.E : P;  // (compact: at most)
        const int m = grouped ? 16 : compact ? ops::kMoeDecodeGroupRows : 1;
        const int64_t R = n_groups * m;   // rows
        float* xr = a.routed_scratch;     // [R, D]: the inputs, later each row's output
        float* h13 = xr + R * D;          // [R, 2I]
        float* act = h13 + R * 2 * I;     // [R, I]
        float* row_weight = act + R * I;  // [R]
        int32_t* group_expert = reinterpret_cast<int32_t*>(row_weight + R);  // [n_groups]
        int32_t* pair_row = group_expert + R;                                // [P]
        int32_t* live = pair_row + P;  // [1] compact: the groups formed
        const int32_t* ids = grouped || compact ? group_expert : a.sel;
        const int32_t* row = grouped || compact ? pair_row : nullptr;
        const int32_t* n_live = compact ? live : nullptr;
        cudaStream_t s = cur();
        const bool stacked = direct && ex.shared_stacked && a.shared_w1 != nullptr;
        // The routing (MoeArgs::route) first; with the stacked shared expert below, its kernel
        // also writes the groups' ids and scales and clears h and out (cuda::MoePrep).
        const bool prep = stacked && a.route != nullptr && route_prepares_moe_;
        if (a.route != nullptr) {
            DSV4_ASSERT(a.route->sel == a.sel && a.route->weight == a.weight && a.route->T == a.T &&
                            a.route->k == a.k,
                        "moe: the routing must write this op's sel and weight");
            if (!prep) route(*a.route, nullptr);
        }
        if (stacked) {
            // ... and with the shared expert stacked as expert E, it is the (k+1)-th group of
            // the same two launches (scale 1): no launches of its own. The scratch's per-pair
            // input rows are unused here and hold the k + 1 rows' products.
            const int G = a.k + 1;
            float* h = a.routed_scratch;                           // [G, 2I]
            float* act1 = h + G * 2 * I;                           // [G, I]
            float* scale = act1 + G * I;                           // [G]
            int32_t* gid = reinterpret_cast<int32_t*>(scale + G);  // [G]
            DSV4_ASSERT(G * (3 * I + 2) <= ops::moe_routed_scratch_floats(1, a.k, a.E, a.D, a.I),
                        "moe scratch for the stacked shared expert");
            if (prep) {
                const cuda::MoePrep p{gid, scale, a.E, h, G * 2 * I, a.out, D};
                route(*a.route, &p);
            } else {
                cuda::launch_moe_ids_with_shared(a.sel, a.weight, a.k, a.E, gid, scale, h,
                                                 G * 2 * I, a.out, D, s);
            }
            const cuda::GemvArgs g13 = expert_gemv_args(ex.g13, a.x, D, 1, h, 2 * I, G, gid, 0);
            const cuda::GemvArgs g2 =
                expert_gemv_args(ex.g2, act1, I, 1, a.out, D, G, gid, -1, 0, scale);
            if (chain_takes(ex, G) && swiglu_chain(g13, g2, a.swiglu_limit)) return;
            cuda::launch_gemv(g13, {info_.sm_count}, s);
            cuda::launch_moe_swiglu({h, nullptr, act1, G, a.I, a.swiglu_limit}, s);
            cuda::launch_gemv(g2, {info_.sm_count}, s);
            return;
        }
        // Reference numerics: every expert reads x rounded to FP8 per 128 (in the FP8 copy
        // buffer until the shared expert's w2 needs it).
        const float* x = a.x;
        if (a.act_fp8) {
            DSV4_ASSERT(a.T * D <= act_floats_, "moe act_fp8 (prepare_steps not called?)");
            uses(kActCopies);
            cuda::launch_act_fp8_copy(a.x, D, act_, a.T, D, s);
            x = act_;
        }
        if (ex.has_gemv) {
            if (grouped) {
                cuda::launch_moe_group({a.sel, group_expert, pair_row, P, a.E, n_groups}, s);
                DSV4_CHECK_CUDA(cudaMemsetAsync(xr, 0, R * D * sizeof(float), s));
            }
            // (A group's rows past its pairs keep stale inputs: their outputs are not read.)
            if (compact)
                cuda::launch_moe_compact_groups({a.sel, group_expert, pair_row, live, P, a.E, m},
                                                s);
            if (direct && chain_takes(ex, n_groups)) {
                // The chain: h cleared here, the shared expert (or zeros) into the output first.
                DSV4_CHECK_CUDA(cudaMemsetAsync(h13, 0, n_groups * 2 * I * sizeof(float), s));
                if (a.shared_w1 != nullptr)
                    shared_expert_into(a, x, a.out);
                else
                    DSV4_CHECK_CUDA(cudaMemsetAsync(a.out, 0, D * sizeof(float), s));
                const cuda::GemvArgs g13 =
                    expert_gemv_args(ex.g13, x, D, 1, h13, 2 * I, n_groups, ids, 0);
                const cuda::GemvArgs g2 =
                    expert_gemv_args(ex.g2, act, I, 1, a.out, D, n_groups, ids, -1, 0, a.weight);
                const bool ran = swiglu_chain(g13, g2, a.swiglu_limit);
                DSV4_ASSERT(ran, "moe: the SwiGLU chain did not take the experts chain_takes took");
                return;
            }
            if (direct) {
                expert_gemv(ex.g13, x, D, m, h13, 2 * I, n_groups, ids, /*x_stride=*/0, -1, nullptr,
                            /*zero=*/true);
            } else {
                cuda::launch_expand_rows(x, row, xr, a.T, a.k, D, s);
                expert_gemv(ex.g13, xr, D, m, h13, 2 * I, n_groups, ids, -1, -1, nullptr,
                            /*zero=*/true, n_live);
            }
        } else {
            dense_experts(x, a.k, ex.w13, h13, P, 2 * I, D, a.sel);
        }
        // The bf16 reference mode rounds w1's and w3's outputs, the weighted SwiGLU output, each
        // w2 output and the sum (MoeArgs::round_bf16), in launches of their own.
        if (a.round_bf16) round_bf16_rows(h13, R, 2 * I);
        // Reference numerics (DeepSeek's order): the routing weight scales the SwiGLU output,
        // which is rounded to FP8 per 128 for w2 (in place: each warp reads its block first).
        const bool weighted_first = a.act_fp8 || a.round_bf16;
        const float* weight_first = nullptr;
        if (weighted_first) {
            weight_first = a.weight;
            if (grouped) {
                DSV4_CHECK_CUDA(cudaMemsetAsync(row_weight, 0, R * sizeof(float), s));
                cuda::launch_expand_rows(a.weight, pair_row, row_weight, P, 1, 1, s);
                weight_first = row_weight;
            }
        }
        cuda::launch_moe_swiglu({h13, weight_first, act, R, a.I, a.swiglu_limit}, s);
        if (a.round_bf16) round_bf16_rows(act, R, I);
        if (a.act_fp8) cuda::launch_act_fp8_copy(act, I, act, R, I, s);
        const float* shared = nullptr;
        auto shared_expert = [&](float* y) { shared_expert_into(a, x, y); };
        if (direct) {
            if (a.shared_w1 != nullptr)
                shared_expert(a.out);
            else
                DSV4_CHECK_CUDA(cudaMemsetAsync(a.out, 0, D * sizeof(float), s));
            expert_gemv(ex.g2, act, I, m, a.out, D, n_groups, ids, -1, /*y_stride=*/0, a.weight);
            return;
        }
        float* y2 = xr;
        if (ex.has_gemv) {
            expert_gemv(ex.g2, act, I, m, y2, D, n_groups, ids, -1, -1, nullptr, /*zero=*/true,
                        n_live);
        } else {
            dense_experts(act, 1, ex.w2, y2, P, D, I, a.sel);
        }
        if (a.round_bf16) round_bf16_rows(y2, R, D);
        if (a.shared_w1 != nullptr) {
            float* y = a.shared_scratch + 2 * a.T * I;
            shared_expert(y);
            shared = y;
        }
        cuda::launch_moe_combine({y2, weighted_first ? nullptr : a.weight, shared, a.out, a.T, a.k,
                                  D, row, a.round_bf16 ? a.sel : nullptr},
                                 s);
        if (a.round_bf16) round_bf16_rows(a.out, a.T, D);
    }
    // Ranks (docs/parallel.md): the rank group carries NCCL's unique id from rank 0 to the
    // others, then every rank joins the communicator on this backend's GPU (the engine picked
    // it: rank r on GPU r mod the GPUs visible). A group of one needs no communicator.
    Status set_collective(ops::Collective* c) override {
        DSV4_RETURN_IF_ERROR(Backend::set_collective(c));
        if (c == nullptr || c->size() == 1) return Status::ok();
        // Every rank here before any joins NCCL, whose join waits for every rank forever: a rank
        // that failed before this point (its device) fails this sum on the others instead (in
        // process it left the group; as a process its connections closed).
        float here = 1.0f;
        c->all_reduce_sum(&here, 1);
        DSV4_RETURN_IF_ERROR(c->status());
        const std::string id = c->shared_once([] {
            auto made = cuda::nccl_unique_id();
            return made ? *made : std::string();  // (every rank then fails on the empty id)
        });
        DSV4_RETURN_IF_ERROR(c->status());
        DSV4_ASSIGN_OR_RETURN(nccl_,
                              cuda::NcclComm::create(id, c->rank(), c->size(), stream_.get()));
        return Status::ok();
    }
    Status collective_status() const override {
        DSV4_RETURN_IF_ERROR(Backend::collective_status());
        return nccl_ != nullptr ? nccl_->status() : Status::ok();
    }
    void all_reduce_sum(float* x, int64_t n) override {
        DSV4_ASSERT(ranks() == 1 || nccl_ != nullptr, "CUDA all_reduce_sum: no communicator");
        if (nccl_ == nullptr) return;
        const auto prof = profile_.scope("all_reduce_sum", recording_);  // (the ranks' cost)
        nccl_->all_reduce_sum(x, n, cur());
    }
    DSV4_CUDA_OP(count_experts, CountExpertsArgs, launch_count_experts)
    DSV4_CUDA_OP(gather_rows, GatherRowsArgs, launch_gather_rows)
    void sample(const ops::SampleArgs& a) override {
        const auto prof = profile_.scope("sample", recording_);
        cuda::launch_sample(a, sample_ws_, cur());
    }
    void logprobs(const ops::LogprobsArgs& a) override {
        const auto prof = profile_.scope("logprobs", recording_);
        cuda::launch_logprobs(a, sample_ws_, cur());
    }
    DSV4_CUDA_OP(logits_rules, LogitsRulesArgs, launch_logits_rules)
    void scale(float* x, float s, int64_t n) override { cuda::launch_scale(x, s, n, cur()); }

    cudaStream_t stream() const { return stream_.get(); }

  private:
    // Whether the shared expert's GEMV weights have the routed experts' format and whole
    // 64-row quads, so that w1's then w3's tiles are exactly a w1|w3 slot.
    bool can_stack_shared(const SharedExpert& s, cuda::GemvFormat f, int64_t I, int64_t D) const {
        constexpr int64_t kQuadRows = cuda::kGemvRowBlock * cuda::kGemvQuad;
        if (s.w1 == nullptr || s.w3 == nullptr || s.w2 == nullptr || I % kQuadRows != 0 ||
            D % kQuadRows != 0)
            return false;
        auto fits = [&](const ops::Weight* w, int64_t n, int64_t k) {
            const CudaWeight& c = cuda_weight(w);
            return c.has_gemv && c.gemv.shape.format == f && c.gemv.shape.n == n &&
                   c.gemv.shape.k == k && c.gemv.shape.n_experts == 1;
        };
        return fits(s.w1, I, D) && fits(s.w3, I, D) && fits(s.w2, D, I);
    }

    // Copies the shared expert into slot E of the stacks (device to device, load time).
    void stack_shared(CudaExperts& ce, int E, const SharedExpert& s) {
        auto copy_into = [&](const cuda::GemvWeight& dst, const ops::Weight* const* parts,
                             int n_parts) {
            const cuda::GemvShape& d = dst.shape;
            auto* t = static_cast<uint8_t*>(const_cast<void*>(dst.tiles)) +
                      int64_t{E} * d.tiles_expert_bytes();
            auto* sc = dst.scales == nullptr
                           ? nullptr
                           : static_cast<uint8_t*>(const_cast<void*>(dst.scales)) +
                                 int64_t{E} * d.scales_expert_bytes();
            float* os = const_cast<float*>(dst.out_scale) + int64_t{E} * d.row_blocks();
            int64_t tb = 0, sb = 0, rb = 0;
            for (int i = 0; i < n_parts; ++i) {
                const cuda::GemvWeight& p = cuda_weight(parts[i]).gemv;
                copy(t + tb, p.tiles, static_cast<size_t>(p.shape.tiles_expert_bytes()));
                if (sc != nullptr)
                    copy(sc + sb, p.scales, static_cast<size_t>(p.shape.scales_expert_bytes()));
                copy(os + rb, p.out_scale, static_cast<size_t>(p.shape.row_blocks()) * 4);
                tb += p.shape.tiles_expert_bytes();
                sb += p.shape.scales_expert_bytes();
                rb += p.shape.row_blocks();
            }
            DSV4_ASSERT(tb == d.tiles_expert_bytes() && rb == d.row_blocks() &&
                            (sc == nullptr || sb == d.scales_expert_bytes()),
                        "shared expert slot: ", tb, " tile bytes of ", d.tiles_expert_bytes());
        };
        const ops::Weight* p13[] = {s.w1, s.w3};
        const ops::Weight* p2[] = {s.w2};
        copy_into(ce.g13, p13, 2);
        copy_into(ce.g2, p2, 1);
        stream_.synchronize();
        ce.shared_stacked = true;
    }

    // Keeps an expert stack (stable address) and returns its handle.
    ops::ExpertWeights keep_experts(const CudaExperts& ce, int E, int64_t I, int64_t D) {
        experts_.push_back(ce);
        ops::ExpertWeights out;
        out.E = E;
        out.I = static_cast<int>(I);
        out.D = static_cast<int>(D);
        out.impl = &experts_.back();
        return out;
    }

    // While recording: notes the first call that a step must not make, and skips it.
    bool broke_recording(const char* what) {
        if (!recording_) return false;
        if (breaker_ == nullptr) breaker_ = what;
        return true;
    }

    // y[g] += x[g] . W[ids[g]]^T for G groups of m rows each (accumulate mode: no split-K
    // workspace, so any G fits), or y[g] = with `zero` (a memset first, or y_zero).
    // Shared input (x_stride 0: every group reads the same rows) and a common output scaled by
    // group_scale[g] (y_stride 0) are the GEMV's own options; -1 keeps the dense layout.
    void expert_gemv(const cuda::GemvWeight& w, const float* x, int64_t ldx, int m, float* y,
                     int64_t ldy, int64_t G, const int32_t* ids, int64_t x_stride = -1,
                     int64_t y_stride = -1, const float* group_scale = nullptr, bool zero = false,
                     const int32_t* n_live = nullptr) {
        cuda::GemvArgs g =
            expert_gemv_args(w, x, ldx, m, y, ldy, G, ids, x_stride, y_stride, group_scale);
        // With groups counted on the device (n_live) the launch clears only those groups' y
        // itself (a memset would clear every possible group's).
        g.n_groups_dev = n_live;
        if (zero && gemv_memset_ && n_live == nullptr) {
            const int64_t sets = y_stride == 0 ? 1 : G;
            DSV4_CHECK_CUDA(cudaMemsetAsync(y, 0, static_cast<size_t>(sets * m * ldy) * 4, cur()));
        } else if (zero) {
            cuda::gemv_workspace_bind(gemv_ws_, gemv_ws_row_blocks_, &g);
            g.y_zero = true;
            uses(kGemvWorkspace);
        }
        cuda::launch_gemv(g, {info_.sm_count}, cur());
    }
    // A linear's GEMV arguments, its first 16 tokens (w.has_gemv; a grouped linear's N and row0
    // on 64-row quads). Groups are the GEMV's groups: group j is the weight's next N rows (an
    // "expert" of N rows), its x and y columns j*K and j*N. Output not cleared, no PDL.
    cuda::GemvArgs linear_gemv_args(const ops::LinearArgs& a, const CudaWeight& w) const {
        constexpr int64_t kQuadRows = cuda::kGemvRowBlock * cuda::kGemvQuad;
        cuda::GemvArgs g = gemv_rows(w.gemv, a.row0, a.N);
        if (a.groups > 1) {
            const int64_t quads = a.N / kQuadRows;
            g.n_groups = a.groups;
            g.w_tiles_expert_stride =
                quads * w.gemv.shape.k_tiles() * cuda::kGemvQuad * cuda::kGemvTileBytes;
            g.w_scales_expert_stride = quads * w.gemv.shape.k_tiles() * cuda::kGemvQuad *
                                       cuda::gemv_tile_scale_bytes(w.gemv.shape.format);
            g.x_group_stride = w.cols;
            g.y_group_stride = a.N;
        }
        g.x_f32 = a.x_type == ops::ActType::kF32;
        g.x_split = gemv_split_x_;
        g.y_bf16 = a.y_type == ops::ActType::kBF16;
        g.ldx = a.ldx ? a.ldx : w.cols * a.groups;
        g.ldy = a.ldy ? a.ldy : a.N * a.groups;
        g.m = static_cast<int32_t>(std::min<int64_t>(cuda::kGemvMaxM, a.M));
        g.x = a.x;
        g.y = a.y;
        return g;
    }
    // A linear and the one that reads its output (LinearArgs::then) as one launch, when the
    // chain is on and takes them: f32 in and out, up to 4 tokens, outputs cleared earlier in
    // the step, GEMV weights of one format; false: nothing run.
    bool linear_chain(const ops::LinearArgs& a, const ops::LinearArgs& b) {
        if (!linear_chain_ || !trust_y_cleared_) return false;
        const CudaWeight &wa = cuda_weight(a.w), &wb = cuda_weight(b.w);
        constexpr int64_t kQuadRows = cuda::kGemvRowBlock * cuda::kGemvQuad;
        const auto plain = [](const ops::LinearArgs& l) {
            return l.x_type == ops::ActType::kF32 && l.y_type == ops::ActType::kF32 && !l.act_fp8 &&
                   !l.round_bf16 && l.y_cleared && l.M >= 1 && l.M <= 4;
        };
        if (!plain(a) || !plain(b) || b.then != nullptr || !wa.has_gemv || !wb.has_gemv ||
            a.M != b.M || b.x != a.y || b.groups != 1 || a.N % kQuadRows != 0 ||
            a.row0 % kQuadRows != 0 || use_gemm(wa, a.M, a.N, a.groups) ||
            use_gemm(wb, b.M, b.N, b.groups))
            return false;
        cuda::GemvArgs ga = linear_gemv_args(a, wa), gb = linear_gemv_args(b, wb);
        for (cuda::GemvArgs* g : {&ga, &gb}) {
            g->y_accumulate = true;
            g->pdl = true;
        }
        const cuda::GemvChainArgs c{ga, gb, cuda::GemvChainLink::kRows, 0.0f, chain_ws_};
        if (!chain_fits(c)) return false;
        const auto prof = profile_.scope(linear_label(wa.role), recording_);
        launch_chain(c);
        ++linear_chain_runs_;
        return true;
    }
    // expert_gemv's arguments, accumulating into y as it is (no clearing).
    cuda::GemvArgs expert_gemv_args(const cuda::GemvWeight& w, const float* x, int64_t ldx, int m,
                                    float* y, int64_t ldy, int64_t G, const int32_t* ids,
                                    int64_t x_stride = -1, int64_t y_stride = -1,
                                    const float* group_scale = nullptr) {
        cuda::GemvArgs g = gemv_rows(w, 0, w.shape.n);
        g.n_groups = static_cast<int32_t>(G);
        g.expert_ids = ids;
        g.x = x;
        g.x_f32 = true;
        g.x_split = gemv_split_x_;
        g.m = m;
        g.ldx = ldx;
        g.x_group_stride = x_stride >= 0 ? x_stride : ldx * m;
        g.y = y;
        g.ldy = ldy;
        g.y_group_stride = y_stride >= 0 ? y_stride : ldy * m;
        g.y_accumulate = true;
        g.group_scale = group_scale;
        // PDL for one row per group (decode; ids are read after the GEMV's wait). Not for the
        // prefill's groups of 16 rows: the grouped MoE test failed for FP8 (E8M0) experts in the
        // one run with it, on other random weights too (docs/perf.md; cause not established).
        g.pdl = m == 1;
        return g;
    }
    // Whether a one-token MoE over these experts (G groups) may run as the SwiGLU chain.
    bool chain_takes(const CudaExperts& ex, int64_t G) const {
        const cuda::GemvFormat f = ex.g13.shape.format;
        return moe_chain_ && chain_ws_ != nullptr && ex.has_gemv && G <= kMaxChainCounts &&
               gemv_split_x_ && (f == cuda::GemvFormat::kNvfp4 || f == cuda::GemvFormat::kMxfp4);
    }
    // w1|w3 (into a cleared h), the clipped SwiGLU and w2 (into its output, cleared or holding
    // the shared expert's) as one launch; false: the chain does not take them, nothing run.
    // w2's activations are computed from h itself (its [gate | up] rows).
    bool swiglu_chain(const cuda::GemvArgs& g13, cuda::GemvArgs g2, float limit) {
        g2.x = g13.y;
        g2.ldx = g13.n;
        g2.x_group_stride = g13.y_group_stride;
        const cuda::GemvChainArgs c{g13, g2, cuda::GemvChainLink::kSwiglu, limit, chain_ws_};
        if (!chain_fits(c)) return false;
        launch_chain(c);
        ++moe_chain_runs_;
        return true;
    }
    // A linear's GEMV grid: on the main line beside a branch that holds a GEMV of its own
    // (CSA's wq_b beside the indexer's q GEMV and top-k), at most branch_gemv_ctas_ CTAs an SM
    // (0: no cap), so that the branch's kernels find room on the SMs.
    cuda::GemvLaunchConfig gemv_config() const {
        cuda::GemvLaunchConfig c{info_.sm_count};
        if (branch_pending_ && branch_gemv_) c.ctas_per_sm = branch_gemv_ctas_;
        return c;
    }
    // Whether one launch takes the two GEMVs (gemv_chain.h), with this backend's workspace.
    bool chain_fits(const cuda::GemvChainArgs& c) const {
        return chain_ws_ != nullptr && !in_branch_ &&
               cuda::gemv_chain_counts(c) <= kMaxChainCounts && cuda::gemv_chain_supports(c);
    }
    void launch_chain(const cuda::GemvChainArgs& c) {
        cuda::launch_gemv_chain(c, {info_.sm_count, 0, 0, chain_depth_}, cur());
    }
    // The shared expert's three linears and SwiGLU on T rows of x, into y (written, not added).
    void shared_expert_into(const ops::MoeArgs& a, const float* x, float* y) {
        const int64_t I = a.I, D = a.D;
        float* g = a.shared_scratch;
        float* u = g + a.T * I;
        const ops::ActType f32 = ops::ActType::kF32;
        const bool r = a.round_bf16;
        // (x is already rounded under act_fp8.)
        linear({x, a.shared_w1, g, a.T, I, 0, 0, 0, f32, f32, false, r});
        linear({x, a.shared_w3, u, a.T, I, 0, 0, 0, f32, f32, false, r});
        swiglu({g, u, g, a.T * I, a.swiglu_limit});
        if (r) round_bf16_rows(g, a.T, I);
        linear({g, a.shared_w2, y, a.T, D, 0, 0, 0, f32, f32, a.act_fp8, r});
    }

    // y[p] = x[p / x_div] . W[sel[p]]^T for P rows, W a dense f32 stack [E][N][K].
    void dense_experts(const float* x, int x_div, const void* w, float* y, int64_t P, int64_t N,
                       int64_t K, const int32_t* sel) {
        cuda::DenseLinearArgs d;
        d.x = x;
        d.w = w;
        d.y = y;
        d.M = P;
        d.N = N;
        d.K = K;
        d.ldx = K;
        d.ldy = N;
        d.w_ids = sel;
        d.w_stride = N * K;
        d.x_div = x_div;
        cuda::launch_dense_linear(d, cur());
    }

    // Host-to-device copy waited for (load time: the host buffer is reused next).
    void upload_sync(void* dst, const void* src, size_t bytes) {
        upload(dst, src, bytes);
        stream_.synchronize();
    }

    // Any format as an f32 dense copy (dequant_row is exact in f32).
    Expected<const void*> upload_dequantized(const QuantWeight& w) {
        DSV4_ASSIGN_OR_RETURN(void* p, try_alloc(static_cast<size_t>(w.rows * w.cols) * 4));
        std::vector<float> host(static_cast<size_t>(w.rows * w.cols));
        for (int64_t r = 0; r < w.rows; ++r) dequant_row(w, r, host.data() + r * w.cols);
        upload_sync(p, host.data(), host.size() * 4);
        return static_cast<const void*>(p);
    }

    // Repacks parts (gemv_repack) and copies the tiles, scales and row-block scales to the
    // device; grows the plain-mode GEMV workspace to the largest weight seen (load time).
    // `extra` more expert slots are allocated after the uploaded ones (filled by the caller).
    Expected<cuda::GemvWeight> upload_gemv(const QuantWeight* const* parts, int n_experts,
                                           int parts_per_expert, int extra = 0) {
        DSV4_ASSIGN_OR_RETURN(cuda::GemvPacked p,
                              cuda::gemv_repack(parts, n_experts, parts_per_expert));
        cuda::GemvWeight g;
        g.shape = p.shape;
        g.shape.n_experts += extra;
        const size_t slots = static_cast<size_t>(g.shape.n_experts);
        DSV4_ASSIGN_OR_RETURN(void* tiles,
                              try_alloc(static_cast<size_t>(g.shape.tiles_expert_bytes()) * slots));
        upload_sync(tiles, p.tiles.data(), p.tiles.size());
        g.tiles = tiles;
        if (!p.scales.empty()) {
            DSV4_ASSIGN_OR_RETURN(
                void* sc, try_alloc(static_cast<size_t>(g.shape.scales_expert_bytes()) * slots));
            upload_sync(sc, p.scales.data(), p.scales.size());
            g.scales = sc;
        }
        DSV4_ASSIGN_OR_RETURN(
            void* os, try_alloc(static_cast<size_t>(g.shape.row_blocks()) * slots * sizeof(float)));
        upload_sync(os, p.out_scale.data(), p.out_scale.size() * sizeof(float));
        g.out_scale = static_cast<const float*>(os);
        DSV4_RETURN_IF_ERROR(reserve_gemv_workspace(p.shape.row_blocks()));
        return g;
    }
    // The GEMV chains' counts, with the first GEMV weight (fixed size; one chain runs at a time,
    // on the main line).
    Status reserve_chain_workspace() {
        if (chain_ws_ != nullptr) return Status::ok();
        DSV4_ASSIGN_OR_RETURN(void* p,
                              try_alloc(cuda::gemv_chain_workspace_bytes(kMaxChainCounts)));
        chain_ws_ = static_cast<uint32_t*>(p);
        return Status::ok();
    }
    // The split-K workspace of plain-mode launches, for weights of up to `rb` row blocks (and
    // the chains' counts).
    Status reserve_gemv_workspace(int64_t rb) {
        DSV4_RETURN_IF_ERROR(reserve_chain_workspace());
        if (rb <= gemv_ws_row_blocks_) return Status::ok();
        DSV4_ASSIGN_OR_RETURN(void* ws, try_alloc(cuda::gemv_workspace_bytes(rb)));
        free(gemv_ws_);
        gemv_ws_ = ws;
        gemv_ws_row_blocks_ = rb;
        return Status::ok();
    }

    // E random [n, k] matrices in the GEMV layout (synth_experts). The scale codes decode to
    // synth_weight.h's block scales: NVFP4's E4M3 range [kSynthNvfp4ScaleLo, Hi] through
    // nvfp4_scale_code, times the global scale; MXFP4's exponents e-1..e+1 shifted as the
    // repack shifts them (gemv_repack.h).
    Expected<cuda::GemvWeight> synth_gemv(cuda::GemvFormat f, int64_t n, int64_t k, int E,
                                          uint64_t seed) {
        cuda::GemvWeight g;
        g.shape = {f, n, k, E};
        const size_t tiles = static_cast<size_t>(g.shape.tiles_expert_bytes()) * E;
        const size_t scales = static_cast<size_t>(g.shape.scales_expert_bytes()) * E;
        const int64_t blocks = g.shape.row_blocks() * E;
        DSV4_ASSIGN_OR_RETURN(void* t, try_alloc(tiles));
        DSV4_ASSIGN_OR_RETURN(void* sc, try_alloc(scales));
        DSV4_ASSIGN_OR_RETURN(void* os, try_alloc(static_cast<size_t>(blocks) * sizeof(float)));
        cudaStream_t s = stream_.get();
        cuda::launch_synth_bytes(t, static_cast<int64_t>(tiles), seed, 0, 0, s);
        float out_scale = 0;
        if (f == cuda::GemvFormat::kNvfp4) {
            const uint32_t lo = cuda::nvfp4_scale_code(kSynthNvfp4ScaleLo),
                           hi = cuda::nvfp4_scale_code(kSynthNvfp4ScaleHi);
            cuda::launch_synth_bytes(sc, static_cast<int64_t>(scales), ~seed, lo, hi - lo + 1, s);
            out_scale = cuda::fp4_out_scale(cuda::kNvfp4ScaleExp, synth_nvfp4_global(k));
        } else {
            const int e_max = synth_mxfp4_exponent(k) + 1, c = cuda::mxfp4_code_shift(e_max);
            cuda::launch_synth_bytes(sc, static_cast<int64_t>(scales), ~seed,
                                     static_cast<uint32_t>(e_max - 2 + c), 3, s);
            out_scale = cuda::fp4_out_scale(c, 1.0f);
        }
        cuda::launch_fill(static_cast<float*>(os), out_scale, blocks, s);
        stream_.synchronize();
        g.tiles = t;
        g.scales = sc;
        g.out_scale = static_cast<const float*>(os);
        return g;
    }

    // The tensor-core linear: its scratch (64 MiB of decoded weight rows, 2 x 32 MiB of x's bf16
    // hi / lo, cuBLAS's 32 MiB workspace) and handle, made by prepare_steps.
    Status start_gemm() {
        cuda::GemmScratch s;
        s.w_elems = int64_t{32} << 20;
        s.x_elems = int64_t{16} << 20;
        s.cublas_ws_bytes = size_t{32} << 20;
        DSV4_ASSIGN_OR_RETURN(void* w, try_alloc(static_cast<size_t>(s.w_elems) * 2));
        DSV4_ASSIGN_OR_RETURN(void* x, try_alloc(static_cast<size_t>(s.x_elems) * 4));
        DSV4_ASSIGN_OR_RETURN(void* misc, try_alloc(64));
        DSV4_ASSIGN_OR_RETURN(s.cublas_ws, try_alloc(s.cublas_ws_bytes));
        s.w = static_cast<uint16_t*>(w);
        s.x_hi = static_cast<uint16_t*>(x);
        s.x_lo = s.x_hi + s.x_elems;
        s.scalars = static_cast<float*>(misc);
        gemm_flag_ = reinterpret_cast<int*>(s.scalars + 4);
        DSV4_ASSIGN_OR_RETURN(gemm_, cuda::GemmLinear::create(s, stream_.get()));
        return Status::ok();
    }
    // The tensor-core path takes a linear of at least gemm_min_rows_ rows (M) over a weight it
    // reproduces exactly, when its scratch takes the product (N rows a group).
    bool use_gemm(const CudaWeight& w, int64_t M, int64_t N, int groups) const {
        return gemm_.ready() && gemm_min_rows_ > 0 && M >= gemm_min_rows_ && w.has_gemv &&
               w.gemm_exact && gemm_.fits(w.gemv.shape, N, groups);
    }

    cuda::DeviceInfo info_;
    cuda::CudaStream stream_;
    std::unordered_map<void*, size_t> blocks_;
    size_t in_use_ = 0;
    std::deque<CudaWeight> weights_;  // stable addresses for the handles
    std::deque<CudaExperts> experts_;
    void* gemv_ws_ = nullptr;   // plain-mode GEMV workspace (zeroed; launches leave it zero)
    bool f32_weights_ = false;  // DSV4_CUDA_F32_WEIGHTS
    // DSV4_CUDA_GEMM_MIN_ROWS. docs/perf.md ("Prefill on tensor cores"): the GEMV was faster at
    // 64 and 128 rows (decode batches), the tensor-core path at 512 (prefill chunks).
    int64_t gemm_min_rows_ = 256;
    cuda::GemmLinear gemm_;
    int* gemm_flag_ = nullptr;  // [1] gemm_exact's answer
    int64_t gemm_runs_ = 0;     // cuda_gemm_runs
    int64_t max_cols_ = 0;      // widest K of the weights uploaded
    float* act_ = nullptr;      // [max_rows, max_cols_] FP8 activation copies (prepare_steps)
    cuda::HcScratch hc_ws_;     // mHC mixing partials and counters (prepare_steps)
    cuda::IndexerScratch indexer_ws_;  // the decode indexer's scores, counters (prepare_steps)
    cuda::AttentionScratch attn_ws_;   // the decode attention's partials (prepare_steps)
    cuda::SampleScratch sample_ws_;    // the sampler's split first pass (prepare_steps)
    bool attn_split_ = true;           // false: DSV4_CUDA_ATTN_SPLIT=0 (cuda_set_attention_split)
    int64_t attn_split_runs_ = 0;      // cuda_attention_split_runs
    int64_t act_floats_ = 0;
    int64_t gemv_ws_row_blocks_ = 0;
    bool gemv_memset_ = true;          // false: DSV4_CUDA_GEMV_ZERO
    bool trust_y_cleared_ = true;      // false: DSV4_CUDA_Y_CLEARED=0
    bool ring_in_attention_ = true;    // false: DSV4_CUDA_RING_IN_ATTN=0
    bool route_prepares_moe_ = true;   // false: DSV4_CUDA_ROUTE_PREPARES_MOE=0
    bool branches_ = true;             // false: DSV4_CUDA_BRANCHES=0
    bool gemv_split_x_ = true;         // false: DSV4_CUDA_GEMV_SPLIT_X=0
    bool moe_compact_ = true;          // false: DSV4_CUDA_MOE_COMPACT=0
    bool moe_chain_ = false;           // true: DSV4_CUDA_MOE_CHAIN=1
    int branch_gemv_ctas_ = 2;         // DSV4_CUDA_BRANCH_GEMV_CTAS (0: no cap)
    bool branch_gemv_ = false;         // the open or pending branch launched a GEMV
    bool linear_chain_ = false;        // true: DSV4_CUDA_LINEAR_CHAIN=1
    int chain_depth_ = 2;              // DSV4_CUDA_CHAIN_DEPTH
    int64_t moe_chain_runs_ = 0;       // cuda_moe_chain_runs
    int64_t linear_chain_runs_ = 0;    // cuda_linear_chain_runs
    uint32_t* chain_ws_ = nullptr;     // the GEMV chains' counts (zeroed; left zero)
    bool hc_cluster_ = true;           // false: DSV4_CUDA_HC_CLUSTER=0
    bool attn_merge_cluster_ = true;   // false: DSV4_CUDA_ATTN_MERGE_CLUSTER=0
    bool attn_norm_in_kernel_ = true;  // false: DSV4_CUDA_ATTN_QNORM=0
    int32_t* local_sel_ = nullptr;     // [local_slots_] a share's pairs in its expert ids
    float* local_weight_ = nullptr;    // [local_slots_] (in the same allocation)
    int64_t local_slots_ = 0;
    cuda::CudaStream side_;  // the branches' stream
    cudaEvent_t fork_ = nullptr, join_ = nullptr, resume_ = nullptr;
    bool in_branch_ = false, branch_pending_ = false;
    bool paused_ = false;       // a branch paused (branch_pause): its ops so far on side_
    unsigned branch_uses_ = 0;  // Scratch bits the open or pending branch used
    TransferCounts counts_;
    OpProfile profile_;
    bool recording_ = false;
    const char* breaker_ = nullptr;         // the first forbidden call while recording
    std::unique_ptr<cuda::NcclComm> nccl_;  // with ranks: this rank's communicator
};

#undef DSV4_CUDA_OP

}  // namespace

int cuda_device_count() {
    if (!cuda::gpu_available()) return 0;
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

Expected<std::unique_ptr<Backend>> make_cuda_backend(int device) {
    if (!cuda::gpu_available()) return error("CUDA backend: no usable CUDA device");
    DSV4_ASSIGN_OR_RETURN(cuda::DeviceInfo info, cuda::query_device(device));
    DSV4_CHECK_CUDA(cudaSetDevice(device));
    auto be = std::make_unique<CudaBackend>(std::move(info));
    // Scratch for steps of up to kDefaultStepRows rows until a model asks for more.
    DSV4_RETURN_IF_ERROR(be->prepare_steps(kDefaultStepRows));
    return std::unique_ptr<Backend>(std::move(be));
}

int64_t cuda_gemm_runs(const Backend& b) {
    const auto* cb = dynamic_cast<const CudaBackend*>(&b);
    DSV4_ASSERT(cb != nullptr, "not a CUDA backend");
    return cb->gemm_runs();
}

int64_t cuda_attention_split_runs(const Backend& b) {
    const auto* cb = dynamic_cast<const CudaBackend*>(&b);
    DSV4_ASSERT(cb != nullptr, "not a CUDA backend");
    return cb->attention_split_runs();
}

void cuda_set_attention_split(Backend& b, bool on) {
    auto* cb = dynamic_cast<CudaBackend*>(&b);
    DSV4_ASSERT(cb != nullptr, "not a CUDA backend");
    cb->set_attention_split(on);
}

void cuda_set_moe_compact(Backend& b, bool on) {
    auto* cb = dynamic_cast<CudaBackend*>(&b);
    DSV4_ASSERT(cb != nullptr, "not a CUDA backend");
    cb->set_moe_compact(on);
}

void cuda_set_moe_chain(Backend& b, bool on) {
    auto* cb = dynamic_cast<CudaBackend*>(&b);
    DSV4_ASSERT(cb != nullptr, "not a CUDA backend");
    cb->set_moe_chain(on);
}

int64_t cuda_moe_chain_runs(const Backend& b) {
    const auto* cb = dynamic_cast<const CudaBackend*>(&b);
    DSV4_ASSERT(cb != nullptr, "not a CUDA backend");
    return cb->moe_chain_runs();
}

void cuda_set_linear_chain(Backend& b, bool on) {
    auto* cb = dynamic_cast<CudaBackend*>(&b);
    DSV4_ASSERT(cb != nullptr, "not a CUDA backend");
    cb->set_linear_chain(on);
}

int64_t cuda_linear_chain_runs(const Backend& b) {
    const auto* cb = dynamic_cast<const CudaBackend*>(&b);
    DSV4_ASSERT(cb != nullptr, "not a CUDA backend");
    return cb->linear_chain_runs();
}

void cuda_set_attention_merge_cluster(Backend& b, bool on) {
    auto* cb = dynamic_cast<CudaBackend*>(&b);
    DSV4_ASSERT(cb != nullptr, "not a CUDA backend");
    cb->set_attention_merge_cluster(on);
}

void cuda_set_hc_cluster(Backend& b, bool on) {
    auto* cb = dynamic_cast<CudaBackend*>(&b);
    DSV4_ASSERT(cb != nullptr, "not a CUDA backend");
    cb->set_hc_cluster(on);
}

Expected<std::pair<cuda::GemvPacked, cuda::GemvPacked>> cuda_download_experts(
    Backend& b, const ops::ExpertWeights& w) {
    DSV4_ASSERT(dynamic_cast<CudaBackend*>(&b) != nullptr, "not a CUDA backend");
    const CudaExperts& ce = *static_cast<const CudaExperts*>(w.impl);
    if (!ce.has_gemv) return error("dense experts have no GEMV layout");
    auto get = [&](const cuda::GemvWeight& g) {
        cuda::GemvPacked p;
        p.shape = g.shape;
        p.tiles.resize(static_cast<size_t>(g.shape.tiles_expert_bytes()) * g.shape.n_experts);
        p.scales.resize(static_cast<size_t>(g.shape.scales_expert_bytes()) * g.shape.n_experts);
        p.out_scale.resize(static_cast<size_t>(g.shape.row_blocks()) * g.shape.n_experts);
        b.download(p.tiles.data(), g.tiles, p.tiles.size());
        if (!p.scales.empty()) b.download(p.scales.data(), g.scales, p.scales.size());
        b.download(p.out_scale.data(), g.out_scale, p.out_scale.size() * sizeof(float));
        b.synchronize();
        return p;
    };
    return std::make_pair(get(ce.g13), get(ce.g2));
}

cudaStream_t cuda_backend_stream(Backend& b) {
    auto* cb = dynamic_cast<CudaBackend*>(&b);
    DSV4_ASSERT(cb != nullptr, "cuda_backend_stream: the ", b.name(), " backend has no stream");
    return cb->stream();
}

}  // namespace dsv4
