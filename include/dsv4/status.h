// User/input errors: Status (ok or a one-line message) and Expected<T> (a value or a Status).
// The CLI prints them; the server maps them to HTTP 4xx.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "dsv4/check.h"

namespace dsv4 {

class [[nodiscard]] Status {
  public:
    Status() = default;
    static Status ok() { return Status(); }
    static Status error(std::string message) {
        Status s;
        s.message_ = std::move(message);
        return s;
    }
    bool is_ok() const { return !message_.has_value(); }
    explicit operator bool() const { return is_ok(); }
    const std::string& message() const {
        DSV4_ASSERT(message_.has_value(), "message() on an ok Status");
        return *message_;
    }
    // Adds context in front: "loading model: <message>".
    Status with_context(const std::string& context) const {
        if (is_ok()) return *this;
        return error(context + ": " + *message_);
    }

  private:
    std::optional<std::string> message_;
};

template <typename... Args>
Status error(const Args&... args) {
    return Status::error(str_cat(args...));
}

template <typename T>
class [[nodiscard]] Expected {
  public:
    Expected(T value) : v_(std::move(value)) {}
    Expected(Status status) : v_(std::move(status)) {
        DSV4_ASSERT(!std::get<Status>(v_).is_ok(), "Expected built from an ok Status");
    }
    bool has_value() const { return std::holds_alternative<T>(v_); }
    explicit operator bool() const { return has_value(); }
    T& value() & {
        DSV4_ASSERT(has_value(), "value() on an error: ", std::get<Status>(v_).message());
        return std::get<T>(v_);
    }
    const T& value() const& {
        DSV4_ASSERT(has_value(), "value() on an error: ", std::get<Status>(v_).message());
        return std::get<T>(v_);
    }
    T&& value() && {
        DSV4_ASSERT(has_value(), "value() on an error: ", std::get<Status>(v_).message());
        return std::get<T>(std::move(v_));
    }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() { return value(); }
    const Status& status() const {
        DSV4_ASSERT(!has_value(), "status() on a value");
        return std::get<Status>(v_);
    }

  private:
    std::variant<T, Status> v_;
};

}  // namespace dsv4

// Propagates an error Status from an expression returning Status.
#define DSV4_RETURN_IF_ERROR(expr)    \
    do {                              \
        ::dsv4::Status _st = (expr);  \
        if (!_st.is_ok()) return _st; \
    } while (0)

#define DSV4_CONCAT_INNER(a, b) a##b
#define DSV4_CONCAT(a, b) DSV4_CONCAT_INNER(a, b)
// DSV4_ASSIGN_OR_RETURN(auto x, expr): x = value of expr, or return its Status.
#define DSV4_ASSIGN_OR_RETURN(lhs, expr)                                                         \
    auto DSV4_CONCAT(_exp_, __LINE__) = (expr);                                                  \
    if (!DSV4_CONCAT(_exp_, __LINE__).has_value()) return DSV4_CONCAT(_exp_, __LINE__).status(); \
    lhs = std::move(DSV4_CONCAT(_exp_, __LINE__)).value()
