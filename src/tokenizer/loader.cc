#include "tokenizer/loader.h"

#include <nlohmann/json.hpp>

#include "base/log.h"

namespace dsv4::tok {

namespace {

using nlohmann::json;

// GPT-2's pattern, what ByteLevel(use_regex=true) splits with.
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

std::string type_of(const json& j) {
    if (!j.is_object()) return "<" + std::string(j.type_name()) + ">";
    auto it = j.find("type");
    if (it == j.end() || !it->is_string()) return "<no type>";
    return it->get<std::string>();
}

bool flag(const json& j, const char* key, bool fallback) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    return it->is_boolean() ? it->get<bool>() : fallback;
}

bool null_or_empty_string(const json& j, const char* key) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

Status check_normalizer(const json& n) {
    if (n.is_null()) return Status::ok();
    if (type_of(n) == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
        for (const json& inner : n["normalizers"]) DSV4_RETURN_IF_ERROR(check_normalizer(inner));
        return Status::ok();
    }
    return error("normalizer \"", type_of(n), "\" is not supported (only none / empty Sequence)");
}

Expected<SplitStep> make_split(const json& s) {
    static const json kNull;
    const json& pattern = s.contains("pattern") ? s["pattern"] : kNull;
    std::string text;
    bool literal = false;
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
        DSV4_ASSIGN_OR_RETURN(text, onig_to_pcre2(pattern["Regex"].get<std::string>()));
    } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
        text = pattern["String"].get<std::string>();
        literal = true;
    } else {
        return error("Split pre-tokenizer without a Regex or String pattern");
    }
    if (flag(s, "invert", false)) return error("Split with invert=true is not supported");
    const std::string behavior = s.value("behavior", std::string("<none>"));
    SplitBehavior kind;
    if (behavior == "Isolated") {
        kind = SplitBehavior::kIsolated;
    } else if (behavior == "Removed") {
        kind = SplitBehavior::kRemoved;
    } else {
        return error("Split behavior \"", behavior, "\" is not supported (Isolated, Removed)");
    }
    DSV4_ASSIGN_OR_RETURN(Regex regex, Regex::compile(text, literal));
    return SplitStep{std::move(regex), kind};
}

Expected<PreTokenizer> make_pre_tokenizer(const json& p) {
    std::vector<const json*> items;
    if (type_of(p) == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
        for (const json& item : p["pretokenizers"]) items.push_back(&item);
    } else if (!p.is_null()) {
        items.push_back(&p);
    }
    if (items.empty() || type_of(*items.back()) != "ByteLevel") {
        return error(
            "the pre-tokenizer must end with ByteLevel (only byte-level BPE is "
            "supported)");
    }
    std::vector<SplitStep> steps;
    for (size_t i = 0; i < items.size(); ++i) {
        const json& item = *items[i];
        const std::string type = type_of(item);
        if (type == "Split") {
            DSV4_ASSIGN_OR_RETURN(SplitStep step, make_split(item));
            steps.push_back(std::move(step));
        } else if (type == "ByteLevel") {
            if (i + 1 != items.size()) return error("ByteLevel must be the last pre-tokenizer");
            if (flag(item, "add_prefix_space", false)) {
                return error("ByteLevel with add_prefix_space=true is not supported");
            }
            if (flag(item, "use_regex", true)) {
                DSV4_ASSIGN_OR_RETURN(std::string pattern, onig_to_pcre2(kGpt2Pattern));
                DSV4_ASSIGN_OR_RETURN(Regex regex, Regex::compile(pattern));
                steps.push_back(SplitStep{std::move(regex), SplitBehavior::kIsolated});
            }
        } else {
            return error("pre-tokenizer \"", type, "\" is not supported (Split, ByteLevel)");
        }
    }
    return PreTokenizer(std::move(steps));
}

Status check_decoder(const json& d) {
    const std::string type = type_of(d);
    if (type == "ByteLevel") return Status::ok();
    if (type == "Sequence" && d.contains("decoders") && d["decoders"].is_array() &&
        d["decoders"].size() == 1) {
        return check_decoder(d["decoders"][0]);
    }
    return error("decoder \"", type, "\" is not supported (only ByteLevel)");
}

// Post-processors only add special tokens (add_special_tokens=True) or fix offsets; encode()
// does neither, so the ones HF byte-level files use are accepted and have no effect.
Status check_post_processor(const json& p) {
    if (p.is_null()) return Status::ok();
    const std::string type = type_of(p);
    if (type == "ByteLevel" || type == "TemplateProcessing") return Status::ok();
    if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
        for (const json& inner : p["processors"]) DSV4_RETURN_IF_ERROR(check_post_processor(inner));
        return Status::ok();
    }
    return error("post-processor \"", type, "\" is not supported");
}

