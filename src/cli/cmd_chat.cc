// `dsv4 chat`: an interactive conversation with the V4 chat encoding, streaming the reply.
// The conversation is re-encoded each turn; only the tokens after the part already in the
// cache are fed. Where the encoding changed what was fed (thinking mode drops the last reply's
// reasoning), the session goes back to its snapshot at the last block boundary of the previous
// prompt (Session::snapshot), so only the tokens after it are fed again.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/text_model.h"
#include "dsv4/chat.h"
#include "dsv4/engine.h"

namespace dsv4::cli {

namespace {

struct ChatArgs {
    EngineOptions engine;
    std::string tokenizer;
    std::string system;
    bool think = false;
    std::string effort;
    std::string encoding = "v4";
    int max_tokens = 512;
    bool stats = false;
    SamplingParams sampling;
    LogitsRules rules;
};

int run_chat(const ChatArgs& a) {
    EngineOptions eo = a.engine;
    eo.snapshots = 1;  // (the last prompt's last block boundary)
    auto engine = Engine::create(eo);
    if (!engine) {
        print_error(engine.status());
        return kExitError;
    }
    auto tok = load_model_tokenizer(a.engine.model_dir, a.tokenizer);
    if (!tok) {
        print_error(tok.status());
        return kExitError;
    }
    chat::EncodeOptions opts;
    opts.thinking_mode = a.think ? chat::ThinkingMode::kThinking : chat::ThinkingMode::kChat;
    if (a.effort == "high") opts.reasoning_effort = chat::ReasoningEffort::kHigh;
    if (a.effort == "max") opts.reasoning_effort = chat::ReasoningEffort::kMax;
    const auto version = chat::parse_encoding_version(a.encoding);
    if (!version) {
        std::fprintf(stderr, "error: unknown --encoding '%s' (v4 or v4-flash-0731)\n",
                     a.encoding.c_str());
        return kExitUsage;
    }
    opts.version = *version;
    const int32_t eos = (*engine)->info().eos_token_id;
    const int64_t block = (*engine)->info().snapshot_block;

    auto made = (*engine)->new_session();
    if (!made) {
        print_error(made.status());
        return kExitError;
    }
    Session* session = made->get();
    chat::Json messages = chat::Json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
    std::vector<int32_t> cached;  // tokens whose K/V are in the session
    std::fprintf(stderr, "dsv4 chat (%s mode). /reset starts over, /exit or Ctrl-D quits.\n",
                 a.think ? "thinking" : "chat");
    std::string line;
    while (std::fprintf(stderr, "> "), std::getline(std::cin, line)) {
        if (line == "/exit" || line == "/quit") break;
        if (line == "/reset") {
            messages = chat::Json::array();
            if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
            session->reset();
            cached.clear();
            continue;
        }
        if (line.empty()) continue;
        messages.push_back({{"role", "user"}, {"content", line}});
        auto prompt = chat::encode_messages(messages, opts);
        if (!prompt) {
            print_error(prompt.status());
            messages.erase(messages.size() - 1);
            continue;
        }
        const std::vector<int32_t> ids = tok->encode(*prompt, /*parse_special=*/true);
        if (ids.empty()) {  // (an encoding always has its BOS: a tokenizer without it)
            print_error(error("the conversation encodes to no tokens"));
            messages.erase(messages.size() - 1);
            continue;
        }
        size_t common = 0;
        while (common < cached.size() && common < ids.size() && cached[common] == ids[common])
            ++common;
        if (common < cached.size() || common == ids.size()) {
            // Back to the session's snapshot within the shared part, else to the start.
            const std::vector<int64_t> snaps = session->snapshot_positions();
            const auto back = std::find_if(snaps.rbegin(), snaps.rend(), [&](int64_t p) {
                return p <= static_cast<int64_t>(std::min(common, ids.size() - 1));
            });
            if (back != snaps.rend() && session->copy_prefix_from(*session, *back).is_ok()) {
                common = static_cast<size_t>(*back);
            } else {
                session->reset();
                common = 0;
            }
            cached.resize(common);
        }
        const size_t from_cache = common;
        // The prompt's last block boundary (a token left for the request): a snapshot there,
        // in place of the last one, for the next turn to come back to.
        const size_t boundary = (ids.size() - 1) / block * block;
        if (boundary > common) {
            session->drop_snapshots();
            Status fed =
                session->feed({ids.begin() + common, ids.begin() + boundary}, nullptr, nullptr);
            if (fed.is_ok()) fed = session->snapshot();
            if (!fed.is_ok()) {
                print_error(fed);
                session->reset();
                cached.clear();
                messages.erase(messages.size() - 1);
                continue;
            }
            common = boundary;
        }
        std::vector<int32_t> fresh(ids.begin() + common, ids.end());
        TokenStreamDecoder stream(*tok);
        std::vector<int32_t> reply;
        const auto start = std::chrono::steady_clock::now();
        auto out = (*engine)->generate(
            *session, fresh, a.max_tokens, a.sampling, true,
            [&](int32_t t) {
                reply.push_back(t);
                if (t != eos) std::fputs(stream.push(t).c_str(), stdout);
                std::fflush(stdout);
                return true;
            },
            Speculation::kNone, nullptr, 0, a.rules);
        std::fputs(stream.flush().c_str(), stdout);
        std::fputs("\n", stdout);
        std::fflush(stdout);
        if (!out) {
            print_error(out.status());
            session->reset();
            cached.clear();
            messages.erase(messages.size() - 1);
            continue;
        }
        if (a.stats)
            std::fprintf(
                stderr, "[%zu prompt tokens, %zu from the cache; %zu generated in %.2f s]\n",
                ids.size(), from_cache, reply.size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        // The cache holds the prompt and every reply token but the last (never fed).
        cached = ids;
        cached.insert(cached.end(), reply.begin(), reply.end() - (reply.empty() ? 0 : 1));
        auto parsed = chat::parse_completion(tok->decode_bytes(reply), opts.thinking_mode);
        chat::Json msg = {{"role", "assistant"}, {"content", tok->decode(reply)}};
        if (parsed) msg = *parsed;
        messages.push_back(msg);
    }
    return 0;
}

}  // namespace

void add_chat_command(CLI::App& app) {
    auto args = std::make_shared<ChatArgs>();
    CLI::App* cmd = app.add_subcommand("chat", "Interactive chat with the DeepSeek-V4 encoding");
    cmd->footer("Example: dsv4 chat --model DIR --think --effort max");
    add_engine_options(cmd, args->engine);
    cmd->add_option("--tokenizer", args->tokenizer,
                    "tokenizer.json or a folder holding one (default: the model folder's)");
    cmd->add_option("--system", args->system, "System prompt");
    cmd->add_flag("--think,!--no-think", args->think, "Thinking mode (default: chat mode)");
    cmd->add_option("--effort", args->effort, "Reasoning effort in thinking mode: high or max")
        ->check(CLI::IsMember({"", "high", "max"}));
    cmd->add_option("--encoding", args->encoding,
                    "Chat encoding version: v4 or v4-flash-0731 (reasoning-effort texts differ)")
        ->capture_default_str();
    cmd->add_option("--max-tokens", args->max_tokens, "Tokens per reply")
        ->capture_default_str()
        ->check(whole_number(1, 1 << 30));
    cmd->add_flag("--stats", args->stats,
                  "After each reply: its prompt tokens, those found in the cache, the tokens "
                  "generated and the time (stderr)");
    add_sampling_options(cmd, args->sampling);
    add_rules_options(cmd, args->rules);
    cmd->callback([args] { set_exit_code(run_chat(*args)); });
}

}  // namespace dsv4::cli
