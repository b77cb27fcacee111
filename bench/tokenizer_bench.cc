// Tokenizer throughput (MB/s of UTF-8 input) on English and on CJK text, single thread.
// The corpora are files already on the machine (licenses and package docs for English; vim's
// Japanese/Chinese tutors and GnuPG's Japanese help for CJK, else the CJK golden cases), so
// the numbers can be reproduced anywhere. "cold" is the first pass with an empty piece cache,
// "warm" the best of later passes.
//
//   tokenizer_bench [--tokenizer PATH] [--english FILE]... [--cjk FILE]... [--mb N]
#include <algorithm>
#include <chrono>
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

struct Result {
    double cold_mb_s = 0;
    double warm_mb_s = 0;
    double tokens_per_byte = 0;
    double decode_mb_s = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Result run(const std::string& tokenizer_path, const std::string& corpus) {
    // A fresh tokenizer per corpus, so "cold" starts with an empty piece cache.
    auto tok = dsv4::Tokenizer::load(tokenizer_path);
    if (!tok) {
        std::fprintf(stderr, "error: %s (run tools/setup.sh)\n", tok.status().message().c_str());
        std::exit(1);
    }
    const double mb = static_cast<double>(corpus.size()) / 1e6;
    Result r;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tok->encode(corpus);
    r.cold_mb_s = mb / seconds_since(t0);
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
        t0 = std::chrono::steady_clock::now();
        ids = tok->encode(corpus);
        best = std::min(best, seconds_since(t0));
    }
    r.warm_mb_s = mb / best;
    r.tokens_per_byte = static_cast<double>(ids.size()) / static_cast<double>(corpus.size());
    t0 = std::chrono::steady_clock::now();
    const std::string back = tok->decode(ids);
    r.decode_mb_s = static_cast<double>(back.size()) / 1e6 / seconds_since(t0);
    if (back != corpus) std::fprintf(stderr, "warning: the corpus does not decode back\n");
    return r;
}

}  // namespace

int main(int argc, char** argv) {
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
                         "usage: %s [--tokenizer PATH] [--english FILE]... [--cjk FILE]... "
                         "[--mb N]\n",
                         argv[0]);
            return 2;
        }
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
    const size_t english_unique = english_text.size();
    const size_t cjk_unique = cjk_text.size();
    for (std::string* text : {&english_text, &cjk_text}) {
        const std::string unit = *text;
        while (text->size() < limit) *text += unit;
        text->resize(std::min(text->size(), limit));
        // Cut at a character boundary.
        while (!text->empty() && (static_cast<unsigned char>(text->back()) & 0xC0) == 0x80) {
            text->pop_back();
        }
        if (!text->empty() && static_cast<unsigned char>(text->back()) >= 0xC0) text->pop_back();
    }
    std::printf("%-8s %6s %10s %10s %10s %12s %12s\n", "corpus", "MB", "unique MB", "cold MB/s",
                "warm MB/s", "tokens/byte", "decode MB/s");
    struct Corpus {
        const char* name;
        const std::string* text;
        size_t unique;
    };
    for (const Corpus& c :
         {Corpus{"english", &english_text, english_unique}, Corpus{"cjk", &cjk_text, cjk_unique}}) {
        const Result r = run(tokenizer, *c.text);
        std::printf("%-8s %6.2f %10.2f %10.2f %10.2f %12.3f %12.1f\n", c.name,
                    static_cast<double>(c.text->size()) / 1e6,
                    static_cast<double>(std::min(c.unique, c.text->size())) / 1e6, r.cold_mb_s,
                    r.warm_mb_s, r.tokens_per_byte, r.decode_mb_s);
    }
    return 0;
}
