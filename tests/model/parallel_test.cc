// Ranks (include/dsv4/parallel.h, docs/parallel.md): a model whose routed experts are split over
// 2 or 3 in-process ranks gives one rank's logits (to float rounding: the experts' outputs are
// summed in another order) and the same greedy tokens, prefill and decode, every rank the same
// bits; the shares cover every expert once; misuse is refused with a clear error. Ranks as
// processes (RankGroup::connect, over TCP on this host) give the in-process ranks' bits, fail
// cleanly when a rank goes away or never comes, see a rank's process end outside the sums, and
// run `dsv4 check`, `generate` and `bench` in two processes; a rank that leaves an in-process
// group fails the others instead of hanging.
#include "dsv4/parallel.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dsv4/engine.h"
#include "engine/rank_group.h"
#include "fixture_util.h"
#include "formats/safetensors.h"
#include "ops/collective.h"

namespace dsv4 {
namespace {

using test::fixture_ids;
using test::max_abs_diff;

TEST(Ranks, ExpertSharesCoverEveryExpertOnce) {
    for (int E : {1, 7, 16, 256}) {
        for (int size = 1; size <= std::min(E, 9); ++size) {
            int next = 0;
            for (int r = 0; r < size; ++r) {
                const ops::ExpertShard s = ops::expert_shard(E, r, size);
                EXPECT_EQ(s.first, next) << E << " experts, rank " << r << " of " << size;
                EXPECT_GE(s.count, E / size);
                EXPECT_LE(s.count, E / size + 1);
                next = s.first + s.count;
            }
            EXPECT_EQ(next, E);
        }
    }
}

std::string fixture_dir(const std::string& name) {
    return name.rfind("dsref", 0) == 0 ? std::string(DSV4_DSREF_DIR) + "/" + name
                                       : std::string(DSV4_GOLDEN_DIR) + "/" + name;
}

// What one rank computed: the prompt's logits [n, V] (prefill steps of up to 128 tokens), then
// the logits of 4 greedy tokens fed one at a time (decode steps), and those tokens.
struct RankRun {
    std::vector<float> prefill, decode;
    std::vector<int32_t> tokens;
};

RankRun run(const std::string& dir, const std::shared_ptr<RankGroup>& group, int rank) {
    RankRun out;
    EngineOptions o;
    o.model_dir = dir;
    o.max_context = 512;  // (the fixtures' prompts are up to 300 tokens)
    o.rank_group = group;
    o.rank = rank;
    auto e = Engine::create(o);
    EXPECT_TRUE(e.has_value()) << (e ? "" : e.status().message());
    if (!e) return out;
    auto s = (*e)->new_session();
    EXPECT_TRUE(s.has_value());
    if (!s) return out;
    const std::vector<int32_t> ids = fixture_ids(dir);
    std::vector<float> last;
    const Status fed = (*s)->feed(ids, &out.prefill, &last);
    EXPECT_TRUE(fed.is_ok()) << fed.message();
    const int64_t V = (*e)->info().vocab_size;
    for (int i = 0; i < 4 && static_cast<int64_t>(last.size()) == V; ++i) {
        int32_t best = 0;
        for (int64_t v = 1; v < V; ++v)
            if (last[static_cast<size_t>(v)] > last[static_cast<size_t>(best)])
                best = static_cast<int32_t>(v);
        out.tokens.push_back(best);
        EXPECT_TRUE((*s)->feed({best}, nullptr, &last).is_ok());
        out.decode.insert(out.decode.end(), last.begin(), last.end());
    }
    return out;
}

class RanksMatchOneRank : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(RanksMatchOneRank, LogitsAndGreedyTokens) {
    const auto& [name, size] = GetParam();
    const std::string dir = fixture_dir(name);
    const RankRun one = run(dir, nullptr, 0);
    ASSERT_FALSE(one.tokens.empty());
    auto group = RankGroup::in_process(size);
    std::vector<RankRun> ranks(static_cast<size_t>(size));
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r)
        threads.emplace_back([&, r] { ranks[static_cast<size_t>(r)] = run(dir, group, r); });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < size; ++r) {
        const RankRun& got = ranks[static_cast<size_t>(r)];
        SCOPED_TRACE(name + ", rank " + std::to_string(r) + " of " + std::to_string(size));
        // The routed sum is added per rank and then over the ranks, not in slot order: float
        // rounding of logits of magnitude ~1-10 (measured ~1e-6).
        EXPECT_LE(max_abs_diff(got.prefill, one.prefill), 1e-4);
        EXPECT_LE(max_abs_diff(got.decode, one.decode), 1e-4);
        EXPECT_EQ(got.tokens, one.tokens);
        // The sum over the ranks is added in rank order on every rank: the same bits.
        EXPECT_EQ(got.prefill, ranks[0].prefill);
        EXPECT_EQ(got.decode, ranks[0].decode);
    }
    std::printf("[ranks] %-12s %d ranks: max |logit - one rank's| prefill %.3g, decode %.3g\n",
                name.c_str(), size, max_abs_diff(ranks[0].prefill, one.prefill),
                max_abs_diff(ranks[0].decode, one.decode));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RanksMatchOneRank,
                         ::testing::Combine(::testing::Values("fmt-nvfp4", "x-hash2",
                                                              "dsref-pub-a"),
                                            ::testing::Values(2, 3)));

