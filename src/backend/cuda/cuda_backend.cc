#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <deque>
#include <unordered_map>

#include "backend/cuda/common/check.cuh"
#include "backend/cuda/common/device.h"
#include "backend/cuda/common/stream.h"
#include "backend/cuda/kernels/attention/attention.h"
#include "backend/cuda/kernels/basic/basic.h"
#include "backend/cuda/kernels/compressor/compress.h"
#include "backend/cuda/kernels/hyper_conn/hyper_conn.h"
#include "backend/cuda/kernels/indexer/indexer_topk.h"
#include "backend/cuda/kernels/moe/route.h"
#include "backend/cuda/kernels/quant/round_trip.h"
#include "backend/cuda/kernels/sample/sample.h"
#include "base/check.h"

namespace dsv4 {
namespace {

constexpr size_t kAlign = 256;

// What a Weight handle's impl points at: a dense tensor on the device, as stored.
struct DenseWeight {
    DType dtype = DType::kF32;   // kF32 or kBF16
    const void* data = nullptr;  // [rows, cols]
    int64_t rows = 0, cols = 0;
};

const DenseWeight& dense(const ops::Weight* w) {
    DSV4_ASSERT(w != nullptr && w->valid(), "CUDA op given an empty weight");
    return *static_cast<const DenseWeight*>(w->impl);
}

class CudaBackend final : public Backend {
  public:
    explicit CudaBackend(cuda::DeviceInfo info)
        : info_(std::move(info)), stream_(cuda::CudaStream::create()) {}

    ~CudaBackend() override {
        stream_.synchronize();
        for (auto& [p, bytes] : blocks_) cudaFree(p);  // teardown: errors have nowhere to go
    }

    const char* name() const override { return "cuda"; }

