#include "backend/cpu/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <string>
#include <unordered_map>

#include "backend/cpu/ref/ref_ops.h"

namespace dsv4 {
namespace {

// MemAvailable from /proc/meminfo (what can be taken without swapping), else free pages.
size_t host_memory_available() {
    std::ifstream f("/proc/meminfo");
    std::string key;
    size_t kib = 0;
    std::string unit;
    while (f >> key >> kib >> unit)
        if (key == "MemAvailable:") return kib * 1024;
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

class CpuBackend final : public Backend {
  public:
    const char* name() const override { return "cpu"; }

    Expected<void*> try_alloc(size_t bytes) override {
        const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
        // Checked first: with overcommit a too-large allocation "succeeds" and the process is
        // killed later when the pages are touched.
        const size_t avail = host_memory_available();
        if (rounded > avail)
            return error("out of host memory: need ", rounded / 1048576.0, " MiB more, ",
                         avail / 1048576.0, " MiB available");
        void* p = std::aligned_alloc(64, rounded);
        if (p == nullptr) return error("out of host memory allocating ", bytes, " bytes");
        std::memset(p, 0, rounded);
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
        std::free(p);
    }
    size_t memory_available() const override { return host_memory_available(); }
    size_t memory_in_use() const override { return in_use_; }

    // Zero bytes may come with null pointers (an empty host vector: a step that samples and
    // reads no logits, e.g. a prompt chunk that is not the last); memcpy must not see those.
    void upload(void* dst, const void* src, size_t bytes) override { copy_bytes(dst, src, bytes); }
    void download(void* dst, const void* src, size_t bytes) override {
        copy_bytes(dst, src, bytes);
    }
    void copy(void* dst, const void* src, size_t bytes) override { copy_bytes(dst, src, bytes); }
    static void copy_bytes(void* dst, const void* src, size_t bytes) {
        if (bytes != 0) std::memcpy(dst, src, bytes);
    }
    void fill(float* dst, float value, int64_t n) override { std::fill(dst, dst + n, value); }
    void synchronize() override {}

    // The mapped checkpoint is read in place: a handle points at a kept copy of the view.
    Expected<ops::Weight> upload_weight(const QuantWeight& w,
                                        const ops::WeightPlacement&) override {
        weights_.push_back(w);
        return cpu_ref::wrap(weights_.back());
    }
    Expected<ops::ExpertWeights> upload_experts(const QuantWeight* w1, const QuantWeight* w3,
                                                const QuantWeight* w2, int E,
                                                const ops::WeightPlacement&,
                                                const SharedExpert&) override {
        DSV4_ASSERT(E > 0, E);
        experts_.emplace_back();
        cpu_ref::CpuExperts& e = experts_.back();
        e.w1.assign(w1, w1 + E);
        e.w3.assign(w3, w3 + E);
        e.w2.assign(w2, w2 + E);
        return cpu_ref::wrap(e, static_cast<int>(w1[0].rows), static_cast<int>(w1[0].cols));
    }

    void embed(const ops::EmbedArgs& a) override { cpu_ref::embed(a); }
    void linear(const ops::LinearArgs& a) override { cpu_ref::linear(a); }
    void linear_group(const ops::LinearGroupArgs& a) override { cpu_ref::linear_group(a); }
    void swiglu(const ops::SwigluArgs& a) override { cpu_ref::swiglu(a); }
    void rms_norm(const ops::RmsNormArgs& a) override { cpu_ref::rms_norm(a); }
    void rope(const ops::RopeArgs& a) override { cpu_ref::rope(a); }
    void hc_pre(const ops::HcPreArgs& a) override { cpu_ref::hc_pre(a); }
    void hc_post(const ops::HcPostArgs& a) override { cpu_ref::hc_post(a); }
    void hc_head(const ops::HcHeadArgs& a) override { cpu_ref::hc_head(a); }
    void add_to_streams(const ops::AddToStreamsArgs& a) override { cpu_ref::add_to_streams(a); }
    void attention(const ops::AttentionArgs& a) override { cpu_ref::attention(a); }
    void ring_write(const ops::RingWriteArgs& a) override { cpu_ref::ring_write(a); }
    void compress(const ops::CompressArgs& a) override { cpu_ref::compress(a); }
    void indexer_topk(const ops::IndexerTopkArgs& a) override { cpu_ref::indexer_topk(a); }
    void router(const ops::RouterArgs& a) override { cpu_ref::router(a); }
    void moe(const ops::MoeArgs& a) override { cpu_ref::moe(a); }
    void gather_rows(const ops::GatherRowsArgs& a) override { cpu_ref::gather_rows(a); }
    void sample(const ops::SampleArgs& a) override { cpu_ref::sample(a); }
    void logprobs(const ops::LogprobsArgs& a) override { cpu_ref::logprobs(a); }
    void logits_rules(const ops::LogitsRulesArgs& a) override { cpu_ref::logits_rules(a); }
    void round_trip(const ops::RoundTripArgs& a) override { cpu_ref::round_trip(a); }
    void count_experts(const ops::CountExpertsArgs& a) override {
        for (int64_t i = 0; i < a.n; ++i) {
            DSV4_ASSERT(a.sel[i] >= 0 && a.sel[i] < a.E, "expert id ", a.sel[i]);
            ++a.counts[a.sel[i]];
        }
    }
    void scale(float* x, float s, int64_t n) override {
        for (int64_t i = 0; i < n; ++i) x[i] *= s;
    }

    ~CpuBackend() override {
        for (auto& [p, bytes] : blocks_) std::free(p);
    }

  private:
    std::unordered_map<void*, size_t> blocks_;
    size_t in_use_ = 0;
    std::deque<QuantWeight> weights_;  // stable addresses for the handles
    std::deque<cpu_ref::CpuExperts> experts_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
    return std::make_unique<CpuBackend>();
}

}  // namespace dsv4