// Engine::create refuses `o` with a one-line error containing `text`.
void expect_refused(const EngineOptions& o, const std::string& text) {
    auto e = Engine::create(o);
    ASSERT_FALSE(e.has_value()) << text;
    EXPECT_NE(e.status().message().find(text), std::string::npos) << e.status().message();
}

TEST(Ranks, RefusedWhereNotSupported) {
    EngineOptions o;
    o.model_dir = fixture_dir("fmt-nvfp4");
    o.rank_group = RankGroup::in_process(2);
    o.rank = 2;
    expect_refused(o, "rank 2 of a group of 2");
    o.rank = 0;
    // Two ranks in one process on CUDA need two GPUs: refused by a build without CUDA, on a
    // machine without a GPU, or with one GPU (tests/cuda's gpu2_golden.* run them on two).
    o.device = "cuda";
    {
        auto e = Engine::create(o);
        ASSERT_FALSE(e.has_value());
        const std::string& why = e.status().message();
        EXPECT_TRUE(why.find("CUDA") != std::string::npos ||
                    why.find("need a GPU each") != std::string::npos)
            << why;
    }
    o.device = "cpu";
    o.numerics = "reference";
    expect_refused(o, "not split over ranks");
    // More ranks than routed experts (16): rank 0 of 17 would hold none.
    o.numerics = "float";
    o.rank_group = RankGroup::in_process(17);
    expect_refused(o, "17 ranks for 16 routed experts");
}

// A rank of an in-process group that leaves (its run ended or failed: RankGroup::leave) fails
// the others' sums with an error, x unchanged, instead of leaving them waiting for it.
TEST(Ranks, ALeavingRankFailsTheOthersInsteadOfHanging) {
    auto group = RankGroup::in_process(3);
    std::vector<std::vector<float>> x(3, std::vector<float>(5, 1.0f));
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r)
        threads.emplace_back([&, r] {
            group->impl().collective(r)->all_reduce_sum(x[static_cast<size_t>(r)].data(), 5);
        });
    for (std::thread& t : threads) t.join();
    EXPECT_EQ(x[0], std::vector<float>(5, 3.0f));
    threads.clear();
    // Ranks 0 and 1 sum again; rank 2 leaves instead of joining (before or while they wait).
    for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
            group->impl().collective(r)->all_reduce_sum(x[static_cast<size_t>(r)].data(), 5);
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    group->leave(2);
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(x[static_cast<size_t>(r)], std::vector<float>(5, 3.0f)) << "rank " << r;
        const Status st = group->impl().collective(r)->status();
        ASSERT_FALSE(st.is_ok());
        EXPECT_NE(st.message().find("rank 2 left the group"), std::string::npos) << st.message();
    }
    // Later sums fail at once.
    group->impl().collective(0)->all_reduce_sum(x[0].data(), 5);
    EXPECT_EQ(x[0], std::vector<float>(5, 3.0f));
}

// A port free on 127.0.0.1 now (bound and released: another program could take it meanwhile).
int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

std::string local(int port) {
    return "127.0.0.1:" + std::to_string(port);
}

