// `dsv4 tokenize`, `dsv4 chat-encode`, `dsv4 chat-parse`: the tokenizer and the chat encoding
// over JSON lines (one request per stdin line, one answer per stdout line, in order).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "dsv4/chat.h"
#include "dsv4/tokenizer.h"

namespace dsv4::cli {
namespace {

using chat::Json;

struct TokenizeArgs {
    std::string tokenizer;
    std::string text;
    bool has_text = false;  // --text given (possibly empty)
    bool decode = false;
    bool v4_added_tokens = false;
    bool no_special = false;
};

struct ChatArgs {
    std::string encoding = "v4";
};

void write_line(const Json& value) {
    const std::string line = chat::dump_json(value) + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
}

Json error_line(const std::string& message) {
    Json out = Json::object();
    out["error"] = true;
    out["message"] = message;
    return out;
}

// Runs `answer` on every stdin line that parses as a JSON object; a line that does not gets
// an error line. Returns 1 when some line was malformed, else 0.
template <typename F>
int for_each_request(F&& answer) {
    note_reading_stdin("requests");
    int status = 0;
    std::string line;
    while (std::getline(std::cin, line)) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto request = chat::parse_json(line);
        if (!request || !request->is_object()) {
            write_line(error_line(request ? "a request line must be a JSON object"
                                          : "bad JSON: " + request.status().message()));
            status = 1;
            continue;
        }
        if (!answer(*request)) status = 1;
    }
    return status;
}

Expected<Tokenizer> load_tokenizer(const TokenizeArgs& a) {
    DSV4_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::load(tokenizer_json_path(a.tokenizer)));
    if (a.v4_added_tokens) {
        DSV4_RETURN_IF_ERROR(
            tokenizer.set_added_tokens(deepseek_v4_added_tokens(), AddedTokensMode::kReplace));
    }
    return tokenizer;
}

Json ids_line(const std::vector<int32_t>& ids) {
    Json out = Json::object();
    out["ids"] = ids;
    return out;
}

Expected<std::vector<int32_t>> read_ids(const Tokenizer& tokenizer, const Json& request) {
    const auto it = request.find("ids");
    if (it == request.end() || !it->is_array()) return error("expected {\"ids\": [...]}");
    std::vector<int32_t> ids;
    for (const Json& id : *it) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
            id.get<int64_t>() >= tokenizer.vocab_size() ||
            !tokenizer.id_to_token(static_cast<int32_t>(id.get<int64_t>()))) {
            return error("not a token id of this tokenizer: ", chat::dump_json(id));
        }
        ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    return ids;
}

int run_tokenize(const TokenizeArgs& a) {
    auto tokenizer = load_tokenizer(a);
    if (!tokenizer) {
        print_error(tokenizer.status());
        return kExitError;
    }
    const bool parse_special = !a.no_special;
    if (a.has_text) {
        write_line(ids_line(tokenizer->encode(a.text, parse_special)));
        return 0;
    }
    return for_each_request([&](const Json& request) {
        if (a.decode) {
            auto ids = read_ids(*tokenizer, request);
            if (!ids) {
                write_line(error_line(ids.status().message()));
                return false;
            }
            Json out = Json::object();
            out["text"] = tokenizer->decode(*ids);
            write_line(out);
            return true;
        }
        const auto text = request.find("text");
        if (text == request.end() || !text->is_string()) {
            write_line(error_line("expected {\"text\": \"...\"}"));
            return false;
        }
        write_line(ids_line(tokenizer->encode(text->get_ref<const std::string&>(), parse_special)));
        return true;
    });
}

Expected<chat::EncodingVersion> encoding_version(const ChatArgs& a) {
    auto version = chat::parse_encoding_version(a.encoding);
    if (!version) return error("--encoding: '", a.encoding, "' is not v4 or v4-flash-0731");
    return *version;
}

