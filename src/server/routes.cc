#include "server/routes.h"

#include <httplib.h>

#include <chrono>
#include <optional>
#include <vector>

#include "server/generation.h"
#include "server/prompt.h"

namespace dsv4::server {

namespace {

using chat::Json;

void send_json(httplib::Response& res, int status, const Json& body) {
    res.status = status;
    res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
    if (e.status == 429) res.set_header("Retry-After", "1");
    send_json(res, e.status, error_json(e));
}

const char* endpoint_label(Endpoint ep) {
    return ep == Endpoint::kChat ? "chat" : "completions";
}

// A 404 for a body naming another model than the served one.
ApiError unknown_model(const RouteContext& ctx, const std::string& name) {
    ApiError e = not_found(
        "the model '" + name + "' does not exist; this server serves '" + ctx.model_name + "'",
        "model_not_found");
    e.param = "model";
    return e;
}

// Keeps RouteContext::in_flight right however a response ends (shutdown waits for it).
struct InFlight {
    explicit InFlight(std::atomic<int>& n) : n_(n) { ++n_; }
    ~InFlight() { --n_; }
    std::atomic<int>& n_;
};

void generate(RouteContext& ctx, Endpoint ep, const httplib::Request& req, httplib::Response& res) {
    const char* label = endpoint_label(ep);
    auto fail = [&](const ApiError& e) {
        ctx.metrics.count_request(label, e.status);
        send_error(res, e);
    };
    auto spec = parse_generation_request(ep, req.body, ctx.encoding);
    if (!spec) return fail(spec.error());
    if (spec->model != ctx.model_name) return fail(unknown_model(ctx, spec->model));
    auto prompt = build_prompt(*spec, ctx.tokenizer, ctx.info);
    if (!prompt) return fail(prompt.error());

    // A request a choice, choice i sampled with seed + i (so choice 0 is what n = 1 gives).
    const int64_t prompt_tokens = static_cast<int64_t>(prompt->ids.size());
    auto notifier = std::make_shared<Notifier>();
    std::vector<std::shared_ptr<Channel>> channels;
    Request base;
    base.prompt = std::move(prompt->ids);
    base.max_tokens = prompt->max_tokens;
    base.sampling = spec->sampling;
    base.logprobs = spec->logprobs;
    base.stop_at_eos = !spec->ignore_eos;
    base.speculative = ctx.speculative;
    base.draft_tokens = ctx.draft_tokens;
    // The choices prefill their prompt once (Request::share_prompt).
    base.share_prompt = spec->n > 1 ? ctx.next_share_key.fetch_add(1) : 0;
    base.rules = spec->rules;
    for (const auto& [id, bias] : spec->logit_bias)
        base.rules.logit_bias.push_back({static_cast<int32_t>(id), bias});
    base.rules.min_tokens_stops.assign(spec->stop_token_ids.begin(), spec->stop_token_ids.end());
    if (base.rules.penalties()) {  // (penalties count every fed token: no drafts)
        base.speculative = Speculation::kNone;
        base.draft_tokens = 0;
    }
    std::vector<Job> jobs;
    for (int i = 0; i < spec->n; ++i) {
        channels.push_back(std::make_shared<Channel>(notifier));
        Request request = base;
        request.sampling.seed += static_cast<uint64_t>(i);
        jobs.push_back(Job{std::move(request), channels.back(), std::chrono::steady_clock::now()});
    }
    ctx.loop.post(std::move(jobs));
    // Every choice accepted, or the request refused as a whole: the choices already accepted
    // are cancelled (nothing of them was sent).
    std::optional<ApiError> refused;
    std::optional<int64_t> cached;  // (the first choice's: several choices do not use the cache)
    for (auto& channel : channels) {
        std::vector<ChannelEvent> first;
        while (!channel->wait(first, std::chrono::milliseconds(1000))) {
        }
        if (first.front().kind == ChannelEvent::Kind::kRejected) {
            if (!refused) refused = first.front().rejection;
            continue;
        }
        DSV4_ASSERT(first.front().kind == ChannelEvent::Kind::kAccepted, "no acceptance first");
        if (channel == channels.front()) cached = first.front().cached_tokens;
        // Events that came with the acceptance go back in front of the channel's next ones.
        for (size_t i = 1; i < first.size(); ++i) channel->push(std::move(first[i]));
    }
    if (refused) {
        for (auto& channel : channels) channel->cancel();
        ctx.loop.wake();
        return fail(*refused);
    }
    ctx.metrics.count_request(label, 200);

    ResponseMeta meta;
    meta.endpoint = ep;
    meta.id = std::string(ep == Endpoint::kChat ? "chatcmpl-" : "cmpl-") +
              std::to_string(ctx.next_id.fetch_add(1));
    meta.created = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
    meta.model = ctx.model_name;
    meta.choices = spec->n;
    meta.cached_tokens = cached;
    std::vector<std::shared_ptr<Generation>> gens;
    for (int i = 0; i < spec->n; ++i) {
        meta.choice = i;
        gens.push_back(std::make_shared<Generation>(*spec, meta, base.prompt, ctx.info.eos_token_id,
                                                    ctx.tokenizer, channels[static_cast<size_t>(i)],
                                                    ctx.loop, ctx.metrics));
    }
    auto gen = std::make_shared<Choices>(std::move(gens), notifier, *spec, prompt_tokens);
    if (!spec->stream) {
        InFlight guard(ctx.in_flight);
        auto body = gen->collect();
        if (!body) return send_error(res, body.error());
        return send_json(res, 200, *body);
    }
    auto guard = std::make_shared<InFlight>(ctx.in_flight);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [gen](size_t, httplib::DataSink& sink) {
            std::string out;
            const bool more = gen->pump(out, std::chrono::milliseconds(1000));
            // A failed write means the client is gone: httplib then calls the releaser.
            if (!out.empty() && !sink.write(out.data(), out.size())) return false;
            if (!more) sink.done();
            return true;
        },
        [gen, guard](bool) { gen->abandon(); });
}

// The body's "model" (given: it must be the served one; absent: the served one is meant), for
// the utility endpoints where OpenAI-style clients may leave it out.
std::optional<ApiError> check_model(const RouteContext& ctx, Json& body) {
    const auto m = body.find("model");
    if (m == body.end() || m->is_null()) {
        body["model"] = ctx.model_name;
        return std::nullopt;
    }
    if (!m->is_string()) return invalid_request("model must be a string", "model");
    if (*m == ctx.model_name) return std::nullopt;
    return unknown_model(ctx, m->get<std::string>());
}

// A utility endpoint's body: a JSON object, its model checked (check_model).
ApiResult<Json> utility_body(const RouteContext& ctx, const std::string& text) {
    auto parsed = chat::parse_json(text);
    if (!parsed || !parsed->is_object()) return invalid_request("the body must be a JSON object");
    Json body = std::move(*parsed);
    if (auto e = check_model(ctx, body)) return *e;
    return body;
}

// POST /tokenize (vLLM's): a completions `prompt` (text, with BOS unless add_special_tokens is
// false, or ids) or chat `messages` (the chat endpoint's encoding and options) to
// {count, max_model_len, tokens}. The context is not checked: the count says whether it fits.
void tokenize(RouteContext& ctx, const httplib::Request& req, httplib::Response& res) {
    auto body = utility_body(ctx, req.body);
    if (!body) return send_error(res, body.error());
    bool add_special = true;
    if (const auto a = body->find("add_special_tokens"); a != body->end()) {
        if (!a->is_boolean())
            return send_error(
                res, invalid_request("add_special_tokens must be a boolean", "add_special_tokens"));
        add_special = a->get<bool>();
    }
    const Endpoint ep = body->contains("messages") ? Endpoint::kChat : Endpoint::kCompletions;
    auto spec = parse_generation_request(ep, dump(*body), ctx.encoding);
    if (!spec) return send_error(res, spec.error());
    auto ids = prompt_ids(*spec, ctx.tokenizer, ctx.info, add_special);
    if (!ids) return send_error(res, ids.error());
    Json r = Json::object();
    r["count"] = ids->size();
    r["max_model_len"] = ctx.info.max_context;
    r["tokens"] = std::move(*ids);
    send_json(res, 200, r);
}

// POST /detokenize (vLLM's): {tokens: [ids]} to {prompt: text} (the ids decoded as the output
// is: added tokens verbatim).
void detokenize(RouteContext& ctx, const httplib::Request& req, httplib::Response& res) {
    auto body = utility_body(ctx, req.body);
    if (!body) return send_error(res, body.error());
    const auto t = body->find("tokens");
    std::vector<int64_t> ids;
    if (t == body->end() || !read_token_ids(*t, ids))
        return send_error(res, invalid_request("tokens must be a list of token ids", "tokens"));
    if (auto e = check_vocab(ids, "tokens", ctx.info.vocab_size)) return send_error(res, *e);
    const std::vector<int32_t> ids32(ids.begin(), ids.end());
    send_json(res, 200, Json{{"prompt", ctx.tokenizer.decode(ids32)}});
}

bool authorized(const RouteContext& ctx, const httplib::Request& req) {
    if (ctx.api_key.empty()) return true;
    return req.get_header_value("Authorization") == "Bearer " + ctx.api_key;
}

}  // namespace