// `size` ranks joined over TCP from threads of this process (each as its own process would).
std::vector<std::shared_ptr<RankGroup>> connect_all(int size) {
    const std::string at = local(free_port());
    std::vector<std::shared_ptr<RankGroup>> groups(static_cast<size_t>(size));
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r)
        threads.emplace_back([&, r] {
            auto g = RankGroup::connect(r, size, at, 10.0);
            EXPECT_TRUE(g.has_value()) << (g ? "" : g.status().message());
            if (g) groups[static_cast<size_t>(r)] = *g;
        });
    for (std::thread& t : threads) t.join();
    return groups;
}

TEST(RanksAsProcesses, OverTcpGiveTheInProcessBits) {
    const std::string dir = fixture_dir("fmt-nvfp4");
    const int size = 3;
    auto in_process = RankGroup::in_process(size);
    auto tcp = connect_all(size);
    ASSERT_TRUE(tcp[0] && tcp[1] && tcp[2]);
    std::vector<RankRun> a(size), b(size);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
        threads.emplace_back([&, r] { a[static_cast<size_t>(r)] = run(dir, in_process, r); });
        threads.emplace_back(
            [&, r] { b[static_cast<size_t>(r)] = run(dir, tcp[static_cast<size_t>(r)], r); });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < size; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        ASSERT_FALSE(b[static_cast<size_t>(r)].tokens.empty());
        EXPECT_EQ(b[static_cast<size_t>(r)].prefill, a[0].prefill);
        EXPECT_EQ(b[static_cast<size_t>(r)].decode, a[0].decode);
        EXPECT_EQ(b[static_cast<size_t>(r)].tokens, a[0].tokens);
    }
}

TEST(RanksAsProcesses, SumsSharedValuesAndALostRank) {
    const int size = 3;
    auto groups = connect_all(size);
    ASSERT_TRUE(groups[0] && groups[1] && groups[2]);
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    const int64_t n = 100003;  // (past a socket buffer)
    std::vector<std::vector<float>> x(size, std::vector<float>(n));
    for (auto& v : x)
        for (float& f : v) f = nd(rng);
    std::vector<float> want(static_cast<size_t>(n), 0.0f);  // rank order, as the group adds
    for (int r = 0; r < size; ++r)
        for (int64_t i = 0; i < n; ++i)
            want[static_cast<size_t>(i)] += x[r][static_cast<size_t>(i)];
    std::vector<std::string> shared(size);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r)
        threads.emplace_back([&, r] {
            ops::Collective* c = groups[static_cast<size_t>(r)]->impl().collective(r);
            c->all_reduce_sum(x[static_cast<size_t>(r)].data(), n);
            shared[static_cast<size_t>(r)] =
                c->shared_once([r] { return "made by rank " + std::to_string(r); });
        });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < size; ++r) {
        EXPECT_EQ(x[static_cast<size_t>(r)], want) << "rank " << r;
        EXPECT_EQ(shared[static_cast<size_t>(r)], "made by rank 0");
        EXPECT_TRUE(groups[static_cast<size_t>(r)]->impl().collective(r)->status().is_ok());
    }
    // Rank 2 goes away (its process would exit: its connection closes): the next sum fails on
    // the others with an error, leaving x as it was, instead of waiting forever.
    groups[2].reset();
    std::vector<float> before0 = x[0], before1 = x[1];
    threads.clear();
    for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
            groups[static_cast<size_t>(r)]->impl().collective(r)->all_reduce_sum(
                x[static_cast<size_t>(r)].data(), n);
        });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
        const Status st = groups[static_cast<size_t>(r)]->impl().collective(r)->status();
        EXPECT_FALSE(st.is_ok()) << "rank " << r;
        if (!st.is_ok()) {
            EXPECT_NE(st.message().find("the sum"), std::string::npos) << st.message();
        }
    }
    EXPECT_EQ(x[0], before0);
    EXPECT_EQ(x[1], before1);
    // An engine for a rank this process does not run is refused.
    EngineOptions o;
    o.model_dir = fixture_dir("fmt-nvfp4");
    o.rank_group = groups[0];
    o.rank = 1;
    expect_refused(o, "rank 1 runs in another process");
}

