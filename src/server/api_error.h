// OpenAI-shaped errors: an HTTP status and {"error": {"message", "type", "param", "code"}}.
// User/input errors become these at the HTTP boundary; nothing below it aborts on a request.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <variant>

#include "dsv4/check.h"

namespace dsv4::server {

struct ApiError {
    int status = 400;
    std::string type = "invalid_request_error";
    std::string message;
    std::string param;  // empty: null
    std::string code;   // empty: null
};

ApiError invalid_request(std::string message, std::string param = {});
ApiError not_found(std::string message, std::string code);
ApiError server_error(int status, std::string message, std::string code);

nlohmann::ordered_json error_json(const ApiError& e);

// A value or an ApiError (std::expected is C++23).
template <typename T>
class ApiResult {
  public:
    ApiResult(T value) : v_(std::move(value)) {}
    ApiResult(ApiError error) : v_(std::move(error)) {}
    bool has_value() const { return std::holds_alternative<T>(v_); }
    explicit operator bool() const { return has_value(); }
    T& value() {
        DSV4_ASSERT(has_value(), "value() on an ApiError");
        return std::get<T>(v_);
    }
    T* operator->() { return &value(); }
    T& operator*() { return value(); }
    const ApiError& error() const {
        DSV4_ASSERT(!has_value(), "error() on a value");
        return std::get<ApiError>(v_);
    }

  private:
    std::variant<T, ApiError> v_;
};

}  // namespace dsv4::server
