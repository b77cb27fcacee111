// `dsv4 quantize`: write a checkpoint with a chosen set of linears in NVFP4 (ModelOpt layout).
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "dsv4/engine.h"
#include "dsv4/quantize.h"

namespace dsv4::cli {
namespace {

struct QuantizeArgs {
    QuantizeOptions options;
    bool experts = false, shared_experts = false, attention = false, indexer = false,
         router = false, all = false, no_progress = false;
};

int run_quantize(QuantizeArgs a) {
    QuantizeSelection& s = a.options.select;
    // Any group flag replaces the default (routed experts only) with exactly what was asked.
    if (a.experts || a.shared_experts || a.attention || a.indexer || a.router || a.all) {
        s.routed_experts = a.experts || a.all;
        s.shared_experts = a.shared_experts || a.all;
        s.attention = a.attention || a.all;
        s.indexer = a.indexer || a.all;
        s.router = a.router || a.all;
    }
    a.options.progress = !a.no_progress;
    a.options.validate = check_model_folder;
    auto summary = quantize_model(a.options);
    if (!summary) {
        print_error(summary.status());
        return kExitError;
    }
    for (const std::string& w : summary->warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    const double in_mb = static_cast<double>(summary->bytes_in) / 1e6;
    const double out_mb = static_cast<double>(summary->bytes_out) / 1e6;
    std::printf(
        "quantized %lld linears to NVFP4 (%lld already NVFP4, %lld skipped); %lld tensors "
        "in %d shards; %.1f MB -> %.1f MB (%.3fx)\n",
        static_cast<long long>(summary->quantized), static_cast<long long>(summary->kept_nvfp4),
        static_cast<long long>(summary->skipped), static_cast<long long>(summary->tensors_in),
        summary->shards, in_mb, out_mb, in_mb > 0 ? out_mb / in_mb : 0.0);
    return 0;
}

}  // namespace

void add_quantize_command(CLI::App& app) {
    auto args = std::make_shared<QuantizeArgs>();
    CLI::App* cmd = app.add_subcommand(
        "quantize", "Write a copy of a checkpoint with linears in NVFP4 (ModelOpt layout)");
    cmd->footer(
        "Without group flags only the routed experts are quantized (like NVIDIA's release).\n"
        "Example: dsv4 quantize --model models/flash --out models/flash-nvfp4 --shared-experts");
    QuantizeOptions& o = args->options;
    cmd->add_option("--model", o.model_dir, "Input model folder")->required();
    cmd->add_option("--out", o.out_dir,
                    "Output folder (created; must differ from --model; written to a temporary "
                    "folder beside it and moved into place when complete)")
        ->required();
    cmd->add_flag("--force", o.force, "Replace an existing non-empty output folder");
    cmd->add_flag("--experts", args->experts, "Routed experts (ffn.experts.E.w1/w2/w3)");
    cmd->add_flag("--shared-experts", args->shared_experts, "Shared experts");
    cmd->add_flag("--attention", args->attention,
                  "Attention projections wq_a, wq_b, wkv, wo_a, wo_b and compressor wkv/wgate");
    cmd->add_flag("--indexer", args->indexer,
                  "Indexer wq_b, weights_proj and its compressor wkv/wgate");
    cmd->add_flag("--router", args->router, "Router gate (ffn.gate)");
    cmd->add_flag("--all", args->all, "All of the groups above");
    cmd->add_flag("--mtp", o.select.mtp, "Apply the chosen groups to the MTP block too");
    cmd->add_option("--input-amax", o.input_amax,
                    "Activation amax behind the static input_scale = amax/(6*448) written for "
                    "other engines (dsv4 quantizes activations dynamically)")
        ->capture_default_str()
        ->check(finite_number(0, 1e30, true));
    cmd->add_option("--threads", o.threads, "CPU threads (0 = all)")
        ->capture_default_str()
        ->check(whole_number(0, 4096));
    cmd->add_flag("--no-progress", args->no_progress, "No progress bar on stderr");
    cmd->callback([args] { set_exit_code(run_quantize(*args)); });
}

}  // namespace dsv4::cli