// What a group's watch (RankGroup::on_lost) reported.
struct Seen {
    std::mutex m;
    std::condition_variable cv;
    std::vector<std::string> why;
    // The messages seen within `ms` once `n` have come (or the time is up).
    std::vector<std::string> wait(size_t n, int ms) {
        std::unique_lock<std::mutex> lock(m);
        cv.wait_for(lock, std::chrono::milliseconds(ms), [&] { return why.size() >= n; });
        return why;
    }
};

// What `group`'s watch reports, from now on.
std::shared_ptr<Seen> watch(RankGroup& group, RankGroupWatch what = {}) {
    auto s = std::make_shared<Seen>();
    group.on_lost(
        [s](const std::string& why) {
            std::lock_guard<std::mutex> lock(s->m);
            s->why.push_back(why);
            s->cv.notify_all();
        },
        what);
    return s;
}

// The watch (RankGroup::on_lost): a rank's process that ends is seen by the ranks connected to
// it while none of them is in a sum (on a GPU they would be waiting inside NCCL), once each; a
// rank's own leaving is no loss to itself.
TEST(RanksAsProcesses, ALostRankIsSeenOutsideTheSums) {
    auto groups = connect_all(3);
    ASSERT_TRUE(groups[0] && groups[1] && groups[2]);
    std::vector<std::shared_ptr<Seen>> seen;
    for (int r = 0; r < 3; ++r) seen.push_back(watch(*groups[static_cast<size_t>(r)]));
    // Rank 2's process ends: rank 0 (its only connection) sees it; rank 1 does not (rank 0 is
    // still there).
    groups[2].reset();
    EXPECT_EQ(seen[0]->wait(1, 5000),
              std::vector<std::string>{"rank 0: the connection to rank 2 closed (its process "
                                       "ended, or its host went away)"});
    EXPECT_TRUE(seen[1]->wait(1, 300).empty());
    EXPECT_TRUE(seen[2]->wait(1, 0).empty());  // (destroyed before anything closed)
    // Rank 1 leaves (its run ended): rank 1 sees nothing of its own leaving, rank 0 (watching
    // no more: once) nothing new.
    groups[1]->leave(1);
    EXPECT_TRUE(seen[1]->wait(1, 300).empty());
    EXPECT_EQ(seen[0]->wait(2, 300).size(), 1u);
    // The sums notice by themselves: rank 0's next one fails.
    float x = 1.0f;
    groups[0]->impl().collective(0)->all_reduce_sum(&x, 1);
    EXPECT_FALSE(groups[0]->impl().collective(0)->status().is_ok());
    EXPECT_EQ(x, 1.0f);

    // Two ranks: rank 0's process ending reaches rank 1.
    auto two = connect_all(2);
    ASSERT_TRUE(two[0] && two[1]);
    auto second = watch(*two[1]);
    two[0].reset();
    EXPECT_EQ(second->wait(1, 5000),
              std::vector<std::string>{"rank 1: the connection to rank 0 closed (its process "
                                       "ended, or its host went away)"});
}

// The watch's step timeout (RankGroupWatch::step_timeout_s): a step that ends in time is no
// loss; one that outlives it (here a sum that rank 1, hung alive, never joins) is, once: the
// group shuts its connections down, so the waiting sum fails with that reason and rank 1 sees
// rank 0 go.
TEST(RanksAsProcesses, AStepOutlivingItsTimeoutIsALoss) {
    auto groups = connect_all(2);
    ASSERT_TRUE(groups[0] && groups[1]);
    auto seen0 = watch(*groups[0], {/*hangups=*/false, /*step_timeout_s=*/0.3});
    auto seen1 = watch(*groups[1]);
    RankGroup::Impl& g0 = groups[0]->impl();
    g0.step_begin();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    g0.step_end();
    EXPECT_TRUE(seen0->wait(1, 600).empty());
    const std::string why =
        "rank 0: a step has not ended within the step timeout (0.3 s): another rank may be hung";
    g0.step_begin();
    float x = 1.0f;
    g0.collective(0)->all_reduce_sum(&x, 1);  // (returns once the watch shuts the connections)
    g0.step_end();
    EXPECT_EQ(g0.collective(0)->status().message(), why);
    EXPECT_EQ(x, 1.0f);
    EXPECT_EQ(seen0->wait(1, 1000), std::vector<std::string>{why});
    EXPECT_EQ(seen1->wait(1, 5000),
              std::vector<std::string>{"rank 1: the connection to rank 0 closed (its process "
                                       "ended, or its host went away)"});
    EXPECT_EQ(seen0->wait(2, 300).size(), 1u);
}