    Expected<void*> try_alloc(size_t bytes) override {
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
        if (bytes == 0) return;
        DSV4_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.get()));
        cudaPointerAttributes attr{};
        DSV4_CHECK_CUDA(cudaPointerGetAttributes(&attr, src));
        if (attr.type == cudaMemoryTypeHost) stream_.synchronize();
    }
    // Completes by synchronize() at the latest (pageable: when the call returns).
    void download(void* dst, const void* src, size_t bytes) override {
        if (bytes == 0) return;
        DSV4_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_.get()));
    }
    void copy(void* dst, const void* src, size_t bytes) override {
        if (bytes == 0) return;
        DSV4_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_.get()));
    }
    void fill(float* dst, float value, int64_t n) override {
        cuda::launch_fill(dst, value, n, stream_.get());
    }
    void synchronize() override { stream_.synchronize(); }

    Expected<ops::Weight> upload_weight(const QuantWeight& w,
                                        const ops::WeightPlacement&) override {
        if (w.format != WeightFormat::kDense || (w.dtype != DType::kF32 && w.dtype != DType::kBF16))
            return error("CUDA backend: ", weight_format_name(w.format), " ", dtype_name(w.dtype),
                         " weights are not supported yet (dense F32/BF16 only; issue #11)");
        const size_t bytes = w.nbytes();
        DSV4_ASSIGN_OR_RETURN(void* p, try_alloc(bytes));
        upload(p, w.data, bytes);
        weights_.push_back({w.dtype, p, w.rows, w.cols});
        return ops::Weight{w.rows, w.cols, &weights_.back()};
    }
    Expected<ops::ExpertWeights> upload_experts(const QuantWeight*, const QuantWeight*,
                                                const QuantWeight*, int,
                                                const ops::WeightPlacement&) override {
        return error(
            "CUDA backend: routed experts (the MoE op) are not implemented yet (issue #11)");
    }

    void embed(const ops::EmbedArgs& a) override {
        const DenseWeight& t = dense(a.table);
        cuda::launch_embed_dense(a.ids, t.data, t.dtype == DType::kBF16, t.cols, a.out, a.T, a.n,
                                 stream_.get());
    }
    void linear(const ops::LinearArgs& a) override {
        const DenseWeight& w = dense(a.w);
        DSV4_ASSERT(!a.act_fp8,
                    "CUDA backend: FP8 activations (reference numerics) are not "
                    "implemented yet (issue #16)");
        DSV4_ASSERT(a.row0 >= 0 && a.row0 + a.N <= w.rows, "rows [", a.row0, ", ", a.row0 + a.N,
                    ") outside weight of ", w.rows);
        cuda::DenseLinearArgs d;
        d.x = a.x;
        d.x_bf16 = a.x_type == ops::ActType::kBF16;
        d.w = w.data;
        d.w_bf16 = w.dtype == DType::kBF16;
        d.y = a.y;
        d.y_bf16 = a.y_type == ops::ActType::kBF16;
        d.M = a.M;
        d.N = a.N;
        d.K = w.cols;
        d.row0 = a.row0;
        d.ldx = a.ldx ? a.ldx : w.cols;
        d.ldy = a.ldy ? a.ldy : a.N;
        cuda::launch_dense_linear(d, stream_.get());
    }
    void linear_group(const ops::LinearGroupArgs& a) override {
        DSV4_ASSERT(a.n_out >= 0 && a.n_out <= ops::LinearGroupArgs::kMaxOutputs, a.n_out);
        for (int i = 0; i < a.n_out; ++i)
            linear({a.x, a.out[i].w, a.out[i].y, a.M, a.out[i].w->rows, 0, 0, 0, ops::ActType::kF32,
                    ops::ActType::kF32, a.out[i].act_fp8});
    }
    void swiglu(const ops::SwigluArgs& a) override { cuda::launch_swiglu(a, stream_.get()); }
    void rms_norm(const ops::RmsNormArgs& a) override { cuda::launch_rms_norm(a, stream_.get()); }
    void rope(const ops::RopeArgs& a) override { cuda::launch_rope(a, stream_.get()); }
    void hc_pre(const ops::HcPreArgs& a) override { cuda::launch_hc_pre(a, stream_.get()); }
    void hc_post(const ops::HcPostArgs& a) override { cuda::launch_hc_post(a, stream_.get()); }
    void hc_head(const ops::HcHeadArgs& a) override { cuda::launch_hc_head(a, stream_.get()); }
    void add_to_streams(const ops::AddToStreamsArgs& a) override {
        cuda::launch_add_to_streams(a, stream_.get());
    }
    void round_trip(const ops::RoundTripArgs& a) override {
        cuda::launch_round_trip(a, stream_.get());
    }
    void attention(const ops::AttentionArgs& a) override {
        cuda::launch_attention(a, stream_.get());
    }
    void ring_write(const ops::RingWriteArgs& a) override {
        cuda::launch_ring_write(a, stream_.get());
    }
    void compress(const ops::CompressArgs& a) override { cuda::launch_compress(a, stream_.get()); }
    void indexer_topk(const ops::IndexerTopkArgs& a) override {
        cuda::launch_indexer_topk(a, stream_.get());
    }
    void router(const ops::RouterArgs& a) override {
        linear({a.x, a.gate, a.logits, a.T, a.E});
        cuda::launch_route(
            {a.logits, a.bias, a.tid2eid, a.ids, a.sel, a.weight, a.T, a.E, a.k, a.scale},
            stream_.get());
    }
    void moe(const ops::MoeArgs&) override {
        DSV4_ASSERT(false, "CUDA backend: the MoE op is not implemented yet (issue #11)");
    }
    void gather_rows(const ops::GatherRowsArgs& a) override {
        cuda::launch_gather_rows(a, stream_.get());
    }
    void sample(const ops::SampleArgs& a) override { cuda::launch_sample(a, stream_.get()); }
    void scale(float* x, float s, int64_t n) override {
        cuda::launch_scale(x, s, n, stream_.get());
    }

    cudaStream_t stream() const { return stream_.get(); }

  private:
    cuda::DeviceInfo info_;
    cuda::CudaStream stream_;
    std::unordered_map<void*, size_t> blocks_;
    size_t in_use_ = 0;
    std::deque<DenseWeight> weights_;  // stable addresses for the handles
};

}  // namespace

Expected<std::unique_ptr<Backend>> make_cuda_backend(int device) {
    if (!cuda::gpu_available()) return error("CUDA backend: no usable CUDA device");
    DSV4_ASSIGN_OR_RETURN(cuda::DeviceInfo info, cuda::query_device(device));
    DSV4_CHECK_CUDA(cudaSetDevice(device));
    return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(std::move(info)));
}

cudaStream_t cuda_backend_stream(Backend& b) {
    auto* cb = dynamic_cast<CudaBackend*>(&b);
    DSV4_ASSERT(cb != nullptr, "cuda_backend_stream: the ", b.name(), " backend has no stream");
    return cb->stream();
}

}  // namespace dsv4
