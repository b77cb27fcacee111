// The HTTP routes: OpenAI endpoints, health and metrics, the bearer-key check, and the
// OpenAI-shaped bodies of errors that cpp-httplib raises itself (404, 413).
#pragma once

#include <atomic>
#include <string>

#include "dsv4/chat.h"
#include "dsv4/engine.h"
#include "dsv4/tokenizer.h"
#include "server/engine_loop.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace dsv4::server {

struct RouteContext {
    const Tokenizer& tokenizer;
    const ModelInfo& info;
    EngineLoop& loop;
    Metrics& metrics;
    std::string model_name;
    std::string api_key;
    size_t max_body_bytes = 0;
    chat::EncodingVersion encoding = chat::EncodingVersion::kV4;
    Speculation speculative = Speculation::kNone;  // every request's (ServerOptions)
    int draft_tokens = 0;
    int64_t created = 0;                // the model's "created" time (server start)
    std::atomic<bool> draining{false};  // shutting down: /health says so
    std::atomic<int> in_flight{0};      // generation responses not yet complete
    std::atomic<uint64_t> next_id{1};
    std::atomic<uint64_t> next_share_key{1};  // Request::share_prompt of the next n > 1 request
};

void install_routes(httplib::Server& http, RouteContext& ctx);

}  // namespace dsv4::server
