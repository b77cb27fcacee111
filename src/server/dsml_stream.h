// Streaming parse of a V4 assistant turn, text piece by text piece: reasoning up to </think>
// (thinking mode), then content, then an optional DSML tool-call block, each emitted as OpenAI
// deltas as soon as it is decided. Text that could be the start of a marker (</think>,
// "\n\n<｜DSML｜tool_calls", a parameter's close...) is held back until the next piece decides
// it, so a marker cut across tokens never leaks into content. The format is the one
// chat::parse_completion reads (DeepSeek's parse_message_from_completion_text); tool-call
// arguments are streamed as the JSON text it assembles. A block that breaks the format is
// passed on as content from its first marker on.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dsv4::server {

struct ToolCallDelta {
    int index = 0;
    std::string name;       // set on the call's first delta only
    std::string arguments;  // the next piece of the arguments' JSON text
};

struct StreamDelta {
    std::string reasoning;
    std::string content;
    std::vector<ToolCallDelta> tool_calls;
    bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

// Everything parsed so far, joined.
struct ParsedTurn {
    std::string reasoning;
    std::string content;
    struct Call {
        std::string name;
        std::string arguments;
    };
    std::vector<Call> tool_calls;
};

class DsmlStreamParser {
  public:
    explicit DsmlStreamParser(bool thinking);
    // Adds generated text (whole UTF-8 characters) and appends what it decided to `out`.
    void push(std::string_view text, StreamDelta& out);
    // The output ended: whatever is held back is decided now.
    void finish(StreamDelta& out);
    const ParsedTurn& turn() const { return turn_; }

  private:
    enum class State {
        kReasoning,
        kContent,
        kCallsOpen,   // after "<｜DSML｜tool_calls" or "</｜DSML｜invoke": ">\n" then a marker
        kInvokeHead,  // ' name="...">\n' up to the first parameter or the invoke's end
        kParamHead,   // ' name="..." string="true|false">'
        kParamValue,  // the value, up to "</｜DSML｜parameter"
        kParamEnd,    // ">\n" then the next parameter or the invoke's end
        kAfterCalls,  // only EOS may follow
        kRaw,         // the block broke the format: the rest is content
        kDone,
    };
    enum class Step { kProgress, kNeedMore };
    Step step(bool at_end, StreamDelta& out);
    Step expect_then(std::string_view literal, std::initializer_list<std::string_view> markers,
                     bool at_end, std::string_view* matched, StreamDelta& out);
    void emit_reasoning(std::string_view s, StreamDelta& out);
    void emit_content(std::string_view s, StreamDelta& out);
    void emit_arguments(std::string_view s, StreamDelta& out);
    void consume(size_t n);
    Step fail(StreamDelta& out);

    State state_;
    std::string buf_;    // text not yet decided
    std::string block_;  // the tool-call block consumed so far (given back as content on failure)
    bool string_param_ = false;
    bool first_param_ = true;
    ParsedTurn turn_;
};

}  // namespace dsv4::server
