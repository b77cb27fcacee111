// The op table a backend implements. Pointers passed to ops are backend memory (host memory
// for the CPU backend, device memory for CUDA); the host never reads them inside a forward
// step, so a step can later be captured as one CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "formats/quant_weight.h"
#include "ops/attention.h"
#include "ops/compressor.h"
#include "ops/embed.h"
#include "ops/hyper_conn.h"
#include "ops/indexer.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace dsv4 {

class Backend {
  public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;

    // Memory lives as long as the backend. Allocation happens at load/setup only.
    virtual void* alloc(size_t bytes) = 0;
    template <typename T>
    T* alloc_array(int64_t n) {
        return static_cast<T*>(alloc(static_cast<size_t>(n) * sizeof(T)));
    }
    virtual void upload(void* dst, const void* src, size_t bytes) = 0;
    virtual void download(void* dst, const void* src, size_t bytes) = 0;
    virtual void fill(float* dst, float value, int64_t n) = 0;
    // Makes a weight usable by the ops (the CPU backend reads the mapped file in place).
    virtual QuantWeight upload_weight(const QuantWeight& w) = 0;
    // Waits for queued work (a no-op on the CPU).
    virtual void synchronize() = 0;

    virtual void embed(const ops::EmbedArgs& a) = 0;
    virtual void linear(const ops::LinearArgs& a) = 0;
    virtual void swiglu(const ops::SwigluArgs& a) = 0;
    virtual void rms_norm(const ops::RmsNormArgs& a) = 0;
    virtual void rope(const ops::RopeArgs& a) = 0;
    virtual void hc_pre(const ops::HcPreArgs& a) = 0;
    virtual void hc_post(const ops::HcPostArgs& a) = 0;
    virtual void hc_head(const ops::HcHeadArgs& a) = 0;
    virtual void attention(const ops::AttentionArgs& a) = 0;
    virtual void ring_write(const ops::RingWriteArgs& a) = 0;
    virtual void compress(const ops::CompressArgs& a) = 0;
    virtual void indexer_topk(const ops::IndexerTopkArgs& a) = 0;
    virtual void route(const ops::RouteArgs& a) = 0;
    virtual void moe(const ops::MoeArgs& a) = 0;
    // y += x (n elements).
    virtual void add(float* y, const float* x, int64_t n) = 0;
    // x *= s (n elements).
    virtual void scale(float* x, float s, int64_t n) = 0;
};

}  // namespace dsv4
