// Engine: owns the backend, the model and the sessions' caches.
#include "dsv4/engine.h"

#include "backend/cpu/cpu_backend.h"
#include "base/thread_pool.h"
#include "model/model.h"
#include "model/sampler.h"

namespace dsv4 {

struct Engine::Impl {
    EngineOptions options;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Model> model;
    ModelInfo info;
};

struct Session::Impl {
    Model* model = nullptr;
    std::unique_ptr<KvCache> cache;
};

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

Status Session::feed(const std::vector<int32_t>& ids, std::vector<float>* all_logits,
                     std::vector<float>* last_logits) {
    if (ids.empty()) return error("feed: no tokens");
    const int64_t V = impl_->model->config().vocab_size;
    if (all_logits) all_logits->resize(ids.size() * V);
    if (last_logits) last_logits->resize(V);
    return impl_->model->forward(*impl_->cache, ids.data(), static_cast<int64_t>(ids.size()),
                                 all_logits ? all_logits->data() : nullptr,
                                 last_logits ? last_logits->data() : nullptr);
}

Status Session::feed_with_taps(const std::vector<int32_t>& ids, std::vector<float>* all_logits,
                               const std::function<void(int, const float*, int64_t)>& tap) {
    if (ids.empty()) return error("feed: no tokens");
    const int64_t V = impl_->model->config().vocab_size;
    if (all_logits) all_logits->resize(ids.size() * V);
    return impl_->model->forward(*impl_->cache, ids.data(), static_cast<int64_t>(ids.size()),
                                 all_logits ? all_logits->data() : nullptr, nullptr, tap);
}

int64_t Session::position() const {
    return impl_->cache->position();
}
void Session::reset() {
    impl_->cache->reset();
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Expected<std::unique_ptr<Engine>> Engine::create(const EngineOptions& options) {
    auto impl = std::make_unique<Impl>();
    impl->options = options;
    if (options.max_context <= 0) return error("max_context must be > 0");
    if (options.threads > 0) set_num_threads(options.threads);
    if (options.device == "cpu") {
        impl->backend = make_cpu_backend();
    } else if (options.device == "cuda") {
        return error(
            "device 'cuda': the full model forward on CUDA is not implemented yet "
            "(the CUDA backend has the GEMV kernels only); use --device cpu");
    } else {
        return error("unknown device '", options.device, "' (cpu or cuda)");
    }
    auto model = Model::load(options.model_dir, *impl->backend, options.max_chunk);
    if (!model) return model.status().with_context("loading " + options.model_dir);
    impl->model = std::move(*model);
    const ModelConfig& c = impl->model->config();
    impl->info.vocab_size = c.vocab_size;
    impl->info.bos_token_id = c.bos_token_id;
    impl->info.eos_token_id = c.eos_token_id;
    impl->info.num_layers = c.num_layers;
    impl->info.hidden_size = c.hidden_size;
    impl->info.hc_mult = c.hc_mult;
    impl->info.summary = c.summary();
    impl->info.weight_bytes = impl->model->weights().bytes;
    const CacheFootprint fp = cache_footprint(c);
    impl->info.cache_bytes_per_token = fp.bytes_per_token;
    impl->info.cache_fixed_bytes = fp.fixed_bytes;
    impl->info.cache_bytes =
        fp.fixed_bytes + static_cast<size_t>(fp.bytes_per_token * options.max_context);
    impl->info.weight_formats = describe_weight_formats(impl->model->weights());
    return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const ModelInfo& Engine::info() const {
    return impl_->info;
}

std::unique_ptr<Session> Engine::new_session() {
    auto s = std::make_unique<Session::Impl>();
    s->model = impl_->model.get();
    s->cache = std::make_unique<KvCache>(impl_->model->config(), *impl_->backend,
                                         impl_->options.max_context);
    return std::unique_ptr<Session>(new Session(std::move(s)));
}

Expected<std::vector<int32_t>> Engine::generate(Session& session,
                                                const std::vector<int32_t>& prompt, int max_tokens,
                                                const SamplingOptions& sampling, bool stop_at_eos,
                                                const std::function<bool(int32_t)>& on_token) {
    std::vector<int32_t> out;
    std::vector<float> logits;
    DSV4_RETURN_IF_ERROR(session.feed(prompt, nullptr, &logits));
    Sampler sampler({sampling.temperature, sampling.top_k, sampling.top_p, sampling.seed});
    const int64_t V = impl_->info.vocab_size;
    for (int i = 0; i < max_tokens; ++i) {
        const int32_t tok = sampler.sample(logits.data(), V);
        out.push_back(tok);
        if (on_token && !on_token(tok)) break;
        if (stop_at_eos && tok == impl_->info.eos_token_id) break;
        if (i + 1 == max_tokens) break;
        DSV4_RETURN_IF_ERROR(session.feed({tok}, nullptr, &logits));
    }
    return out;
}

}  // namespace dsv4
