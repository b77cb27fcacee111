#include "model/model.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/log.h"
#include "model/rope_table.h"

namespace dsv4 {

namespace {

// The logprobs op's outputs for a step's Rs sampled rows, back to back in Workspace::logprobs
// so that one download brings them: logprob [Rs], top_id [Rs, kMaxTopLogprobs], top_logprob
// [Rs, kMaxTopLogprobs] (offsets in 4-byte words). Rs is in the step key, so a recorded step's
// pointers stay its own.
struct LogprobsLayout {
    int64_t top_id, top_logprob, words;
    explicit LogprobsLayout(int64_t Rs)
        : top_id(Rs),
          top_logprob(Rs + Rs * kMaxTopLogprobs),
          words(Rs + 2 * Rs * kMaxTopLogprobs) {}
};

}  // namespace

Model::Model(ModelConfig cfg, TensorStore store, Backend& backend)
    : cfg_(std::move(cfg)), store_(std::move(store)), backend_(backend) {}

Model::~Model() {
    for (void* b : blocks_) backend_.free(b);
}

Expected<std::unique_ptr<Model>> Model::load(const std::string& dir, Backend& backend,
                                             int step_tokens, Numerics numerics,
                                             const LoadProgress& progress) {
    namespace fs = std::filesystem;
    if (step_tokens <= 0) return error("step_tokens must be > 0, got ", step_tokens);
    DSV4_ASSIGN_OR_RETURN(ModelConfig cfg,
                          load_model_config((fs::path(dir) / "config.json").string()));
    DSV4_ASSIGN_OR_RETURN(TensorStore store, TensorStore::open(dir));
    std::unique_ptr<Model> m(new Model(std::move(cfg), std::move(store), backend));
    DSV4_RETURN_IF_ERROR(m->init(step_tokens, numerics, progress, dir));
    return m;
}

Expected<std::unique_ptr<Model>> Model::load_synthetic(const SynthSpec& spec, Backend& backend,
                                                       int step_tokens, Numerics numerics,
                                                       const LoadProgress& progress) {
    if (step_tokens <= 0) return error("step_tokens must be > 0, got ", step_tokens);
    DSV4_ASSIGN_OR_RETURN(ModelConfig cfg, synth_config(spec));
    std::unique_ptr<Model> m(new Model(std::move(cfg), TensorStore(), backend));
    m->synth_ = std::make_unique<SynthSource>(spec);
    DSV4_RETURN_IF_ERROR(m->init(step_tokens, numerics, progress,
                                 "synthetic " + spec.base + " (" + spec.format + ")"));
    return m;
}

Status Model::init(int step_tokens, Numerics numerics, const LoadProgress& progress,
                   const std::string& label) {
    numerics_ = numerics;
    DSV4_ASSIGN_OR_RETURN(w_, bind_weights(store_, cfg_, backend_, progress, synth_.get()));
    DSV4_RETURN_IF_ERROR(backend_.prepare_steps(int64_t{step_tokens} * cfg_.hc_mult));
    DSV4_LOG_INFO("loaded ", label, ": ", cfg_.summary());

    const ModelConfig& c = cfg_;
    auto upload_freq = [&](const RopeParams& p) -> Expected<RopeTable> {
        std::vector<float> f = rope_inv_freq(p, c.rope_dim);
        DSV4_ASSIGN_OR_RETURN(void* d, backend_.try_alloc(f.size() * sizeof(float)));
        blocks_.push_back(d);
        backend_.upload(d, f.data(), f.size() * sizeof(float));
        return RopeTable{static_cast<const float*>(d), static_cast<float>(p.attention_factor)};
    };
    DSV4_ASSIGN_OR_RETURN(rope_main_, upload_freq(c.rope_main));
    DSV4_ASSIGN_OR_RETURN(rope_compress_, upload_freq(c.rope_compress));
    // Buckets 1, 2, 4, ... and step_tokens itself.
    for (int cap = 1; cap < step_tokens; cap *= 2) DSV4_RETURN_IF_ERROR(make_workspace(cap));
    DSV4_RETURN_IF_ERROR(make_workspace(step_tokens));
    backend_.synchronize();
    return Status::ok();
}

Status Model::make_workspace(int capacity) {
    const ModelConfig& c = cfg_;
    const int64_t T = capacity, D = c.hidden_size, n = c.hc_mult;
    auto ws = std::make_unique<Workspace>();
    ws->capacity = capacity;
    // One block for the whole bucket, carved below (every piece 64-byte aligned).
    struct Piece {
        void** dst;
        int64_t bytes;
    };
    std::vector<Piece> pieces;
    auto f = [&](float** p, int64_t count) {
        pieces.push_back({reinterpret_cast<void**>(p), count * 4});
    };
    auto i32 = [&](int32_t** p, int64_t count) {
        pieces.push_back({reinterpret_cast<void**>(p), count * 4});
    };
    auto i64 = [&](int64_t** p, int64_t count) {
        pieces.push_back({reinterpret_cast<void**>(p), count * 8});
    };
    i32(&ws->ids, T);
    i32(&ws->tok_row, T);
    i64(&ws->tok_pos, T);
    i32(&ws->row_slot, T);
    i32(&ws->row_start, T);
    i32(&ws->row_len, T);
    i64(&ws->row_pos0, T);
    i32(&ws->logit_idx, T);
    pieces.push_back({reinterpret_cast<void**>(&ws->sampling),
                      T * static_cast<int64_t>(sizeof(SamplingParams))});
    i32(&ws->sample_slot, T);
    i32(&ws->sample_draft, T);
    i32(&ws->sampled, T);
    f(&ws->logprobs, LogprobsLayout(T).words);
    f(&ws->streams, T * n * D);
    f(&ws->streams_next, T * n * D);
    f(&ws->y, T * D);
    f(&ws->xn, T * D);
    f(&ws->post, T * n);
    f(&ws->comb, T * n * n);
    f(&ws->qa, T * c.q_lora_rank);
    f(&ws->q, T * c.num_heads * c.head_dim);
    f(&ws->kv, T * c.head_dim);
    f(&ws->o, T * c.num_heads * c.head_dim);
    f(&ws->u, T * c.o_groups * c.o_lora_rank);
    f(&ws->sub_out, T * D);
    f(&ws->ckv, T * 2 * c.head_dim);
    f(&ws->cgate, T * 2 * c.head_dim);
    f(&ws->ikv, T * 2 * std::max(1, c.index_head_dim));
    f(&ws->igate, T * 2 * std::max(1, c.index_head_dim));
    f(&ws->qi, T * std::max(1, c.index_n_heads * c.index_head_dim));
    f(&ws->wts, T * std::max(1, c.index_n_heads));
    i32(&ws->topk, T * std::max(1, c.index_topk));
    f(&ws->router_logits, T * c.n_routed_experts);
    i32(&ws->sel, T * c.num_experts_per_tok);
    f(&ws->route_w, T * c.num_experts_per_tok);
    f(&ws->shared, T * (2 * int64_t{c.moe_intermediate_size} + D));
    f(&ws->routed, ops::moe_routed_scratch_floats(T, c.num_experts_per_tok, c.n_routed_experts, D,
                                                  c.moe_intermediate_size));
    f(&ws->head_streams, T * n * D);
    f(&ws->head_y, T * D);
    f(&ws->head_xn, T * D);
    f(&ws->logits, T * c.vocab_size);
    for (int32_t** p : {&ws->m_ids, &ws->m_tok_row, &ws->m_row_slot, &ws->m_row_start,
                        &ws->m_row_len, &ws->m_src})
        i32(p, T);
    i64(&ws->m_tok_pos, T);
    i64(&ws->m_row_pos0, T);
    f(&ws->mtp_logits, has_mtp() ? T * c.vocab_size : 1);
    int64_t total = 0;
    for (const Piece& p : pieces) total += (p.bytes + 63) / 64 * 64;
    auto block = backend_.try_alloc(static_cast<size_t>(total));
    if (!block)
        return block.status().with_context("activation workspace for " + std::to_string(capacity) +
                                           " tokens");
    blocks_.push_back(*block);
    char* at = static_cast<char*>(*block);
    for (const Piece& p : pieces) {
        *p.dst = at;
        at += (p.bytes + 63) / 64 * 64;
    }
    ws->step = {ws->ids,
                ws->tok_row,
                ws->tok_pos,
                ws->row_slot,
                ws->row_start,
                ws->row_len,
                ws->row_pos0,
                0,
                0};
    ws->mtp_step = {ws->m_ids,
                    ws->m_tok_row,
                    ws->m_tok_pos,
                    ws->m_row_slot,
                    ws->m_row_start,
                    ws->m_row_len,
                    ws->m_row_pos0,
                    0,
                    0};
    buckets_.push_back(std::move(ws));
    return Status::ok();
}

Status Model::validate(const CachePool& pool, std::span<const StepRow> rows) const {
    if (rows.empty()) return error("a step needs at least one row");
    int64_t T = 0;
    std::vector<bool> seen(pool.layout().max_seqs, false);
    for (const StepRow& r : rows) {
        if (r.len <= 0) return error("a step row needs at least one token");
        if (r.slot < 0 || r.slot >= pool.layout().max_seqs || seen[r.slot])
            return error("step row slot ", r.slot, " is invalid or used twice");
        seen[r.slot] = true;
        if (r.pos0 < 0 || r.pos0 + r.len > pool.layout().max_context)
            return error("context full: ", r.pos0, " + ", r.len,
                         " tokens exceed the cache capacity of ", pool.layout().max_context,
                         " (raise --max-context)");
        for (int32_t i = 0; i < r.len; ++i) {
            if (r.ids[i] < 0 || r.ids[i] >= cfg_.vocab_size)
                return error("token id ", r.ids[i], " at index ", i,
                             " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
            if (r.mtp_next && (r.mtp_next[i] < 0 || r.mtp_next[i] >= cfg_.vocab_size))
                return error("next token id ", r.mtp_next[i], " at index ", i,
                             " is outside the vocabulary [0, ", cfg_.vocab_size, ")");
        }
        if (r.mtp_next && !has_mtp())
            return error("this checkpoint has no MTP block (release-layout mtp.0.* tensors)");
        if (r.mtp_next && !pool.layout().mtp)
            return error("the cache pool was made without the MTP block's caches");
        T += r.len;
    }
    if (T > step_tokens())
        return error("a step of ", T, " tokens exceeds the step capacity of ", step_tokens());
    return Status::ok();
}

Status Model::run_step(CachePool& pool, std::span<const StepRow> rows, const LayerTap& tap) {
    DSV4_RETURN_IF_ERROR(validate(pool, rows));
    const ModelConfig& c = cfg_;
    const int64_t V = c.vocab_size, width = int64_t{c.hc_mult} * c.hidden_size;
    // The descriptor, and the logit rows: sampled rows' last tokens first (the sampling op
    // reads the first Rs), then every other token whose logits are asked for.
    host_.clear();
    std::vector<int32_t> logit_idx, sample_slot, sample_draft;
    bool any_draft = false, any_logprobs = false, any_rules = false;
    std::vector<SamplingParams> sampling;
    for (const StepRow& r : rows) {
        const int32_t start = host_.T();
        host_.add_row(r.slot, r.pos0, r.len, r.ids);
        any_logprobs = any_logprobs || (r.sample && r.logprobs_out != nullptr);
        any_rules = any_rules || r.rules;
        if (r.sample)
            for (int32_t t = r.sample_all ? 0 : r.len - 1; t < r.len; ++t) {
                logit_idx.push_back(start + t);
                sample_slot.push_back(r.slot);
                sampling.push_back(r.sampling);
                const int32_t d = r.sample_all && r.drafts ? r.drafts[t] : -1;
                sample_draft.push_back(d);
                any_draft = any_draft || d >= 0;
            }
    }
    const int Rs = static_cast<int>(logit_idx.size());
    std::vector<int64_t> logits_at(rows.size(), -1);  // first logit row of each step row
    for (size_t i = 0; i < rows.size(); ++i) {
        const StepRow& r = rows[i];
        if (r.logits == LogitsWanted::kNone) continue;
        logits_at[i] = static_cast<int64_t>(logit_idx.size());
        const int32_t start = host_.row_start[i];
        for (int32_t t = r.logits == LogitsWanted::kAll ? 0 : r.len - 1; t < r.len; ++t)
            logit_idx.push_back(start + t);
    }
    // The MTP rows, over the same slots and positions, reading h from their step tokens.
    mtp_host_.clear();
    std::vector<int32_t> mtp_src;
    for (size_t i = 0; i < rows.size(); ++i) {
        if (rows[i].mtp_next == nullptr) continue;
        mtp_host_.add_row(rows[i].slot, rows[i].pos0, rows[i].len, rows[i].mtp_next);
        for (int32_t t = 0; t < rows[i].len; ++t) mtp_src.push_back(host_.row_start[i] + t);
    }
    const Dims d{host_.T(),    host_.B(),     static_cast<int>(logit_idx.size()),
                 Rs,           mtp_host_.T(), mtp_host_.B(),
                 any_logprobs, any_rules};
    const Workspace* ws = nullptr;
    for (const auto& b : buckets_)
        if (b->capacity >= d.T) {
            ws = b.get();
            break;
        }
    if (tap && capture_ == nullptr) {
        auto cap = backend_.try_alloc(static_cast<size_t>(c.num_layers + 1) * step_tokens() *
                                      width * sizeof(float));
        if (!cap) return cap.status().with_context("layer capture buffer");
        capture_ = static_cast<float*>(*cap);
        blocks_.push_back(capture_);
    }

    // One write of the descriptor (its arrays are consecutive in the workspace block, from
    // ids to sample_draft), the step, then the outputs.
    char* const desc0 = reinterpret_cast<char*>(ws->ids);
    const size_t desc_bytes = static_cast<size_t>(reinterpret_cast<char*>(ws->sampled) - desc0);
    desc_image_.assign(desc_bytes, 0);
    auto put = [&](void* dst, const auto& v) {
        if (v.empty()) return;
        const size_t at = static_cast<size_t>(static_cast<char*>(dst) - desc0);
        DSV4_ASSERT(at + v.size() * sizeof(v[0]) <= desc_bytes, "descriptor layout");
        std::memcpy(desc_image_.data() + at, v.data(), v.size() * sizeof(v[0]));
    };
    put(ws->ids, host_.ids);
    put(ws->tok_row, host_.tok_row);
    put(ws->tok_pos, host_.tok_pos);
    put(ws->row_slot, host_.row_slot);
    put(ws->row_start, host_.row_start);
    put(ws->row_len, host_.row_len);
    put(ws->row_pos0, host_.row_pos0);
    put(ws->logit_idx, logit_idx);
    put(ws->sampling, sampling);
    put(ws->sample_slot, sample_slot);
    if (any_draft) put(ws->sample_draft, sample_draft);
    backend_.upload(desc0, desc_image_.data(), desc_bytes);
    if (d.Tm > 0) upload_mtp_desc(*ws, mtp_src);
    if (tap) {
        forward(*ws, pool, d, capture_, any_draft);
    } else {
        DSV4_RETURN_IF_ERROR(run_forward(*ws, pool, d, any_draft));
    }
    std::vector<int32_t> sampled(Rs);
    if (Rs > 0) backend_.download(sampled.data(), ws->sampled, Rs * sizeof(int32_t));
    const LogprobsLayout lo(Rs);
    std::vector<uint32_t> lp_words;  // (floats and ids: LogprobsLayout)
    if (any_logprobs) {
        lp_words.resize(static_cast<size_t>(lo.words));
        backend_.download(lp_words.data(), ws->logprobs, lp_words.size() * sizeof(uint32_t));
    }
    for (size_t i = 0; i < rows.size(); ++i) {
        const StepRow& r = rows[i];
        if (logits_at[i] < 0 || r.logits_out == nullptr) continue;
        const int64_t n = r.logits == LogitsWanted::kAll ? r.len : 1;
        r.logits_out->resize(n * V);
        backend_.download(r.logits_out->data(), ws->logits + logits_at[i] * V,
                          n * V * sizeof(float));
    }
    for (int64_t i = 0, at = 0; i < static_cast<int64_t>(rows.size()); ++i) {
        const StepRow& r = rows[i];
        if (r.mtp_next == nullptr) continue;
        if (r.mtp_logits_out) {
            r.mtp_logits_out->resize(r.len * V);
            backend_.download(r.mtp_logits_out->data(), ws->mtp_logits + at * V,
                              r.len * V * sizeof(float));
        }
        at += r.len;
    }
    std::vector<float> captured;
    if (tap) {
        captured.resize(static_cast<size_t>(c.num_layers + 1) * d.T * width);
        for (int l = 0; l <= c.num_layers; ++l)
            backend_.download(captured.data() + l * d.T * width,
                              capture_ + l * int64_t{step_tokens()} * width,
                              d.T * width * sizeof(float));
    }
    backend_.synchronize();
    // A rank of another process that went away: this step's sums are missing (its outputs too).
    DSV4_RETURN_IF_ERROR(backend_.collective_status());
    for (int i = 0, s = 0; i < static_cast<int>(rows.size()); ++i) {
        if (!rows[i].sample) continue;
        const int n = rows[i].sample_all ? rows[i].len : 1;
        if (rows[i].sampled_out)
            std::copy(sampled.begin() + s, sampled.begin() + s + n, rows[i].sampled_out);
        if (TokenLogprobs* out = rows[i].logprobs_out; out != nullptr)
            for (int j = 0; j < n; ++j) {
                out[j].logprob = std::bit_cast<float>(lp_words[s + j]);
                out[j].top_n = kMaxTopLogprobs;
                for (int k = 0; k < kMaxTopLogprobs; ++k) {
                    const int64_t at = int64_t{s + j} * kMaxTopLogprobs + k;
                    out[j].top[k] = {static_cast<int32_t>(lp_words[lo.top_id + at]),
                                     std::bit_cast<float>(lp_words[lo.top_logprob + at])};
                }
            }
        s += n;
    }
    last_ws_ = ws;
    last_T_ = d.T;
    last_mtp_T_ = 0;
    if (tap)
        for (int l = 0; l <= c.num_layers; ++l)
            tap(l, captured.data() + l * d.T * width, l < c.num_layers ? d.T : d.R);
    return Status::ok();
}

// The forward without taps: replayed from its recording when the shape repeats (and the
// backend records), else enqueued op by op.
Status Model::run_forward(const Workspace& ws, const CachePool& pool, const Dims& d,
                          bool verify_drafts) {
    if (!record_steps_ || d.T + d.Tm > kGraphTokens) {
        forward(ws, pool, d, nullptr, verify_drafts);
        return Status::ok();
    }
    const StepKey key{&ws,  &pool, d.T,           d.B,        d.R,    d.Rs,
                      d.Tm, d.Bm,  verify_drafts, d.logprobs, d.rules};
    auto it = recorded_.find(key);
    if (it == recorded_.end() || (it->second == nullptr && recorded_count_ >= kMaxRecorded)) {
        // First sight of this shape: run it directly (one-off prefill shapes never record).
        // Past kMaxRecorded graphs (a server's mix of decode and small prefill rows can make
        // many shapes) new shapes run op by op: each graph holds device memory.
        if (it == recorded_.end()) recorded_.emplace(key, nullptr);
        forward(ws, pool, d, nullptr, verify_drafts);
        return Status::ok();
    }
    if (it->second == nullptr) {
        auto rec = backend_.record([&] { forward(ws, pool, d, nullptr, verify_drafts); });
        if (!rec) return rec.status();
        if (*rec == nullptr) {  // the backend does not record: stop trying
            record_steps_ = false;
            forward(ws, pool, d, nullptr, verify_drafts);
            return Status::ok();
        }
        it->second = std::move(*rec);
        ++recorded_count_;
    }
    backend_.replay(*it->second);
    return Status::ok();
}

Status Model::count_expert_use(bool on) {
    const int64_t n = int64_t{cfg_.num_layers} * cfg_.n_routed_experts;
    if (on && expert_counts_ == nullptr) {
        DSV4_ASSIGN_OR_RETURN(void* p, backend_.try_alloc(n * sizeof(int32_t)));
        blocks_.push_back(p);
        expert_counts_ = static_cast<int32_t*>(p);
    }
    if (on && !count_experts_) {
        const std::vector<int32_t> zeros(n, 0);
        backend_.upload(expert_counts_, zeros.data(), n * sizeof(int32_t));
    }
    if (on != count_experts_) {
        recorded_.clear();
        recorded_count_ = 0;
    }
    count_experts_ = on;
    return Status::ok();
}

std::vector<int64_t> Model::expert_use() {
    const int64_t n = int64_t{cfg_.num_layers} * cfg_.n_routed_experts;
    std::vector<int32_t> counts(n, 0);
    if (expert_counts_ != nullptr) {
        backend_.download(counts.data(), expert_counts_, n * sizeof(int32_t));
        backend_.synchronize();
    }
    return std::vector<int64_t>(counts.begin(), counts.end());
}

// The MTP step descriptor (mtp_host_) and each MTP token's source token in the step.
void Model::upload_mtp_desc(const Workspace& ws, const std::vector<int32_t>& src) {
    auto up = [&](void* dst, const auto& v) {
        backend_.upload(dst, v.data(), v.size() * sizeof(v[0]));
    };
    up(ws.m_ids, mtp_host_.ids);
    up(ws.m_tok_row, mtp_host_.tok_row);
    up(ws.m_tok_pos, mtp_host_.tok_pos);
    up(ws.m_row_slot, mtp_host_.row_slot);
    up(ws.m_row_start, mtp_host_.row_start);
    up(ws.m_row_len, mtp_host_.row_len);
    up(ws.m_row_pos0, mtp_host_.row_pos0);
    up(ws.m_src, src);
}

Status Model::run_mtp(CachePool& pool, std::span<const MtpRow> rows, bool chained) {
    if (!has_mtp()) return error("this checkpoint has no MTP block");
    if (!pool.layout().mtp) return error("the cache pool was made without the MTP caches");
    if (last_ws_ == nullptr) return error("run_mtp follows a run_step");
    if (chained != (last_mtp_T_ > 0))
        return error(chained ? "a chained run_mtp follows a run_mtp"
                             : "run_mtp follows a run_step, once (chained: after a run_mtp)");
    if (rows.empty()) return Status::ok();
    const Workspace& ws = *last_ws_;
    const int64_t V = cfg_.vocab_size;
    // (ws.streams holds the last step's last streams, or the last MTP run's outputs.)
    const int src_T = chained ? last_mtp_T_ : last_T_;
    mtp_host_.clear();
    std::vector<int32_t> src, last, slots;
    for (const MtpRow& r : rows) {
        if (r.len <= 0 || r.h_start < 0 || r.h_start + r.len > src_T)
            return error("run_mtp: tokens [", r.h_start, ", ", r.h_start + r.len,
                         ") are not in the last ", chained ? "MTP run's " : "step's ", src_T);
        for (int32_t i = 0; i < r.len; ++i)
            if (r.next[i] < 0 || r.next[i] >= V)
                return error("run_mtp: token id ", r.next[i], " outside the vocabulary");
        mtp_host_.add_row(r.slot, r.pos0, r.len, r.next);
        for (int32_t i = 0; i < r.len; ++i) src.push_back(r.h_start + i);
        last.push_back(mtp_host_.T() - 1);
        slots.push_back(r.slot);
    }
    Dims d;
    d.Tm = mtp_host_.T();
    d.Bm = mtp_host_.B();
    const int R = static_cast<int>(rows.size());
    auto up = [&](void* dst, const auto& v) {
        backend_.upload(dst, v.data(), v.size() * sizeof(v[0]));
    };
    upload_mtp_desc(ws, src);
    // Greedy drafts: the MTP logits of each row's last position, arg-max by the sampling op.
    up(ws.logit_idx, last);
    up(ws.sampling, std::vector<SamplingParams>(R));
    up(ws.sample_slot, slots);
    mtp_forward(ws, pool, d);
    Backend& b = backend_;
    b.gather_rows({ws.mtp_logits, ws.logit_idx, ws.logits, R, V});
    b.sample({ws.logits, ws.sampling, ws.sample_slot, pool.rng(), ws.sampled, R, V});
    std::vector<int32_t> drafts(R);
    backend_.download(drafts.data(), ws.sampled, R * sizeof(int32_t));
    backend_.synchronize();
    last_mtp_T_ = d.Tm;  // ws.streams now holds the MTP block's outputs (the step's are gone)
    for (int i = 0; i < R; ++i)
        if (rows[i].draft_out) *rows[i].draft_out = drafts[i];
    return Status::ok();
}

// One step: the layer stack over all T tokens, then hc head, norm, head and sampling for the
// R logit rows only, then the MTP block on its rows. Host values used here are the batch's
// shape, never positions.
void Model::forward(const Workspace& ws, const CachePool& pool, const Dims& d, float* capture,
                    bool verify_drafts) {
    const ModelConfig& c = cfg_;
    const int n = c.hc_mult, D = c.hidden_size;
    const int64_t T = d.T, width = int64_t{n} * D, cap_stride = int64_t{step_tokens()} * width;
    const float eps = static_cast<float>(c.rms_norm_eps), hc_eps = static_cast<float>(c.hc_eps);
    ops::StepDesc st = ws.step;
    st.T = d.T;
    st.B = d.B;
    Backend& b = backend_;
    const bool bf16 = this->bf16();
    b.embed({st.ids, &w_.embed, ws.streams, T, n});
    // The reference's embedding table is bf16 (a no-op for the bf16 tables checkpoints ship).
    if (bf16) b.round_trip({ws.streams, T * n, D, D, 1, ops::RoundTrip::kBf16});
    std::optional<ops::HcPostArgs> pending;  // a block's last hc_post, fused into the next's
    for (int l = 0; l < c.num_layers; ++l) {
        block(ws, st, w_.layers[l], c.layers[l], pool.layer(l), pending);
        if (count_experts_)  // ws.sel still holds this layer's picks
            b.count_experts({ws.sel, expert_counts_ + int64_t{l} * c.n_routed_experts,
                             T * c.num_experts_per_tok, c.n_routed_experts});
        if (capture) {
            flush(pending);
            b.copy(capture + l * cap_stride, ws.streams, T * width * sizeof(float));
        }
    }
    flush(pending);
    if (d.R > 0) {
        b.gather_rows({ws.streams, ws.logit_idx, ws.head_streams, d.R, width});
        b.hc_head({ws.head_streams, w_.hc_head.fn, w_.hc_head.base, w_.hc_head.scale, ws.head_y,
                   d.R, n, D, eps, hc_eps, bf16});
        b.rms_norm({ws.head_y, w_.norm, ws.head_xn, d.R, D, eps, bf16});
        if (capture)
            b.copy(capture + c.num_layers * cap_stride, ws.head_xn,
                   d.R * int64_t{D} * sizeof(float));
        b.linear({ws.head_xn, &w_.head, ws.logits, d.R, c.vocab_size});
        if (d.rules) rules(ws, st, pool, d);
        if (d.Rs > 0)
            b.sample({ws.logits, ws.sampling, ws.sample_slot, pool.rng(), ws.sampled, d.Rs,
                      c.vocab_size, verify_drafts ? ws.sample_draft : nullptr});
        if (d.Rs > 0 && d.logprobs) {
            const LogprobsLayout lo(d.Rs);
            b.logprobs({ws.logits, ws.sampled, ws.logprobs,
                        reinterpret_cast<int32_t*>(ws.logprobs + lo.top_id),
                        ws.logprobs + lo.top_logprob, d.Rs, c.vocab_size, kMaxTopLogprobs});
        }
    }
    if (d.R == 0 && d.rules) rules(ws, st, pool, d);  // (marks the prompt chunks' tokens)
    if (d.Tm > 0) mtp_forward(ws, pool, d);
}

// The request logits rules (ops::LogitsRulesArgs) on the sampled rows, after the step's tokens
// are counted.
void Model::rules(const Workspace& ws, const ops::StepDesc& st, const CachePool& pool,
                  const Dims& d) {
    backend_.logits_rules({st.ids, st.tok_pos, st.tok_row, st.row_slot, ws.logits, ws.sample_slot,
                           ws.logit_idx, pool.rules(), pool.rule_entries(), pool.token_counts(),
                           d.T, d.Rs, cfg_.vocab_size, CachePool::kRuleEntries});
}

// One decoder block: attention sub-block, then FFN sub-block, each wrapped in mHC pre/post.
void Model::block(const Workspace& ws, const ops::StepDesc& st, const LayerWeights& w,
                  const LayerSpec& spec, const LayerCache& lc,
                  std::optional<ops::HcPostArgs>& pending) {
    const ModelConfig& c = cfg_;
    const int n = c.hc_mult, D = c.hidden_size;
    const int64_t T = st.T;
    const float eps = static_cast<float>(c.rms_norm_eps), hc_eps = static_cast<float>(c.hc_eps);
    Backend& b = backend_;
    const bool bf16 = this->bf16();
    // hc_pre collapses the streams into y and applies the sub-block's RMSNorm: xn, after the
    // previous sub-block's hc_post (fused in front of it) has made the streams.
    b.hc_pre({ws.streams, w.hc_attn.fn, w.hc_attn.base, w.hc_attn.scale, ws.y, ws.post, ws.comb, T,
              n, D, c.hc_sinkhorn_iters, eps, hc_eps, bf16, w.attn_norm, ws.xn, eps,
              pending ? &*pending : nullptr});
    attention_block(ws, st, w, spec, lc, ws.xn, ws.sub_out);
    const ops::HcPostArgs post_attn{ws.sub_out, ws.streams, ws.post, ws.comb, ws.streams_next,
                                    T,          n,          D,       bf16};
    b.hc_pre({ws.streams_next, w.hc_ffn.fn, w.hc_ffn.base, w.hc_ffn.scale, ws.y, ws.post, ws.comb,
              T, n, D, c.hc_sinkhorn_iters, eps, hc_eps, bf16, w.ffn_norm, ws.xn, eps, &post_attn});
    ffn_block(ws, st, w, ws.xn, ws.sub_out);
    pending =
        ops::HcPostArgs{ws.sub_out, ws.streams_next, ws.post, ws.comb, ws.streams, T, n, D, bf16};
}

void Model::flush(std::optional<ops::HcPostArgs>& pending) {
    if (pending) backend_.hc_post(*pending);
    pending.reset();
}

// The MTP block: h = the main model's last streams at each MTP token, e = the next token's
// embedding; streams = e_proj(enorm(e)) (on every stream) + h_proj(hnorm(h)); one block on the
// MTP's own cache; its hc head and norm; the shared head. Runs after the main head (it reuses
// the stream buffers).
void Model::mtp_forward(const Workspace& ws, const CachePool& pool, const Dims& d) {
    const ModelConfig& c = cfg_;
    const MtpWeights& m = w_.mtp[0];
    const int n = c.hc_mult, D = c.hidden_size;
    const int64_t Tm = d.Tm, width = int64_t{n} * D;
    const float eps = static_cast<float>(c.rms_norm_eps), hc_eps = static_cast<float>(c.hc_eps);
    ops::StepDesc st = ws.mtp_step;
    st.T = d.Tm;
    st.B = d.Bm;
    Backend& b = backend_;
    const bool bf16 = this->bf16();
    b.gather_rows({ws.streams, ws.m_src, ws.streams_next, Tm, width});
    const ops::ActType f32 = ops::ActType::kF32;
    b.rms_norm({ws.streams_next, m.hnorm, ws.streams_next, Tm * n, D, eps, bf16});
    b.linear({ws.streams_next, &m.h_proj, ws.streams, Tm * n, D, 0, 0, 0, f32, f32,
              fp8_act(m.h_proj), bf16});
    b.embed({st.ids, &w_.embed, ws.y, Tm, 1});
    if (bf16) b.round_trip({ws.y, Tm, D, D, 1, ops::RoundTrip::kBf16});  // as in forward()
    b.rms_norm({ws.y, m.enorm, ws.y, Tm, D, eps, bf16});
    b.linear({ws.y, &m.e_proj, ws.xn, Tm, D, 0, 0, 0, f32, f32, fp8_act(m.e_proj), bf16});
    b.add_to_streams({ws.xn, ws.streams, Tm, n, D});
    if (bf16) b.round_trip({ws.streams, Tm * n, D, D, 1, ops::RoundTrip::kBf16});
    std::optional<ops::HcPostArgs> pending;
    block(ws, st, m.block, c.mtp_spec, pool.layer(c.num_layers), pending);
    flush(pending);
    b.hc_head({ws.streams, m.hc_head.fn, m.hc_head.base, m.hc_head.scale, ws.head_y, Tm, n, D, eps,
               hc_eps, bf16});
    b.rms_norm({ws.head_y, m.norm, ws.head_xn, Tm, D, eps, bf16});
    b.linear({ws.head_xn, &w_.head, ws.mtp_logits, Tm, c.vocab_size});
}

}  // namespace dsv4
