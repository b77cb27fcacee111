// Tokenizer throughput on English and on CJK text, single thread, on Google Benchmark (its
// bytes_per_second is the MB/s of UTF-8 input). The corpora are files already on the machine
// (licenses and package docs for English; vim's Japanese/Chinese tutors and GnuPG's Japanese
// help for CJK, else the CJK golden cases), so the numbers can be reproduced anywhere.
// Encode/cold is one pass with an empty piece cache (a fresh tokenizer each iteration, its load
// not timed), Encode/warm the steady state, Decode the way back.
//
//   tokenizer_bench [benchmark flags] [--tokenizer PATH] [--english FILE]... [--cjk FILE]...
//                   [--mb N]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dsv4/tokenizer.h"

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

bool has_cjk(std::string_view line) {
    // Lead bytes E3..E9 cover U+3000..U+9FFF (kana and the common ideographs).
    return std::any_of(line.begin(), line.end(), [](char c) {
        const auto b = static_cast<unsigned char>(c);
        return b >= 0xE3 && b <= 0xE9;
    });
}

std::string cjk_lines(const std::string& text) {
    std::string out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (has_cjk(line)) out += line + "\n";
    }
    return out;
}

// The CJK strings of the golden cases (JSON "text" values containing CJK), unescaped
// crudely: enough for a fallback corpus.
std::string cjk_from_cases(const fs::path& cases) {
    std::string out;
    std::istringstream in(read_file(cases));
    std::string line;
    while (std::getline(in, line)) {
        const size_t start = line.find("\"text\": \"");
        const size_t end = line.find("\", \"ids\"");
        if (start == std::string::npos || end == std::string::npos) continue;
        std::string text = line.substr(start + 9, end - start - 9);
        if (has_cjk(text)) out += text + "\n";
    }
    return out;
}

std::string gather(const std::vector<fs::path>& files, bool only_cjk, size_t limit) {
    std::string corpus;
    for (const fs::path& f : files) {
        if (!fs::is_regular_file(f)) continue;
        std::string text = read_file(f);
        corpus += only_cjk ? cjk_lines(text) : text;
        if (corpus.size() >= limit) break;
    }
    return corpus;
}

std::vector<fs::path> english_defaults() {
    std::vector<fs::path> files;
    for (const char* dir : {"/usr/share/common-licenses", "/usr/share/doc"}) {
        if (!fs::is_directory(dir)) continue;
        for (const auto& e :
             fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied)) {
            const std::string name = e.path().filename().string();
            if (e.is_regular_file() &&
                (name == "copyright" || e.path().parent_path() == "/usr/share/common-licenses")) {
                files.push_back(e.path());
            }
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

// The loaded tokenizer file and the two corpora, set up by main before the benchmarks run.
struct Setup {
    std::string tokenizer;
    std::string english, cjk;
} g_setup;

dsv4::Tokenizer load_or_die() {
    auto tok = dsv4::Tokenizer::load(g_setup.tokenizer);
    if (!tok) {
        std::fprintf(stderr, "error: %s (run tools/setup.sh)\n", tok.status().message().c_str());
        std::exit(1);
    }
    return std::move(*tok);
}

const std::string& corpus(const benchmark::State& state) {
    return state.range(0) == 0 ? g_setup.english : g_setup.cjk;
}

void report(benchmark::State& state, size_t bytes, size_t tokens) {
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
    state.counters["tokens/byte"] = static_cast<double>(tokens) / static_cast<double>(bytes);
    state.SetLabel(state.range(0) == 0 ? "english" : "cjk");
}

void BM_EncodeCold(benchmark::State& state) {
    const std::string& text = corpus(state);
    size_t tokens = 0;
    for (auto _ : state) {
        state.PauseTiming();
        dsv4::Tokenizer tok = load_or_die();
        state.ResumeTiming();
        tokens = tok.encode(text).size();
    }
    report(state, text.size(), tokens);
}

void BM_EncodeWarm(benchmark::State& state) {
    const std::string& text = corpus(state);
    dsv4::Tokenizer tok = load_or_die();
    size_t tokens = tok.encode(text).size();  // fills the piece cache
    for (auto _ : state) tokens = tok.encode(text).size();
    report(state, text.size(), tokens);
}

void BM_Decode(benchmark::State& state) {
    const std::string& text = corpus(state);
    dsv4::Tokenizer tok = load_or_die();
    const std::vector<int32_t> ids = tok.encode(text);
    std::string back;
    for (auto _ : state) benchmark::DoNotOptimize(back = tok.decode(ids));
    if (back != text) state.SkipWithError("the corpus does not decode back");
    report(state, text.size(), ids.size());
}

BENCHMARK(BM_EncodeCold)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_EncodeWarm)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);  // takes its own --benchmark_* flags out of argv
    std::string tokenizer = DSV4_TOKENIZER_JSON;
    std::vector<fs::path> english;
    std::vector<fs::path> cjk;
    double megabytes = 8;
    for (int i = 1; i < argc; ++i) {
        const bool has_value = i + 1 < argc;
        if (!std::strcmp(argv[i], "--tokenizer") && has_value) {
            tokenizer = argv[++i];
        } else if (!std::strcmp(argv[i], "--english") && has_value) {
            english.emplace_back(argv[++i]);
        } else if (!std::strcmp(argv[i], "--cjk") && has_value) {
            cjk.emplace_back(argv[++i]);
        } else if (!std::strcmp(argv[i], "--mb") && has_value) {
            megabytes = std::atof(argv[++i]);
        } else {
            std::fprintf(stderr,
                         "usage: %s [--benchmark_...] [--tokenizer PATH] [--english FILE]... "
                         "[--cjk FILE]... [--mb N]\n",
                         argv[0]);
            return 2;
        }
    }
    if (!(megabytes > 0 && megabytes <= 4096)) {
        std::fprintf(stderr, "error: --mb must be in (0, 4096]\n");
        return 2;
    }
    const auto limit = static_cast<size_t>(megabytes * 1e6);
    if (english.empty()) english = english_defaults();
    if (cjk.empty()) {
        cjk = {"/usr/share/vim/vim90/tutor/tutor.ja.utf-8",
               "/usr/share/vim/vim90/tutor/tutor.zh_cn.utf-8",
               "/usr/share/vim/vim90/tutor/tutor.zh_tw.utf-8", "/usr/share/gnupg/help.ja.txt"};
    }
    std::string english_text = gather(english, false, limit);
    std::string cjk_text = gather(cjk, true, limit);
    if (cjk_text.empty()) cjk_text = cjk_from_cases(DSV4_TOKENIZER_CASES);
    if (english_text.empty() || cjk_text.empty()) {
        std::fprintf(stderr, "error: no corpus text found; pass --english / --cjk files\n");
        return 1;
    }
    // Small corpora are repeated up to the requested size (the warm numbers then measure the
    // piece cache, which is what steady-state serving sees).
    for (std::string* text : {&english_text, &cjk_text}) {
        std::fprintf(stderr, "corpus: %.2f MB unique\n", static_cast<double>(text->size()) / 1e6);
        const std::string unit = *text;
        while (text->size() < limit) *text += unit;
        text->resize(std::min(text->size(), limit));
        // Cut at a character boundary.
        while (!text->empty() && (static_cast<unsigned char>(text->back()) & 0xC0) == 0x80) {
            text->pop_back();
        }
        if (!text->empty() && static_cast<unsigned char>(text->back()) >= 0xC0) text->pop_back();
    }
    g_setup = {tokenizer, std::move(english_text), std::move(cjk_text)};
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
