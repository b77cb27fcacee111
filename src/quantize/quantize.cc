#include "dsv4/quantize.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>

#include "base/thread_pool.h"
#include "formats/nvfp4_quant.h"
#include "formats/quant_weight.h"
#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "quantize/names.h"
#include "quantize/progress.h"
#include "quantize/quant_config.h"

namespace dsv4 {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using quant::LinearClass;

// Copied next to the weights when present, so the output folder is a complete model.
constexpr const char* kSideFiles[] = {"tokenizer.json",      "tokenizer_config.json",
                                      "tokenizer.model",     "special_tokens_map.json",
                                      "chat_template.jinja", "generation_config.json"};

// Companion tensors that carry a non-NVFP4 weight's scales; replaced by the NVFP4 ones.
constexpr const char* kOldScaleSuffixes[] = {".scale", ".weight_scale_inv"};

Expected<Json> read_json(const fs::path& path) {
    std::ifstream in(path);
    if (!in) return error(path.string(), ": cannot open");
    Json j = Json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return error(path.string(), ": not valid JSON");
    return j;
}

Status write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) return error(path.string(), ": cannot open for writing");
    out << text;
    out.close();
    if (!out) return error(path.string(), ": write failed (disk full?)");
    return Status::ok();
}

// The logical [rows, cols] of a linear from its `.weight` tensor; nullopt if it is not a 2-D
// matrix in a format bind_quant_weight reads.
std::optional<std::pair<int64_t, int64_t>> logical_shape(const TensorInfo& w) {
    if (w.shape.ndim != 2) return std::nullopt;
    switch (w.dtype) {
        case DType::kF32:
        case DType::kBF16:
        case DType::kF16:
        case DType::kF8E4M3:
            return std::make_pair(w.shape[0], w.shape[1]);
        case DType::kI8:
        case DType::kU8:
            return std::make_pair(w.shape[0], 2 * w.shape[1]);
        default:
            return std::nullopt;
    }
}

// "layers.0.attn.wq_a" for "layers.0.attn.wq_a.weight"; nullopt for names of other tensors.
std::optional<std::string> weight_module(const std::string& name) {
    constexpr std::string_view kSuffix = ".weight";
    if (name.size() <= kSuffix.size() ||
        std::string_view(name).substr(name.size() - kSuffix.size()) != kSuffix)
        return std::nullopt;
    return name.substr(0, name.size() - kSuffix.size());
}

struct Job {
    std::string prefix;  // release name without ".weight"
    QuantWeight weight;
    size_t in_bytes;  // of the input `.weight`, for the progress bar
    Nvfp4Tensor out;
};

class Quantizer {
  public:
    explicit Quantizer(const QuantizeOptions& o) : opt_(o) {}

    // Writes into a temporary folder beside the output and moves it into place only when
    // everything was written (and checked): a failed run leaves no half-written output.
    Expected<QuantizeSummary> run() {
        DSV4_RETURN_IF_ERROR(prepare_dirs());
        if (opt_.validate) DSV4_RETURN_IF_ERROR(opt_.validate(opt_.model_dir));
        std::error_code ec;
        fs::create_directories(out_, ec);
        if (ec) return error(out_.string(), ": cannot create (", ec.message(), ")");
        auto summary = write();
        if (summary && opt_.validate) {
            Status st = opt_.validate(out_.string());
            if (!st.is_ok()) summary = st.with_context("the quantized output does not load");
        }
        if (!summary) {
            fs::remove_all(out_, ec);
            return summary.status();
        }
        if (fs::exists(final_)) fs::remove_all(final_, ec);
        if (!ec) fs::rename(out_, final_, ec);
        if (ec) {
            std::error_code ignored;
            fs::remove_all(out_, ignored);
            return error(final_.string(), ": cannot move the output into place (", ec.message(),
                         ")");
        }
        return summary;
    }

