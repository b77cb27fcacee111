#include "server/api_error.h"

namespace dsv4::server {

ApiError invalid_request(std::string message, std::string param) {
    ApiError e;
    e.message = std::move(message);
    e.param = std::move(param);
    return e;
}

ApiError not_found(std::string message, std::string code) {
    ApiError e;
    e.status = 404;
    e.message = std::move(message);
    e.code = std::move(code);
    return e;
}

ApiError server_error(int status, std::string message, std::string code) {
    ApiError e;
    e.status = status;
    e.type = status == 429 ? "rate_limit_error" : "server_error";
    e.message = std::move(message);
    e.code = std::move(code);
    return e;
}

nlohmann::ordered_json error_json(const ApiError& e) {
    using Json = nlohmann::ordered_json;
    auto or_null = [](const std::string& s) { return s.empty() ? Json() : Json(s); };
    Json inner = Json::object();
    inner["message"] = e.message;
    inner["type"] = e.type;
    inner["param"] = or_null(e.param);
    inner["code"] = or_null(e.code);
    Json out = Json::object();
    out["error"] = std::move(inner);
    return out;
}

}  // namespace dsv4::server
