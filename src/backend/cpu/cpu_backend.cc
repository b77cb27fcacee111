#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/ref/ref_ops.h"

namespace dsv4 {
namespace {

class CpuBackend final : public Backend {
  public:
    const char* name() const override { return "cpu"; }

    void* alloc(size_t bytes) override {
        const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
        void* p = std::aligned_alloc(64, rounded);
        DSV4_ASSERT(p != nullptr, "out of host memory allocating ", bytes, " bytes");
        std::memset(p, 0, rounded);
        blocks_.emplace_back(p);
        return p;
    }
    void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
    void download(void* dst, const void* src, size_t bytes) override {
        std::memcpy(dst, src, bytes);
    }
    void fill(float* dst, float value, int64_t n) override { std::fill(dst, dst + n, value); }
    QuantWeight upload_weight(const QuantWeight& w) override { return w; }
    void synchronize() override {}

    void embed(const ops::EmbedArgs& a) override { cpu_ref::embed(a); }
    void linear(const ops::LinearArgs& a) override { cpu_ref::linear(a); }
    void swiglu(const ops::SwigluArgs& a) override { cpu_ref::swiglu(a); }
    void rms_norm(const ops::RmsNormArgs& a) override { cpu_ref::rms_norm(a); }
    void rope(const ops::RopeArgs& a) override { cpu_ref::rope(a); }
    void hc_pre(const ops::HcPreArgs& a) override { cpu_ref::hc_pre(a); }
    void hc_post(const ops::HcPostArgs& a) override { cpu_ref::hc_post(a); }
    void hc_head(const ops::HcHeadArgs& a) override { cpu_ref::hc_head(a); }
    void attention(const ops::AttentionArgs& a) override { cpu_ref::attention(a); }
    void ring_write(const ops::RingWriteArgs& a) override { cpu_ref::ring_write(a); }
    void compress(const ops::CompressArgs& a) override { cpu_ref::compress(a); }
    void indexer_topk(const ops::IndexerTopkArgs& a) override { cpu_ref::indexer_topk(a); }
    void route(const ops::RouteArgs& a) override { cpu_ref::route(a); }
    void moe(const ops::MoeArgs& a) override { cpu_ref::moe(a); }
    void add(float* y, const float* x, int64_t n) override {
        for (int64_t i = 0; i < n; ++i) y[i] += x[i];
    }
    void scale(float* x, float s, int64_t n) override {
        for (int64_t i = 0; i < n; ++i) x[i] *= s;
    }

  private:
    struct Free {
        void operator()(void* p) const { std::free(p); }
    };
    std::vector<std::unique_ptr<void, Free>> blocks_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() {
    return std::make_unique<CpuBackend>();
}

}  // namespace dsv4