  private:
    Expected<QuantizeSummary> write() {
        DSV4_ASSIGN_OR_RETURN(Json config, read_json(in_ / "config.json"));
        auto store = TensorStore::open(in_.string());
        if (!store) return store.status();
        store_ = std::make_unique<TensorStore>(std::move(store.value()));
        DSV4_RETURN_IF_ERROR(store_->rename(release_tensor_name));
        DSV4_RETURN_IF_ERROR(plan());
        DSV4_ASSIGN_OR_RETURN(Json out_config, quant::output_config(config, opt_.select, skipped_));

        quant::ProgressBar bar(store_->total_bytes(), opt_.progress);
        uint64_t done = 0;
        Json weight_map = Json::object();
        uint64_t total_size = 0;
        int index = 0;
        for (const auto& [file, names] : shards_) {
            const std::string label = "shard " + std::to_string(++index) + "/" +
                                      std::to_string(shards_.size()) + " " + file;
            SafetensorsWriter writer;
            writer.set_metadata("format", "pt");
            DSV4_RETURN_IF_ERROR(fill_shard(names, writer, bar, label, done));
            DSV4_RETURN_IF_ERROR(writer.write((out_ / file).string()));
            for (const std::string& n : writer.names()) weight_map[n] = file;
            total_size += writer.data_bytes();
            bar.step_done(done, label);
        }
        bar.finish();

        Json index_json = Json::object();
        index_json["metadata"] = {{"total_size", total_size}};
        index_json["weight_map"] = weight_map;
        DSV4_RETURN_IF_ERROR(
            write_text(out_ / "model.safetensors.index.json", index_json.dump(1) + "\n"));
        DSV4_RETURN_IF_ERROR(write_text(out_ / "config.json", out_config.dump(1) + "\n"));
        DSV4_RETURN_IF_ERROR(
            write_text(out_ / "hf_quant_config.json",
                       quant::hf_quant_config(opt_.select, skipped_).dump(1) + "\n"));
        DSV4_RETURN_IF_ERROR(copy_side_files());

        summary_.tensors_in = static_cast<int64_t>(store_->size());
        summary_.bytes_in = store_->total_bytes();
        summary_.bytes_out = total_size;
        summary_.shards = static_cast<int>(shards_.size());
        return summary_;
    }

    Status prepare_dirs() {
        in_ = fs::path(opt_.model_dir);
        std::error_code ec;
        if (!fs::is_directory(in_, ec)) return error(opt_.model_dir, ": not a model folder");
        if (opt_.out_dir.empty()) return error("no output folder given");
        final_ = fs::absolute(fs::path(opt_.out_dir), ec).lexically_normal();
        if (final_.filename().empty()) final_ = final_.parent_path();
        if (fs::exists(final_, ec)) {
            if (fs::equivalent(in_, final_, ec))
                return error("the output folder must differ from the input folder");
            if (!fs::is_directory(final_, ec))
                return error(opt_.out_dir, ": exists and is not a folder");
            if (!fs::is_empty(final_, ec) && !opt_.force)
                return error(opt_.out_dir, ": exists and is not empty (--force replaces it)");
        }
        out_ = final_.parent_path() /
               ("." + final_.filename().string() + ".partial-" + std::to_string(::getpid()));
        if (fs::exists(out_, ec)) fs::remove_all(out_, ec);
        if (!(opt_.input_amax > 0.0f))
            return error("input amax must be positive, got ", opt_.input_amax);
        return Status::ok();
    }

    // Groups tensors by shard and decides, per selected linear, whether it is quantized, kept
    // (already NVFP4) or skipped; binds every quantized weight now so that a corrupt input
    // fails before anything is written.
    Status plan() {
        for (const std::string& name : store_->names()) {
            const TensorInfo* t = store_->find(name);
            shards_[fs::path(t->file).filename().string()].push_back(name);
        }
        for (const std::string& name : store_->names()) {
            const auto module = weight_module(name);
            if (!module) continue;
            const std::string& prefix = *module;
            if (!quant::is_selected(opt_.select, quant::classify_linear(prefix))) continue;
            const TensorInfo& w = *store_->find(name);
            if (w.dtype == DType::kU8 && store_->find(prefix + ".weight_scale") != nullptr) {
                ++summary_.kept_nvfp4;  // already NVFP4: copied as it is
                continue;
            }
            const auto shape = logical_shape(w);
            if (!shape) {
                warn(prefix, ": ", dtype_name(w.dtype), " ", w.shape.str(),
                     " is not a 2-D weight dsv4 can quantize; kept as it is");
                continue;
            }
            const auto [rows, cols] = *shape;
            if (cols % kNvfp4Block != 0) {
                warn(prefix, ": input width ", cols, " is not a multiple of 16; kept as it is");
                skipped_.push_back(prefix);
                ++summary_.skipped;
                continue;
            }
            auto bound = bind_quant_weight(*store_, prefix, rows, cols);
            if (!bound) return bound.status().with_context("cannot quantize '" + prefix + "'");
            selected_.emplace(prefix, bound.value());
            for (const char* s : kOldScaleSuffixes)
                if (store_->find(prefix + s) != nullptr) consumed_.insert(prefix + s);
        }
        return Status::ok();
    }

