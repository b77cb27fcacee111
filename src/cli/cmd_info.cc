// `dsv4 info`: what a model folder holds and what running it needs.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/ranks.h"
#include "dsv4/engine.h"
#include "dsv4/parallel.h"

namespace dsv4::cli {

namespace {

struct InfoArgs {
    EngineOptions engine;
    int ranks = 1;  // > 1: also the plan over that many ranks
    int gpus = 0;   // --gpus N: --device cuda --ranks N
};

constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;

// The memory plan over `ranks` ranks (docs/parallel.md): each rank's engine made (the same
// loading as `dsv4 check --ranks`), its share of the routed experts, the weights it binds and
// what it allocates. On the CPU one engine after another (one rank's memory at a time); on GPUs
// all at once, a thread and a GPU each (run_on_ranks: they join one communicator as they are
// made).
int print_rank_plan(const EngineOptions& base, int ranks) {
    std::vector<std::string> rows(static_cast<size_t>(ranks));
    auto make = [&](const EngineOptions& o, int r) -> Status {
        auto engine = Engine::create(o);
        if (!engine) return engine.status().with_context("rank " + std::to_string(r));
        const ModelInfo& i = (*engine)->info();
        const std::string experts = std::to_string(i.experts_first) + "-" +
                                    std::to_string(i.experts_first + i.experts_local - 1) + " (" +
                                    std::to_string(i.experts_local) + " of " +
                                    std::to_string(i.experts_total) + ")";
        char line[160];
        std::snprintf(line, sizeof line, "  %4d  %-20s  %11.1f  %14.1f  %13.1f\n", r,
                      experts.c_str(), i.weight_bytes / kMiB, i.cache_pool_bytes / kMiB,
                      (*engine)->memory_in_use() / kMiB);
        rows[static_cast<size_t>(r)] = line;
        return Status::ok();
    };
    RankArgs all;
    all.ranks = ranks;
    Status made = Status::ok();
    if (base.device != "cuda") {  // ("auto" runs ranks on the CPU)
        auto group = RankGroup::in_process(ranks);
        for (int r = 0; r < ranks && made.is_ok(); ++r) {
            EngineOptions o = base;
            o.rank_group = group;
            o.rank = r;
            made = make(o, r);
        }
    } else {
        made = run_on_ranks(base, all, make);
    }
    if (!made.is_ok()) {
        print_error(made);
        return kExitError;
    }
    std::printf(
        "plan over %d ranks (expert parallelism; attention, norms, head and the shared "
        "expert on every rank, the shared expert computed on rank 0):\n",
        ranks);
    std::printf("  rank  routed experts/layer  weights MiB  cache pool MiB  allocated MiB\n");
    for (const std::string& row : rows) std::fputs(row.c_str(), stdout);
    return 0;
}

int run_info(InfoArgs a) {
    if (Status st = apply_gpus(a.gpus, a.ranks, a.engine); !st.is_ok()) {
        print_error(st);
        return kExitUsage;
    }
    const EngineOptions& o = a.engine;
    auto engine = Engine::create(o);
    if (!engine) {
        print_error(engine.status());
        return kExitError;
    }
    const ModelInfo& i = (*engine)->info();
    if (a.ranks > 1 && a.ranks > i.experts_total) {  // (before anything is printed)
        print_error(error("--ranks ", a.ranks, ": the model has ", i.experts_total,
                          " routed experts a layer, at most that many ranks"));
        return kExitError;
    }
    std::printf("model:          %s\n", i.source.c_str());
    std::printf("config:         %s\n", i.summary.c_str());
    std::printf("weights:        %.3f GiB as stored (%s)\n", i.weight_bytes / kGiB,
                i.device == "cuda"
                    ? "copied to the GPU: FP8/FP4/BF16 packed for the GEMV, F32 as is"
                    : "read in place, dequantized per row");
    for (const auto& line : i.weight_formats) std::printf("  %s\n", line.c_str());
    std::printf("kv cache:       %.1f bytes/token + %.2f MiB fixed per sequence (%s)\n",
                i.cache_bytes_per_token, i.cache_fixed_bytes / 1048576.0,
                i.cache_entry_type.c_str());
    std::printf("at %lld tokens: %.3f GiB per sequence; pool of %d sequence(s): %.3f GiB\n",
                static_cast<long long>(i.max_context), i.cache_bytes / kGiB, i.max_seqs,
                i.cache_pool_bytes / kGiB);
    std::printf("prefix:         snapshots every %lld tokens (or a multiple), %.2f MiB each\n",
                static_cast<long long>(i.snapshot_block), i.snapshot_bytes / 1048576.0);
    std::printf("step:           up to %d tokens (all rows)\n", i.step_tokens);
    std::printf("speculative:    up to %d draft(s) a step (MTP block: %s)\n", i.max_draft_tokens,
                i.has_mtp ? "yes" : "none");
    std::printf("on %-11s  %.3f GiB allocated (weights copied, cache pool, workspaces)\n",
                (i.device + ":").c_str(), (*engine)->memory_in_use() / kGiB);
    if (a.ranks <= 1) return 0;
    engine->reset();  // (one rank's engine at a time)
    return print_rank_plan(o, a.ranks);
}

}  // namespace

void add_info_command(CLI::App& app) {
    auto args = std::make_shared<InfoArgs>();
    CLI::App* cmd = app.add_subcommand("info", "Describe a model folder: config, formats, memory");
    cmd->footer("Example: dsv4 info --model tests/data/golden/fmt-nvfp4 --ranks 2");
    add_engine_options(cmd, args->engine, /*synthetic=*/true);
    cmd->add_option("--ranks", args->ranks,
                    "Also print the memory plan over N ranks: each rank's routed experts, "
                    "weights and allocation (docs/parallel.md; on GPUs, made on N GPUs)")
        ->check(CLI::Range(1, 64));
    cmd->add_option("--gpus", args->gpus,
                    "The plan over N GPUs of this machine: --device cuda --ranks N (each rank's "
                    "engine made on its GPU)")
        ->check(CLI::Range(1, 64));
    cmd->callback([args] { set_exit_code(run_info(*args)); });
}

}  // namespace dsv4::cli
