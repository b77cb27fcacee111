// `dsv4 info`: what a model folder holds and what running it needs.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "dsv4/engine.h"

namespace dsv4::cli {

namespace {

int run_info(const EngineOptions& o) {
    auto engine = Engine::create(o);
    if (!engine) {
        print_error(engine.status());
        return kExitError;
    }
    const ModelInfo& i = (*engine)->info();
    const double gib = 1024.0 * 1024.0 * 1024.0;
    std::printf("model:          %s\n", i.source.c_str());
    std::printf("config:         %s\n", i.summary.c_str());
    std::printf("weights:        %.3f GiB as stored (%s)\n", i.weight_bytes / gib,
                i.device == "cuda"
                    ? "copied to the GPU: FP8/FP4/BF16 packed for the GEMV, F32 as is"
                    : "read in place, dequantized per row");
    for (const auto& line : i.weight_formats) std::printf("  %s\n", line.c_str());
    std::printf("kv cache:       %.1f bytes/token + %.2f MiB fixed per sequence (%s)\n",
                i.cache_bytes_per_token, i.cache_fixed_bytes / 1048576.0,
                i.cache_entry_type.c_str());
    std::printf("at %lld tokens: %.3f GiB per sequence; pool of %d sequence(s): %.3f GiB\n",
                static_cast<long long>(i.max_context), i.cache_bytes / gib, i.max_seqs,
                i.cache_pool_bytes / gib);
    std::printf("step:           up to %d tokens (all rows)\n", i.step_tokens);
    std::printf("on %-11s  %.3f GiB allocated (weights copied, cache pool, workspaces)\n",
                (i.device + ":").c_str(), (*engine)->memory_in_use() / gib);
    return 0;
}

}  // namespace

void add_info_command(CLI::App& app) {
    auto opts = std::make_shared<EngineOptions>();
    CLI::App* cmd = app.add_subcommand("info", "Describe a model folder: config, formats, memory");
    cmd->footer("Example: dsv4 info --model tests/data/golden/fmt-nvfp4");
    add_engine_options(cmd, *opts, /*synthetic=*/true);
    cmd->callback([opts] { set_exit_code(run_info(*opts)); });
}

}  // namespace dsv4::cli
