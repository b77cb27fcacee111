// dsv4_quant_eval: how far a quantized model's logits are from its reference over a fixture's
// tokens (max/mean abs error, top-1 agreement, KL), and the weight-file size ratio. Feeds the
// whole sequence in one pass, like `logits_full` of the golden fixtures.
//
//   dsv4_quant_eval --reference DIR --quantized DIR [--tokens expected.safetensors]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "dsv4/engine.h"
#include "formats/safetensors.h"
#include "logit_metrics.h"

namespace {

namespace fs = std::filesystem;

// Median over positions of the reference's top-1 minus top-2 logit: how far an argmax is from
// flipping, to read the top-1 agreement against.
double median_margin(const std::vector<float>& logits, int vocab) {
    std::vector<double> margins;
    for (size_t p = 0; p + vocab <= logits.size(); p += vocab) {
        float a = -INFINITY, b = -INFINITY;
        for (int v = 0; v < vocab; ++v) {
            const float x = logits[p + v];
            if (x > a) {
                b = a;
                a = x;
            } else if (x > b) {
                b = x;
            }
        }
        margins.push_back(a - b);
    }
    if (margins.empty()) return 0;
    std::nth_element(margins.begin(), margins.begin() + margins.size() / 2, margins.end());
    return margins[margins.size() / 2];
}

// Bytes of the model's weight files (expected.safetensors is fixture data, not weights).
uint64_t weight_bytes(const fs::path& dir) {
    uint64_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("model", 0) == 0 && e.path().extension() == ".safetensors")
            n += e.file_size();
    }
    return n;
}

dsv4::Expected<std::vector<float>> run_model(const std::string& dir,
                                             const std::vector<int32_t>& ids, int* vocab) {
    dsv4::EngineOptions o;
    o.model_dir = dir;
    o.max_context = static_cast<int64_t>(ids.size()) + 16;
    auto engine = dsv4::Engine::create(o);
    if (!engine) return engine.status().with_context(dir);
    *vocab = (*engine)->info().vocab_size;
    auto session = (*engine)->new_session();
    if (!session) return session.status();
    std::vector<float> logits;
    dsv4::Status st = (*session)->feed(ids, &logits, nullptr);
    if (!st) return st.with_context(dir);
    return logits;
}

int run(const std::string& reference, const std::string& quantized, std::string tokens) {
    if (tokens.empty()) tokens = (fs::path(reference) / "expected.safetensors").string();
    auto file = dsv4::SafetensorsFile::open(tokens);
    if (!file) {
        std::fprintf(stderr, "error: %s\n", file.status().message().c_str());
        return 1;
    }
    auto ids_or = dsv4::read_ids(**file, "input_ids");
    if (!ids_or) {
        std::fprintf(stderr, "error: %s\n", ids_or.status().message().c_str());
        return 1;
    }
    const std::vector<int32_t>& ids = *ids_or;
    int vocab = 0, vocab_q = 0;
    auto ref = run_model(reference, ids, &vocab);
    auto got = ref ? run_model(quantized, ids, &vocab_q) : ref;
    if (!ref || !got) {
        std::fprintf(stderr, "error: %s\n", (!ref ? ref : got).status().message().c_str());
        return 1;
    }
    if (vocab != vocab_q) {
        std::fprintf(stderr, "error: vocab sizes differ (%d vs %d)\n", vocab, vocab_q);
        return 1;
    }
    const auto m = dsv4::testing::compare_logits(*ref, *got, vocab);
    const double in = static_cast<double>(weight_bytes(reference));
    const double out = static_cast<double>(weight_bytes(quantized));
    std::printf("tokens            %zu\n", ids.size());
    std::printf("logit max_abs     %.4g\n", m.max_abs);
    std::printf("logit mean_abs    %.4g\n", m.mean_abs);
    std::printf("top1 agreement    %.4f\n", m.top1);
    std::printf("KL mean (nats)    %.4g\n", m.kl_mean);
    std::printf("KL max (nats)     %.4g\n", m.kl_max);
    std::printf("reference median top1-top2 margin %.4g\n", median_margin(*ref, vocab));
    std::printf("weight bytes      %.0f -> %.0f (ratio %.4f)\n", in, out, in > 0 ? out / in : 0.0);
    const dsv4::TensorInfo* want = (*file)->find("logits_full");
    if (want != nullptr && want->nbytes == ref->size() * sizeof(float)) {
        std::vector<float> w(ref->size());
        std::memcpy(w.data(), want->data, want->nbytes);
        const auto r = dsv4::testing::compare_logits(w, *ref, vocab);
        std::printf("reference vs expected.safetensors: max_abs %.3g, top1 %.4f\n", r.max_abs,
                    r.top1);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Logit distance between a quantized model and its reference"};
    std::string reference, quantized, tokens;
    app.add_option("--reference", reference, "Reference model folder")->required();
    app.add_option("--quantized", quantized, "Quantized model folder")->required();
    app.add_option("--tokens", tokens,
                   "safetensors with input_ids (default: the reference's expected.safetensors)");
    CLI11_PARSE(app, argc, argv);
    return run(reference, quantized, tokens);
}