TEST(RanksAsProcesses, JoiningFailsWithAClearError) {
    auto refused = [](int rank, int ranks, const std::string& at, double timeout,
                      const std::string& text) {
        auto g = RankGroup::connect(rank, ranks, at, timeout);
        ASSERT_FALSE(g.has_value()) << text;
        EXPECT_NE(g.status().message().find(text), std::string::npos) << g.status().message();
    };
    refused(1, 2, local(free_port()), 0.3, "no rank 0 at");
    refused(0, 2, local(free_port()), 0.3, "0 of 1 ranks joined");
    refused(0, 2, "localhost", 1, "expected host:port");
    refused(0, 2, "localhost:99999", 1, "the port must be");
    refused(2, 2, "localhost:1234", 1, "0 <= rank < ranks");
    // A rank started with another rank count.
    const std::string at = local(free_port());
    std::thread other([&] { (void)RankGroup::connect(1, 3, at, 2.0); });
    refused(0, 2, at, 2.0, "rank 1 was started with 3 ranks, rank 0 with 2");
    other.join();
}

// `dsv4 check` as two processes, rank 0 and rank 1 of 2, on one host.
TEST(RanksAsProcesses, CheckCommandInTwoProcesses) {
    const std::string dir = fixture_dir("fmt-nvfp4");
    const std::string at = local(free_port());
    const std::string out = ::testing::TempDir() + "ranks_check_";
    auto cmd = [&](int r) {
        return std::string(DSV4_CLI_PATH) + " check --device cpu --model " + dir +
               " --ranks 2 --rank " + std::to_string(r) + " --rendezvous " + at + " > " + out +
               std::to_string(r) + " 2>&1";
    };
    const std::string both =
        cmd(1) + " & p=$!; " + cmd(0) + "; r0=$?; wait $p; r1=$?; exit $((r0 + r1))";
    EXPECT_EQ(std::system(both.c_str()), 0);
    for (int r = 0; r < 2; ++r) {
        std::ifstream f(out + std::to_string(r));
        std::stringstream ss;
        ss << f.rdbuf();
        EXPECT_NE(ss.str().find("PASS on cpu, rank " + std::to_string(r) + " of 2 processes"),
                  std::string::npos)
            << ss.str();
    }
}

