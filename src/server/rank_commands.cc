#include "server/rank_commands.h"

#include <nlohmann/json.hpp>

namespace dsv4::server {

namespace {

using json = nlohmann::json;

const char* op_name(RankCommand::Op op) {
    switch (op) {
        case RankCommand::Op::kSubmit:
            return "submit";
        case RankCommand::Op::kCancel:
            return "cancel";
        case RankCommand::Op::kStep:
            return "step";
        case RankCommand::Op::kStop:
            return "stop";
    }
    return "?";
}

json rules_json(const LogitsRules& u) {
    json bias = json::array();
    for (const TokenBias& b : u.logit_bias) bias.push_back({b.token, b.bias});
    return {{"repetition", u.repetition_penalty}, {"frequency", u.frequency_penalty},
            {"presence", u.presence_penalty},     {"bias", bias},
            {"min_tokens", u.min_tokens},         {"stops", u.min_tokens_stops}};
}

LogitsRules rules_from(const json& j) {
    LogitsRules u;
    u.repetition_penalty = j.at("repetition").get<float>();
    u.frequency_penalty = j.at("frequency").get<float>();
    u.presence_penalty = j.at("presence").get<float>();
    for (const json& b : j.at("bias"))
        u.logit_bias.push_back({b.at(0).get<int32_t>(), b.at(1).get<float>()});
    u.min_tokens = j.at("min_tokens").get<int>();
    u.min_tokens_stops = j.at("stops").get<std::vector<int32_t>>();
    return u;  // (the engine checks the values at submit)
}

json request_json(const Request& r) {
    return {{"prompt", r.prompt},
            {"max_tokens", r.max_tokens},
            {"temperature", r.sampling.temperature},
            {"top_k", r.sampling.top_k},
            {"top_p", r.sampling.top_p},
            {"seed", r.sampling.seed},
            {"stop_at_eos", r.stop_at_eos},
            {"speculative", static_cast<int>(r.speculative)},
            {"draft_tokens", r.draft_tokens},
            {"logprobs", r.logprobs},
            {"rules", rules_json(r.rules)},
            {"share_prompt", r.share_prompt}};
}

Request request_from(const json& j) {
    Request r;
    r.prompt = j.at("prompt").get<std::vector<int32_t>>();
    r.max_tokens = j.at("max_tokens").get<int>();
    r.sampling.temperature = j.at("temperature").get<float>();
    r.sampling.top_k = j.at("top_k").get<int>();
    r.sampling.top_p = j.at("top_p").get<float>();
    r.sampling.seed = j.at("seed").get<uint64_t>();
    r.stop_at_eos = j.at("stop_at_eos").get<bool>();
    const int spec = j.at("speculative").get<int>();
    if (spec < 0 || spec > static_cast<int>(Speculation::kNgram))
        throw std::out_of_range("speculative " + std::to_string(spec));
    r.speculative = static_cast<Speculation>(spec);
    r.draft_tokens = j.at("draft_tokens").get<int>();
    r.logprobs = j.at("logprobs").get<int>();  // (the engine checks the range at submit)
    r.rules = rules_from(j.at("rules"));
    r.share_prompt = j.at("share_prompt").get<uint64_t>();
    return r;
}

}  // namespace

std::string encode_rank_command(const RankCommand& c) {
    json j{{"op", op_name(c.op)}};
    if (c.op == RankCommand::Op::kSubmit || c.op == RankCommand::Op::kCancel) j["id"] = c.id;
    if (c.op == RankCommand::Op::kSubmit) j["request"] = request_json(c.request);
    return j.dump();
}

Expected<RankCommand> decode_rank_command(const std::string& text) {
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    const std::string head = text.substr(0, 80);
    if (!j.is_object() || !j.contains("op") || !j["op"].is_string())
        return error("not a command from rank 0: '", head, "'");
    RankCommand c;
    const std::string op = j["op"].get<std::string>();
    if (op == "step") {
        c.op = RankCommand::Op::kStep;
    } else if (op == "stop") {
        c.op = RankCommand::Op::kStop;
    } else if (op == "submit" || op == "cancel") {
        c.op = op == "submit" ? RankCommand::Op::kSubmit : RankCommand::Op::kCancel;
        try {
            c.id = j.at("id").get<RequestId>();
            if (c.op == RankCommand::Op::kSubmit) c.request = request_from(j.at("request"));
        } catch (const std::exception& e) {
            return error("a malformed ", op, " command from rank 0 (", e.what(), "): '", head, "'");
        }
    } else {
        return error("an unknown command from rank 0: '", head, "'");
    }
    return c;
}

}  // namespace dsv4::server