int run_chat_encode(const ChatArgs& a) {
    auto version = encoding_version(a);
    if (!version) {
        print_error(version.status());
        return kExitUsage;
    }
    return for_each_request([&](const Json& request) {
        static const Json kNoKwargs = Json::object();
        const auto messages = request.find("messages");
        const auto kwargs = request.find("kwargs");
        if (messages == request.end()) {
            write_line(error_line("expected {\"messages\": [...], \"kwargs\": {...}}"));
            return false;
        }
        auto prompt = chat::encode_messages_kwargs(
            *messages, kwargs == request.end() ? kNoKwargs : *kwargs, *version);
        Json out = Json::object();
        if (prompt) {
            out["prompt"] = *prompt;
        } else {
            out = error_line(prompt.status().message());
        }
        write_line(out);
        return true;
    });
}

int run_chat_parse() {
    return for_each_request([](const Json& request) {
        const auto text = request.find("text");
        const auto mode = request.find("thinking_mode");
        if (text == request.end() || !text->is_string()) {
            write_line(error_line("expected {\"text\": \"...\", \"thinking_mode\": ...}"));
            return false;
        }
        // As in the reference, anything but "thinking" parses as chat mode.
        const bool thinking = mode != request.end() && *mode == "thinking";
        auto result = chat::parse_completion(
            text->get_ref<const std::string&>(),
            thinking ? chat::ThinkingMode::kThinking : chat::ThinkingMode::kChat);
        Json out = Json::object();
        if (result) {
            out["result"] = *result;
        } else {
            out = error_line(result.status().message());
        }
        write_line(out);
        return true;
    });
}

}  // namespace

void add_tokenize_commands(CLI::App& app) {
    auto tok = std::make_shared<TokenizeArgs>();
    CLI::App* cmd = app.add_subcommand(
        "tokenize", "Text to token ids: {\"text\": ...} lines on stdin -> {\"ids\": [...]}");
    cmd->footer("Example: echo '{\"text\": \"Hello\"}' | dsv4 tokenize --tokenizer MODEL_DIR");
    cmd->add_option("--tokenizer", tok->tokenizer, "tokenizer.json, or a folder holding one")
        ->required();
    CLI::Option* text = cmd->add_option("--text", tok->text, "Encode this string, not stdin");
    cmd->add_flag("--decode", tok->decode, "The reverse: {\"ids\": [...]} lines -> {\"text\": ...}")
        ->excludes(text);
    cmd->add_flag("--v4-added-tokens", tok->v4_added_tokens,
                  "Replace the file's added tokens by DeepSeek-V4's (for the V3 tokenizer.json)");
    cmd->add_flag("--no-special", tok->no_special,
                  "Encode tokens flagged special (BOS, EOS, ...) as plain text");
    cmd->callback([tok, text] {
        tok->has_text = text->count() > 0;
        set_exit_code(run_tokenize(*tok));
    });

    auto enc = std::make_shared<ChatArgs>();
    CLI::App* encode =
        app.add_subcommand("chat-encode", "Messages to a DeepSeek-V4 prompt (JSON lines)");
    encode->footer(
        "Reads {\"messages\": [...], \"kwargs\": {...}} lines, writes {\"prompt\": ...} or "
        "{\"error\": true, \"message\": ...}. kwargs as in DeepSeek's encode_messages: "
        "thinking_mode (\"chat\" | \"thinking\"), reasoning_effort, drop_thinking, "
        "add_default_bos_token, context.\n"
        "Example: echo '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
        "\"kwargs\": {\"thinking_mode\": \"chat\"}}' | dsv4 chat-encode");
    encode
        ->add_option("--encoding", enc->encoding, "Encoder release: v4 (default) or v4-flash-0731")
        ->capture_default_str();
    encode->callback([enc] { set_exit_code(run_chat_encode(*enc)); });

    CLI::App* parse =
        app.add_subcommand("chat-parse", "A generated DeepSeek-V4 turn to a message (JSON lines)");
    parse->footer(
        "Reads {\"text\": ..., \"thinking_mode\": \"chat\" | \"thinking\"} lines, writes "
        "{\"result\": {role, content, reasoning_content, tool_calls}} or {\"error\": true, "
        "\"message\": ...}.\n"
        "Example: echo '{\"text\": \"Hello!<｜end▁of▁sentence｜>\", \"thinking_mode\": "
        "\"chat\"}' | dsv4 chat-parse");
    parse->callback([] { set_exit_code(run_chat_parse()); });
}

}  // namespace dsv4::cli
