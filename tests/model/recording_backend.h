// A backend that forwards every call to the CPU reference and records it with its host-side
// arguments: pointers as addresses, sizes and scalars as values (floats exactly), nested
// descriptors field by field. Two recordings are equal exactly when the host issued the same
// op sequence with the same arguments, which is what a captured CUDA graph replays.
#pragma once

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "ops/backend.h"

namespace dsv4::test {

// Field count of an aggregate without array members (brace initialisation from "anything").
struct AnyField {
    template <class T>
    operator T() const;
};
template <class T, class... A>
constexpr size_t field_count() {
    if constexpr (requires { T{A{}..., AnyField{}}; })
        return field_count<T, A..., AnyField>();
    else
        return sizeof...(A);
}

template <class T>
void put(std::ostream& out, const T& v);

template <class... F>
void put_all(std::ostream& out, const F&... f) {
    out << '{';
    ((put(out, f), out << ','), ...);
    out << '}';
}

// The fields of an aggregate of up to 21 fields, as one printed tuple.
template <class T>
void put_fields(std::ostream& out, const T& t) {
    constexpr size_t n = field_count<T>();
    static_assert(n >= 1 && n <= 21, "recording: aggregate with an unsupported field count");
#define DSV4_F(N, ...)                 \
    if constexpr (n == N) {            \
        const auto& [__VA_ARGS__] = t; \
        put_all(out, __VA_ARGS__);     \
    }
    DSV4_F(1, a)
    DSV4_F(2, a, b)
    DSV4_F(3, a, b, c)
    DSV4_F(4, a, b, c, d)
    DSV4_F(5, a, b, c, d, e)
    DSV4_F(6, a, b, c, d, e, f)
    DSV4_F(7, a, b, c, d, e, f, g)
    DSV4_F(8, a, b, c, d, e, f, g, h)
    DSV4_F(9, a, b, c, d, e, f, g, h, i)
    DSV4_F(10, a, b, c, d, e, f, g, h, i, j)
    DSV4_F(11, a, b, c, d, e, f, g, h, i, j, k)
    DSV4_F(12, a, b, c, d, e, f, g, h, i, j, k, l)
    DSV4_F(13, a, b, c, d, e, f, g, h, i, j, k, l, m)
    DSV4_F(14, a, b, c, d, e, f, g, h, i, j, k, l, m, n_)
    DSV4_F(15, a, b, c, d, e, f, g, h, i, j, k, l, m, n_, o)
    DSV4_F(16, a, b, c, d, e, f, g, h, i, j, k, l, m, n_, o, p)
    DSV4_F(17, a, b, c, d, e, f, g, h, i, j, k, l, m, n_, o, p, q)
    DSV4_F(18, a, b, c, d, e, f, g, h, i, j, k, l, m, n_, o, p, q, r)
    DSV4_F(19, a, b, c, d, e, f, g, h, i, j, k, l, m, n_, o, p, q, r, s)
    DSV4_F(20, a, b, c, d, e, f, g, h, i, j, k, l, m, n_, o, p, q, r, s, u)
    DSV4_F(21, a, b, c, d, e, f, g, h, i, j, k, l, m, n_, o, p, q, r, s, u, v_)
#undef DSV4_F
}

template <class T>
void put(std::ostream& out, const T& v) {
    if constexpr (std::is_pointer_v<T>) {
        out << static_cast<const void*>(v);
    } else if constexpr (std::is_floating_point_v<T>) {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%a", static_cast<double>(v));
        out << buf;
    } else if constexpr (std::is_enum_v<T>) {
        out << static_cast<long long>(v);
    } else if constexpr (std::is_integral_v<T>) {
        out << static_cast<long long>(v);
    } else if constexpr (std::is_same_v<T, ops::LinearGroupArgs>) {
        // Has an array member: spelled out.
        put_all(out, v.x, v.n_out, v.M);
        for (int i = 0; i < v.n_out; ++i) put_all(out, v.out[i].w, v.out[i].y);
        for (const ops::Clear& c : v.clear) put_all(out, c.p, c.n);
    } else if constexpr (std::is_same_v<T, ops::LinearArgs>) {
        // The second linear (LinearArgs::then) by value: its address is the caller's stack.
        static_assert(field_count<ops::LinearArgs>() == 15, "LinearArgs changed: update here");
        put_all(out, v.x, v.w, v.y, v.M, v.N, v.row0, v.ldx, v.ldy, v.x_type, v.y_type, v.act_fp8,
                v.round_bf16, v.groups, v.y_cleared);
        if (v.then != nullptr) put(out, *v.then);
    } else if constexpr (std::is_same_v<T, ops::RmsNormArgs>) {
        put_all(out, v.x, v.weight, v.out, v.rows, v.dim, v.eps, v.round_bf16, v.rope, v.also);
    } else {
        put_fields(out, v);
    }
}

class RecordingBackend final : public Backend {
  public:
    RecordingBackend() : inner_(make_cpu_backend()) {}
    const char* name() const override { return "recording-cpu"; }