    // Safetensors readers view tensor data in place, so each tensor must start at a multiple of
    // its element size. As the reference serializer does, tensors go in order of decreasing
    // element size (the writer pads the header to 8): the F32 scalars of the quantized
    // linears with the 4-byte copies, their U8 / E4M3 parts last.
    Status fill_shard(const std::vector<std::string>& names, SafetensorsWriter& writer,
                      quant::ProgressBar& bar, const std::string& label, uint64_t& done) {
        std::vector<std::pair<std::string, const TensorInfo*>> copies;  // release name, tensor
        std::vector<Job> jobs;
        for (const std::string& name : names) {
            const TensorInfo& t = *store_->find(name);
            const auto module = weight_module(name);
            const auto sel = module ? selected_.find(*module) : selected_.end();
            if (sel != selected_.end()) {
                jobs.push_back(Job{*module, sel->second, t.nbytes, {}});
            } else if (consumed_.count(name)) {
                done += t.nbytes;
            } else {
                copies.emplace_back(name, &t);
            }
        }
        quantize_jobs(jobs, bar, label, done);
        const float input_scale = opt_.input_amax / (6.0f * 448.0f);
        for (size_t size : {8, 4, 2, 1}) {
            for (const auto& [name, t] : copies) {
                if (dtype_size(t->dtype) != size) continue;
                writer.add(name, t->dtype, t->shape, t->data, t->nbytes);
                done += t->nbytes;
            }
            for (Job& job : jobs) {
                const int64_t rows = job.weight.rows, cols = job.weight.cols;
                if (size == 4) {
                    writer.add(job.prefix + ".weight_scale_2", DType::kF32, Shape{},
                               &job.out.global_scale, sizeof(float));
                    writer.add(job.prefix + ".input_scale", DType::kF32, Shape{}, &input_scale,
                               sizeof(float));
                } else if (size == 1) {
                    writer.add(job.prefix + ".weight", DType::kU8, {rows, cols / 2},
                               job.out.packed.data(), job.out.packed.size());
                    writer.add(job.prefix + ".weight_scale", DType::kF8E4M3,
                               {rows, cols / kNvfp4Block}, job.out.scales.data(),
                               job.out.scales.size());
                    job.out = Nvfp4Tensor{};  // the writer holds the bytes now
                }
            }
            bar.update(done, label);
        }
        summary_.quantized += static_cast<int64_t>(jobs.size());
        return Status::ok();
    }

    // Quantizes in batches of a few jobs per thread: parallel, while only a batch of float
    // copies of the weights is alive at a time.
    void quantize_jobs(std::vector<Job>& jobs, quant::ProgressBar& bar, const std::string& label,
                       uint64_t& done) {
        const int64_t batch = std::max(1, num_threads()) * 2;
        const int64_t n = static_cast<int64_t>(jobs.size());
        for (int64_t begin = 0; begin < n; begin += batch) {
            const int64_t end = std::min(n, begin + batch);
            parallel_for(end - begin, 1, [&](int64_t b, int64_t e) {
                for (int64_t i = begin + b; i < begin + e; ++i) {
                    Job& job = jobs[static_cast<size_t>(i)];
                    const QuantWeight& w = job.weight;
                    std::vector<float> x(static_cast<size_t>(w.rows * w.cols));
                    for (int64_t r = 0; r < w.rows; ++r) dequant_row(w, r, x.data() + r * w.cols);
                    job.out = nvfp4_quantize(x.data(), w.rows, w.cols);
                }
            });
            for (int64_t i = begin; i < end; ++i) done += jobs[static_cast<size_t>(i)].in_bytes;
            bar.update(done, label);
        }
    }

    Status copy_side_files() {
        for (const char* f : kSideFiles) {
            std::error_code ec;
            if (!fs::is_regular_file(in_ / f, ec)) continue;
            fs::copy_file(in_ / f, out_ / f, fs::copy_options::overwrite_existing, ec);
            if (ec) return error("copying ", f, ": ", ec.message());
        }
        return Status::ok();
    }

    template <typename... Args>
    void warn(const Args&... args) {
        summary_.warnings.push_back(str_cat(args...));
    }

    const QuantizeOptions& opt_;
    fs::path in_, out_, final_;  // out_: the temporary folder written, renamed to final_
    std::unique_ptr<TensorStore> store_;
    std::map<std::string, std::vector<std::string>> shards_;  // file -> tensor names
    std::map<std::string, QuantWeight> selected_;             // prefix -> bound input weight
    std::set<std::string> consumed_;  // old scale tensors of quantized weights
    std::vector<std::string> skipped_;
    QuantizeSummary summary_;
};

}  // namespace

Expected<QuantizeSummary> quantize_model(const QuantizeOptions& options) {
    if (options.threads > 0) set_num_threads(options.threads);
    return Quantizer(options).run();
}

}  // namespace dsv4
