// Shared by the tokenizer tests: the DeepSeek tokenizer.json that tools/setup.sh fetches (one
// load per test binary) and a JSON-lines reader for the golden files.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dsv4/tokenizer.h"

namespace dsv4::test {

// The loaded tokenizer, or nullptr with a test failure saying how to get the file.
inline const Tokenizer* loaded_or_fail(const Expected<Tokenizer>& tokenizer) {
    if (!tokenizer) {
        ADD_FAILURE() << "cannot load " << DSV4_TOKENIZER_JSON << " ("
                      << tokenizer.status().message()
                      << "): run tools/setup.sh to fetch DeepSeek's tokenizer.json";
        return nullptr;
    }
    return &tokenizer.value();
}

// The V3 tokenizer.json as shipped, or nullptr (with a test failure saying how to get it).
inline const Tokenizer* deepseek_tokenizer() {
    static const Expected<Tokenizer> tokenizer = Tokenizer::load(DSV4_TOKENIZER_JSON);
    return loaded_or_fail(tokenizer);
}

// The same file with the V4 added-token table installed.
inline const Tokenizer* deepseek_v4_tokenizer() {
    static const Expected<Tokenizer> tokenizer = []() -> Expected<Tokenizer> {
        DSV4_ASSIGN_OR_RETURN(Tokenizer t, Tokenizer::load(DSV4_TOKENIZER_JSON));
        DSV4_RETURN_IF_ERROR(
            t.set_added_tokens(deepseek_v4_added_tokens(), AddedTokensMode::kReplace));
        return t;
    }();
    return loaded_or_fail(tokenizer);
}

inline std::vector<nlohmann::json> read_json_lines(const std::string& path) {
    std::vector<nlohmann::json> lines;
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
    }
    return lines;
}

}  // namespace dsv4::test