Expected<std::unique_ptr<Bpe>> make_bpe(const json& m) {
    const std::string type = m.is_object() && m.contains("type") ? type_of(m) : "BPE";
    if (type != "BPE") return error("model \"", type, "\" is not supported (only BPE)");
    if (!m.contains("vocab") || !m["vocab"].is_object()) return error("model.vocab is missing");
    if (!m.contains("merges") || !m["merges"].is_array()) return error("model.merges is missing");
    if (!null_or_empty_string(m, "continuing_subword_prefix")) {
        return error("BPE continuing_subword_prefix is not supported");
    }
    if (!null_or_empty_string(m, "end_of_word_suffix")) {
        return error("BPE end_of_word_suffix is not supported");
    }
    if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() > 0) {
        return error("BPE dropout is not supported");
    }
    if (flag(m, "byte_fallback", false)) return error("BPE byte_fallback is not supported");

    std::vector<std::pair<std::string, int32_t>> vocab;
    vocab.reserve(m["vocab"].size());
    for (const auto& [token, id] : m["vocab"].items()) {
        if (!id.is_number_integer()) return error("vocab entry \"", token, "\" has no integer id");
        const auto value = id.get<int64_t>();
        if (value < 0 || value > INT32_MAX) return error("vocab id ", value, " is out of range");
        vocab.emplace_back(token, static_cast<int32_t>(value));
    }
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(m["merges"].size());
    for (const json& merge : m["merges"]) {
        if (merge.is_string()) {
            const std::string& line = merge.get_ref<const std::string&>();
            const size_t space = line.find(' ');
            if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
                return error("merge \"", line, "\" is not two tokens separated by one space");
            }
            merges.emplace_back(line.substr(0, space), line.substr(space + 1));
        } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                   merge[1].is_string()) {
            merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
        } else {
            return error("merge #", merges.size(), " is neither \"a b\" nor [\"a\", \"b\"]");
        }
    }
    Bpe::Options options;
    options.ignore_merges = flag(m, "ignore_merges", false);
    return Bpe::build(std::move(vocab), merges, options);
}

Expected<std::vector<AddedToken>> make_added_tokens(const json& a) {
    std::vector<AddedToken> tokens;
    if (a.is_null()) return tokens;
    if (!a.is_array()) return error("added_tokens is not an array");
    for (const json& t : a) {
        if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
            !t.contains("content") || !t["content"].is_string()) {
            return error("added token #", tokens.size(), " lacks an integer id or a content");
        }
        AddedToken token;
        token.id = t["id"].get<int32_t>();
        token.content = t["content"].get<std::string>();
        token.special = flag(t, "special", false);
        // HF's default: normalized unless special.
        token.normalized = flag(t, "normalized", !token.special);
        token.lstrip = flag(t, "lstrip", false);
        token.rstrip = flag(t, "rstrip", false);
        token.single_word = flag(t, "single_word", false);
        tokens.push_back(std::move(token));
    }
    return tokens;
}

}  // namespace

Expected<TokenizerParts> parse_tokenizer_json(std::string_view text, const std::string& label) {
    const json root = json::parse(text, nullptr, false);
    if (root.is_discarded() || !root.is_object()) {
        return error(label, ": not a JSON object");
    }
    auto in_label = [&](const Status& s) { return s.with_context(label); };
    static const json kNull;
    auto field = [&](const char* key) -> const json& {
        auto it = root.find(key);
        return it == root.end() ? kNull : *it;
    };
    if (!field("truncation").is_null() || !field("padding").is_null()) {
        DSV4_LOG_WARN(label, ": truncation and padding are ignored (encode never does either)");
    }
    if (Status s = check_normalizer(field("normalizer")); !s) return in_label(s);
    if (Status s = check_decoder(field("decoder")); !s) return in_label(s);
    if (Status s = check_post_processor(field("post_processor")); !s) return in_label(s);
    TokenizerParts parts;
    auto pre = make_pre_tokenizer(field("pre_tokenizer"));
    if (!pre) return in_label(pre.status());
    parts.pre_tokenizer = std::move(pre).value();
    auto bpe = make_bpe(field("model"));
    if (!bpe) return in_label(bpe.status());
    parts.bpe = std::move(bpe).value();
    auto added = make_added_tokens(field("added_tokens"));
    if (!added) return in_label(added.status());
    parts.added_tokens = std::move(added).value();
    return parts;
}

}  // namespace dsv4::tok