std::string read_file(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// `dsv4 generate` and `dsv4 bench` over ranks: the same text on 1 rank, 2 in-process ranks and
// rank 0 of two processes (rank 1 prints nothing); bench prints its table once.
TEST(RanksAsProcesses, GenerateAndBenchCommands) {
    const std::string dir = fixture_dir("fmt-nvfp4");
    const std::string out = ::testing::TempDir() + "ranks_generate_";
    const std::string gen = std::string(DSV4_CLI_PATH) + " generate --device cpu --model " + dir +
                            " --prompt-ids 1,2,3 --max-tokens 8 --temperature 0.8 --seed 7";
    ASSERT_EQ(std::system((gen + " > " + out + "one 2>/dev/null").c_str()), 0);
    ASSERT_EQ(std::system((gen + " --ranks 2 > " + out + "two 2>/dev/null").c_str()), 0);
    const std::string at = local(free_port());
    auto cmd = [&](int r) {
        return gen + " --ranks 2 --rank " + std::to_string(r) + " --rendezvous " + at + " > " +
               out + "p" + std::to_string(r) + " 2>/dev/null";
    };
    const std::string both =
        cmd(1) + " & p=$!; " + cmd(0) + "; r0=$?; wait $p; r1=$?; exit $((r0 + r1))";
    EXPECT_EQ(std::system(both.c_str()), 0);
    const std::string one = read_file(out + "one");
    EXPECT_EQ(std::count(one.begin(), one.end(), ','), 7) << one;  // 8 token ids
    EXPECT_EQ(read_file(out + "two"), one);
    EXPECT_EQ(read_file(out + "p0"), one);
    EXPECT_EQ(read_file(out + "p1"), "");

    const std::string bench = std::string(DSV4_CLI_PATH) + " bench --device cpu --model " + dir +
                              " --prompt-len 16 --decode 4 --repeats 1 --ranks 2 > " + out +
                              "bench 2>&1";
    ASSERT_EQ(std::system(bench.c_str()), 0);
    const std::string table = read_file(out + "bench");
    EXPECT_NE(table.find(", 2 ranks"), std::string::npos) << table;
    size_t headers = 0;
    for (size_t at_ = table.find("| context |"); at_ != std::string::npos;
         at_ = table.find("| context |", at_ + 1))
        ++headers;
    EXPECT_EQ(headers, 1u) << table;
}

// --processes: one command line, rank 0 starts rank 1 as a process of its own (a free local
// port for the rendezvous) and waits for it; check passes on both, generate prints the one-rank
// text once.
TEST(RanksAsProcesses, StartedByRankZero) {
    const std::string dir = fixture_dir("fmt-nvfp4");
    const std::string out = ::testing::TempDir() + "ranks_started_";
    const std::string check = std::string(DSV4_CLI_PATH) + " check --device cpu --model " + dir +
                              " --ranks 2 --processes > " + out + "check 2>&1";
    EXPECT_EQ(std::system(check.c_str()), 0);
    const std::string report = read_file(out + "check");
    for (int r = 0; r < 2; ++r)
        EXPECT_NE(report.find("PASS on cpu, rank " + std::to_string(r) + " of 2 processes"),
                  std::string::npos)
            << report;

    const std::string gen = std::string(DSV4_CLI_PATH) + " generate --device cpu --model " + dir +
                            " --prompt-ids 1,2,3 --max-tokens 8 --temperature 0.8 --seed 7";
    ASSERT_EQ(std::system((gen + " > " + out + "one 2>/dev/null").c_str()), 0);
    ASSERT_EQ(std::system((gen + " --ranks 3 --processes > " + out + "three 2>/dev/null").c_str()),
              0);
    const std::string one = read_file(out + "one");
    EXPECT_EQ(std::count(one.begin(), one.end(), ','), 7) << one;  // 8 token ids
    EXPECT_EQ(read_file(out + "three"), one);
}

// Under a parallel launcher (mpirun, srun) --rank and --ranks come from its environment:
// two processes given only --rendezvous, one as Open MPI, one as MPICH's Hydra would start it.
TEST(RanksAsProcesses, RankAndSizeFromTheLauncher) {
    const std::string dir = fixture_dir("fmt-nvfp4");
    const std::string at = local(free_port());
    const std::string out = ::testing::TempDir() + "ranks_launcher_";
    const std::string check = std::string(DSV4_CLI_PATH) + " check --device cpu --model " + dir +
                              " --rendezvous " + at + " > " + out;
    const std::string both = "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 " + check +
                             "1 2>&1 & p=$!; PMI_RANK=0 PMI_SIZE=2 " + check +
                             "0 2>&1; r0=$?; wait $p; r1=$?; exit $((r0 + r1))";
    EXPECT_EQ(std::system(both.c_str()), 0);
    for (int r = 0; r < 2; ++r) {
        const std::string report = read_file(out + std::to_string(r));
        EXPECT_NE(report.find("PASS on cpu, rank " + std::to_string(r) + " of 2 processes"),
                  std::string::npos)
            << report;
    }
    // A size that disagrees with --ranks, and a rank that is not a number: one-line errors.
    const std::string base =
        std::string(DSV4_CLI_PATH) + " check --device cpu --model " + dir + " --rendezvous " + at;
    EXPECT_NE(
        std::system(
            ("SLURM_PROCID=0 SLURM_NTASKS=3 " + base + " --ranks 2 2> " + out + "size").c_str()),
        0);
    EXPECT_NE(read_file(out + "size").find("the launcher started 3 processes (SLURM_NTASKS)"),
              std::string::npos);
    EXPECT_NE(std::system(("PMI_RANK=x PMI_SIZE=2 " + base + " 2> " + out + "rank").c_str()), 0);
    EXPECT_NE(read_file(out + "rank").find("PMI_RANK='x' is not a rank"), std::string::npos);
}

}  // namespace
}  // namespace dsv4