    void start() { calls_.clear(), on_ = true; }
    std::vector<std::string> stop() {
        on_ = false;
        return std::move(calls_);
    }

    Expected<void*> try_alloc(size_t bytes) override {
        rec("try_alloc", bytes);
        return inner_->try_alloc(bytes);
    }
    void free(void* p) override {
        rec("free", p);
        inner_->free(p);
    }
    size_t memory_available() const override { return inner_->memory_available(); }
    size_t memory_in_use() const override { return inner_->memory_in_use(); }
    // Uploads carry the step's data; recorded by destination and size only.
    void upload(void* dst, const void* src, size_t bytes) override {
        rec("upload", dst, bytes);
        inner_->upload(dst, src, bytes);
    }
    void download(void* dst, const void* src, size_t bytes) override {
        rec("download", src, bytes);
        inner_->download(dst, src, bytes);
    }
    void copy(void* dst, const void* src, size_t bytes) override {
        rec("copy", dst, src, bytes);
        inner_->copy(dst, src, bytes);
    }
    void fill(float* dst, float value, int64_t n) override {
        rec("fill", dst, value, n);
        inner_->fill(dst, value, n);
    }
    void synchronize() override {
        rec("synchronize", 0);
        inner_->synchronize();
    }
    Expected<ops::Weight> upload_weight(const QuantWeight& w,
                                        const ops::WeightPlacement& where) override {
        return inner_->upload_weight(w, where);
    }
    Expected<ops::ExpertWeights> upload_experts(const QuantWeight* w1, const QuantWeight* w3,
                                                const QuantWeight* w2, int E,
                                                const ops::WeightPlacement& where,
                                                const SharedExpert& shared) override {
        return inner_->upload_experts(w1, w3, w2, E, where, shared);
    }

    void branch_begin() override {
        rec("branch_begin");
        inner_->branch_begin();
    }
    void branch_end() override {
        rec("branch_end");
        inner_->branch_end();
    }
    void branch_join() override {
        rec("branch_join");
        inner_->branch_join();
    }
    void branch_pause() override {
        rec("branch_pause");
        inner_->branch_pause();
    }
    void branch_resume() override {
        rec("branch_resume");
        inner_->branch_resume();
    }

#define DSV4_REC_OP(op, Args)              \
    void op(const ops::Args& a) override { \
        rec(#op, a);                       \
        inner_->op(a);                     \
    }
    DSV4_REC_OP(embed, EmbedArgs)
    DSV4_REC_OP(linear, LinearArgs)
    DSV4_REC_OP(linear_group, LinearGroupArgs)
    DSV4_REC_OP(swiglu, SwigluArgs)
    DSV4_REC_OP(rms_norm, RmsNormArgs)
    DSV4_REC_OP(rope, RopeArgs)
    DSV4_REC_OP(hc_pre, HcPreArgs)
    DSV4_REC_OP(hc_post, HcPostArgs)
    DSV4_REC_OP(hc_head, HcHeadArgs)
    DSV4_REC_OP(add_to_streams, AddToStreamsArgs)
    DSV4_REC_OP(attention, AttentionArgs)
    DSV4_REC_OP(ring_write, RingWriteArgs)
    DSV4_REC_OP(compress, CompressArgs)
    DSV4_REC_OP(indexer_topk, IndexerTopkArgs)
    DSV4_REC_OP(router, RouterArgs)
    DSV4_REC_OP(moe, MoeArgs)
    DSV4_REC_OP(count_experts, CountExpertsArgs)
    DSV4_REC_OP(gather_rows, GatherRowsArgs)
    DSV4_REC_OP(sample, SampleArgs)
    DSV4_REC_OP(logprobs, LogprobsArgs)
    DSV4_REC_OP(logits_rules, LogitsRulesArgs)
    DSV4_REC_OP(round_trip, RoundTripArgs)
#undef DSV4_REC_OP
    void scale(float* x, float s, int64_t n) override {
        rec("scale", x, s, n);
        inner_->scale(x, s, n);
    }

  private:
    template <class... A>
    void rec(const char* op, const A&... a) {
        if (!on_) return;
        std::ostringstream os;
        os << op;
        put_all(os, a...);
        calls_.push_back(os.str());
    }
    std::unique_ptr<Backend> inner_;
    std::vector<std::string> calls_;
    bool on_ = false;
};

}  // namespace dsv4::test
