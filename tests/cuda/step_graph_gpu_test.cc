// Decode steps replayed as CUDA graphs: a repeated step shape is recorded in global capture
// mode (which any host synchronisation inside the step breaks), and each later step is one
// descriptor upload, one graph launch, one copy of the sampled ids and one wait — counted by the
// backend's transfer counters. The replayed steps give the tokens of steps enqueued op by op.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "model/model.h"

namespace dsv4 {
namespace {

struct DecodeRun {
    std::vector<std::vector<int32_t>> tokens;  // per row: the sampled tokens
    std::vector<TransferCounts> per_step;      // the backend's counts during each decode step
};

// Three rows (two greedy, one sampled at a fixed seed) prefilled, then `steps` decode steps.
DecodeRun decode(const std::string& fixture, bool recorded, int steps) {
    DecodeRun out;
    auto be = make_cuda_backend();
    EXPECT_TRUE(be.has_value()) << be.status().message();
    if (!be) return out;
    auto model = Model::load(std::string(DSV4_GOLDEN_DIR) + "/" + fixture, **be, 32);
    EXPECT_TRUE(model.has_value()) << model.status().message();
    if (!model) return out;
    Model& m = **model;
    m.set_recorded_steps(recorded);
    auto pool = CachePool::create(m.config(), **be, {4, 256});
    EXPECT_TRUE(pool.has_value()) << pool.status().message();
    if (!pool) return out;
    std::vector<CacheSlot> slots;
    for (int i = 0; i < 3; ++i) slots.push_back(std::move(*(*pool)->acquire()));
    const int V = m.config().vocab_size;
    std::mt19937 rng(7);
    std::vector<std::vector<int32_t>> prompts(3);
    std::vector<StepRow> rows(3);
    std::vector<int32_t> next(3);
    std::vector<int64_t> pos(3);
    out.tokens.resize(3);
    for (int i = 0; i < 3; ++i) {
        prompts[i].resize(3 + 5 * i);
        for (auto& id : prompts[i]) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
        rows[i].slot = slots[i].index();
        rows[i].ids = prompts[i].data();
        rows[i].len = static_cast<int32_t>(prompts[i].size());
        rows[i].sample = true;
        rows[i].sampling.temperature = i == 2 ? 0.9f : 0.0f;
        rows[i].sampling.seed = 11;
        rows[i].sampled_out = &next[i];
        pos[i] = rows[i].len;
    }
    EXPECT_TRUE(m.run_step(**pool, rows).is_ok());
    for (int s = 0; s < steps; ++s) {
        for (int i = 0; i < 3; ++i) {
            out.tokens[i].push_back(next[i]);
            rows[i].ids = &next[i];
            rows[i].len = 1;
            rows[i].pos0 = pos[i]++;
        }
        const TransferCounts before = (*be)->transfer_counts();
        const Status st = m.run_step(**pool, rows);
        EXPECT_TRUE(st.is_ok()) << st.message();
        const TransferCounts after = (*be)->transfer_counts();
        out.per_step.push_back({after.uploads - before.uploads, after.downloads - before.downloads,
                                after.synchronizes - before.synchronizes,
                                after.replays - before.replays});
    }
    return out;
}

TEST(CudaStepGraph, DecodeStepIsOneReplayWithoutHostWaitsInside) {
    DSV4_REQUIRE_GPU();
    // small-rates: dense f32 weights; fmt-official: FP8 + MXFP4 GEMVs and the grouped MoE.
    for (const char* fixture : {"small-rates", "fmt-official", "fmt-nvfp4"}) {
        SCOPED_TRACE(fixture);
        const DecodeRun graph = decode(fixture, true, 24);
        const DecodeRun eager = decode(fixture, false, 24);
        ASSERT_EQ(graph.per_step.size(), 24u);
        // Step 0 is the shape's first sight (run op by op), step 1 records it: from step 2 on,
        // each step is one replay, one upload (the descriptor), one download (the sampled ids)
        // and one wait, at its end.
        for (size_t s = 2; s < graph.per_step.size(); ++s) {
            const TransferCounts& c = graph.per_step[s];
            EXPECT_EQ(c.replays, 1) << "step " << s;
            EXPECT_EQ(c.uploads, 1) << "step " << s;
            EXPECT_EQ(c.downloads, 1) << "step " << s;
            EXPECT_EQ(c.synchronizes, 1) << "step " << s;
        }
        for (const TransferCounts& c : eager.per_step) EXPECT_EQ(c.replays, 0);
        EXPECT_EQ(graph.tokens, eager.tokens);
    }
}

// The proof above rests on global capture failing when the step waits for the device: a body
// that synchronises must not record.
TEST(CudaStepGraph, RecordingFailsWhenTheStepWaits) {
    DSV4_REQUIRE_GPU();
    auto be = make_cuda_backend();
    ASSERT_TRUE(be.has_value()) << be.status().message();
    float* x = (*be)->alloc_array<float>(256);
    auto bad = (*be)->record([&] {
        (*be)->fill(x, 1.0f, 256);
        (*be)->synchronize();
    });
    EXPECT_FALSE(bad.has_value());
    std::vector<float> host(256, 0.0f);
    auto also_bad = (*be)->record([&] { (*be)->upload(x, host.data(), 256 * sizeof(float)); });
    EXPECT_FALSE(also_bad.has_value());
    // The backend stays usable, and a clean body records and replays.
    auto good = (*be)->record([&] { (*be)->fill(x, 2.0f, 256); });
    ASSERT_TRUE(good.has_value()) << good.status().message();
    ASSERT_NE(good->get(), nullptr);
    (*be)->replay(**good);
    (*be)->download(host.data(), x, 256 * sizeof(float));
    (*be)->synchronize();
    for (float v : host) ASSERT_EQ(v, 2.0f);
    (*be)->free(x);
}

// Buffers of n floats, one per want[k], on a fresh CUDA backend; body(b, buf) issues a step's ops
// on them, run op by op, then recorded as a graph and replayed: after each, buffer k holds
// want[k] everywhere. The buffers listed in `reset` are zeroed before the recording and before
// the replay (so the replay has to write them again).
constexpr int64_t kBranchFloats = 100003;
void check_op_by_op_and_replayed(
    const std::function<void(Backend&, const std::vector<float*>&)>& body,
    const std::vector<float>& want, const std::vector<int>& reset) {
    auto be = make_cuda_backend();
    ASSERT_TRUE(be.has_value()) << be.status().message();
    Backend& b = **be;
    const int64_t n = kBranchFloats;
    std::vector<float*> buf;
    for (size_t k = 0; k < want.size(); ++k) buf.push_back(b.alloc_array<float>(n));
    auto check = [&](const char* what) {
        for (size_t k = 0; k < buf.size(); ++k) {
            std::vector<float> h(n);
            b.download(h.data(), buf[k], n * sizeof(float));
            b.synchronize();
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(h[i], want[k]) << what << ", buffer " << k << ", " << i;
        }
    };
    auto zero = [&] {
        for (int k : reset) b.fill(buf[static_cast<size_t>(k)], 0.0f, n);
    };
    auto step = [&] { body(b, buf); };
    step();
    check("op by op");
    zero();
    auto rec = b.record(step);
    ASSERT_TRUE(rec.has_value()) << rec.status().message();
    ASSERT_NE(rec->get(), nullptr);
    zero();
    b.replay(**rec);
    check("replayed");
    for (float* p : buf) b.free(p);
}

// Backend branches (branch_begin / end / join): the branch's ops see what came before the
// fork, the ops after the join see the branch's writes, run op by op and recorded as a graph
// (a fork and a join in it) and replayed.
TEST(CudaStepGraph, BranchForksAndJoins) {
    DSV4_REQUIRE_GPU();
    const int64_t n = kBranchFloats;
    auto body = [&](Backend& b, const std::vector<float*>& buf) {
        float *x = buf[0], *y = buf[1], *z = buf[2];
        b.fill(x, 1.0f, n);
        b.fill(y, 1.0f, n);
        b.branch_begin();
        for (int i = 0; i < 3; ++i) b.scale(x, 2.0f, n);  // 8
        b.branch_end();
        b.scale(y, 3.0f, n);  // beside the branch
        b.branch_join();
        b.copy(z, x, n * sizeof(float));  // after it
    };
    check_op_by_op_and_replayed(body, {8.0f, 3.0f, 8.0f}, {2});
}

// A paused branch (branch_pause / resume): the main line's ops between them run beside the
// branch's first ops, and the branch's later ops see their writes (twenty dependent launches on
// the main line, so a resume that did not wait would read y early); op by op, then recorded and
// replayed.
TEST(CudaStepGraph, BranchPausesAndResumes) {
    DSV4_REQUIRE_GPU();
    const int64_t n = kBranchFloats;
    auto body = [&](Backend& b, const std::vector<float*>& buf) {
        float *x = buf[0], *y = buf[1], *w = buf[2], *v = buf[3], *z = buf[4];
        b.fill(x, 1.0f, n);
        b.fill(y, 1.0f, n);
        b.branch_begin();
        b.scale(x, 2.0f, n);  // 2, in the branch
        b.branch_pause();
        for (int i = 0; i < 20; ++i) b.scale(y, 2.0f, n);  // 2^20, on the main line
        b.branch_resume();
        b.copy(w, y, n * sizeof(float));  // 2^20: after the main line's scales
        b.scale(x, 2.0f, n);              // 4
        b.branch_end();
        b.fill(v, 5.0f, n);  // beside the branch
        b.branch_join();
        b.copy(z, x, n * sizeof(float));  // 4: after it
    };
    check_op_by_op_and_replayed(body, {4.0f, 1048576.0f, 1048576.0f, 5.0f, 4.0f}, {2, 4});
}

}  // namespace
}  // namespace dsv4
