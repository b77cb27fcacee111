// What one request generated, token by token: bytes to whole UTF-8 text, stop strings (text
// that may start one is held back until decided; the match left out, or kept with
// include_stop_str_in_output), and for chat the streaming DSML parse into
// reasoning / content / tool-call deltas. The final chat message comes from
// chat::parse_completion over the whole turn, or from the streaming parse when the turn is
// not well formed (cut by max_tokens, or a model that broke the format).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dsv4/chat.h"
#include "dsv4/tokenizer.h"
#include "server/dsml_stream.h"
#include "server/openai_request.h"

namespace dsv4::server {

class OutputStream {
  public:
    OutputStream(const Tokenizer& tokenizer, const GenerationSpec& spec);
    // One generated token (not EOS: the end is finish()); returns what became decided.
    StreamDelta push(int32_t token);
    // The generation ended (EOS, length, or a stop string): releases what was held back.
    StreamDelta finish();
    // A stop string matched: the output ends there and later tokens are ignored.
    bool stopped() const { return stopped_; }
    bool has_tool_calls() const { return !parser_.turn().tool_calls.empty(); }
    // The generated text up to a stop string (and the string, include_stop_str_in_output).
    const std::string& text() const { return text_; }
    // {"role": "assistant", "content", ["reasoning_content"], ["tool_calls"]} with tool-call ids
    // "<id_prefix><index>" (the same ones the stream gave).
    chat::Json message(const std::string& id_prefix) const;

  private:
    StreamDelta release(std::string_view text);

    TokenStreamDecoder decoder_;
    bool chat_;
    bool thinking_;
    std::vector<std::string> stop_;
    bool include_stop_;  // GenerationSpec::include_stop_str_in_output
    // A stop string matches only where it ends in the text of a token after the first
    // min_tokens (vLLM's: it may start in their text, which is held back as any other).
    int min_tokens_;
    int pushed_ = 0;
    std::string held_;  // text that may be the start of a stop string
    std::string text_;  // released text
    bool stopped_ = false;
    DsmlStreamParser parser_;
};

}  // namespace dsv4::server