void install_routes(httplib::Server& http, RouteContext& ctx) {
    http.set_payload_max_length(ctx.max_body_bytes);
    // /health and /metrics stay open (probes and scrapers carry no key); /v1/*, /tokenize and
    // /detokenize need it.
    http.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
        const bool api =
            req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize";
        if (!api || authorized(ctx, req)) return httplib::Server::HandlerResponse::Unhandled;
        ApiError e = invalid_request("missing or wrong API key (Authorization: Bearer <key>)");
        e.status = 401;
        e.code = "invalid_api_key";
        send_error(res, e);
        return httplib::Server::HandlerResponse::Handled;
    });
    http.Post("/v1/chat/completions", [&ctx](const httplib::Request& req, httplib::Response& res) {
        generate(ctx, Endpoint::kChat, req, res);
    });
    http.Post("/v1/completions", [&ctx](const httplib::Request& req, httplib::Response& res) {
        generate(ctx, Endpoint::kCompletions, req, res);
    });
    http.Post("/tokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
        tokenize(ctx, req, res);
    });
    http.Post("/detokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
        detokenize(ctx, req, res);
    });
    auto model_json = [&ctx] {
        Json m = Json::object();
        m["id"] = ctx.model_name;
        m["object"] = "model";
        m["created"] = ctx.created;
        m["owned_by"] = "dsv4";
        m["max_model_len"] = ctx.info.max_context;
        return m;
    };
    http.Get("/v1/models", [model_json](const httplib::Request&, httplib::Response& res) {
        Json list = Json::object();
        list["object"] = "list";
        list["data"] = Json::array({model_json()});
        send_json(res, 200, list);
    });
    http.Get(R"(/v1/models/(.+))", [&ctx, model_json](const httplib::Request& req,
                                                      httplib::Response& res) {
        if (req.matches[1] != ctx.model_name)
            return send_error(
                res, not_found("the model '" + std::string(req.matches[1]) + "' does not exist",
                               "model_not_found"));
        send_json(res, 200, model_json());
    });
    http.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
        const bool draining = ctx.draining.load();
        send_json(res, draining ? 503 : 200, Json{{"status", draining ? "shutting down" : "ok"}});
    });
    http.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
        res.set_content(ctx.metrics.render(), "text/plain; version=0.0.4");
    });
    // Errors httplib decides itself (no route, body too large...) get the OpenAI shape too.
    http.set_error_handler(httplib::Server::HandlerWithResponse([&ctx](const httplib::Request& req,
                                                                       httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        ApiError e = invalid_request("");
        e.status = res.status;
        if (res.status == 413) {
            e.message =
                "the request body is larger than " + std::to_string(ctx.max_body_bytes) + " bytes";
            e.code = "request_too_large";
        } else if (res.status == 404) {
            e.message = "no route for " + req.method + " " + req.path;
            e.code = "not_found";
        } else {
            e.message = "HTTP " + std::to_string(res.status);
        }
        if (req.path == "/v1/chat/completions") ctx.metrics.count_request("chat", res.status);
        if (req.path == "/v1/completions") ctx.metrics.count_request("completions", res.status);
        send_error(res, e);
        return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "internal error";
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& ex) {
                what = ex.what();
            } catch (...) {
            }
            send_error(res, server_error(500, what, "internal_error"));
        });
}

}  // namespace dsv4::server
