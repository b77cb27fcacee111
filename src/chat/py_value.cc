#include "chat/py_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/utf8.h"
#include "chat/unicode.h"

namespace dsv4::chat {

namespace {

// Decodes one UTF-8 sequence at s[pos] (advancing pos); invalid bytes come back one at a time
// as negative values so callers can escape them.
int64_t next_code_point(std::string_view s, size_t& pos) {
    const size_t len = utf8_sequence_length(s, pos);
    if (len == 0) {
        const auto b0 = static_cast<uint8_t>(s[pos++]);
        return -static_cast<int64_t>(b0) - 1;
    }
    const char32_t cp = utf8_decode(s, pos, len);
    pos += len;
    return cp;
}

void append_hex(std::string& out, const char* prefix, uint32_t value, int digits) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%s%0*x", prefix, digits, value);
    out += buf;
}

std::string repr_string(std::string_view s) {
    const bool has_single = s.find('\'') != std::string_view::npos;
    const bool has_double = s.find('"') != std::string_view::npos;
    const char quote = has_single && !has_double ? '"' : '\'';
    std::string out(1, quote);
    size_t pos = 0;
    while (pos < s.size()) {
        const size_t start = pos;
        const int64_t cp = next_code_point(s, pos);
        if (cp < 0) {
            append_hex(out, "\\x", static_cast<uint32_t>(-cp - 1), 2);
        } else if (cp == quote || cp == '\\') {
            out += '\\';
            out += static_cast<char>(cp);
        } else if (cp == '\t') {
            out += "\\t";
        } else if (cp == '\n') {
            out += "\\n";
        } else if (cp == '\r') {
            out += "\\r";
        } else if (cp < 0x20 || cp == 0x7F) {
            append_hex(out, "\\x", static_cast<uint32_t>(cp), 2);
        } else if (cp < 0x7F || py_isprintable(static_cast<char32_t>(cp))) {
            out.append(s.substr(start, pos - start));
        } else if (cp <= 0xFF) {
            append_hex(out, "\\x", static_cast<uint32_t>(cp), 2);
        } else if (cp <= 0xFFFF) {
            append_hex(out, "\\u", static_cast<uint32_t>(cp), 4);
        } else {
            append_hex(out, "\\U", static_cast<uint32_t>(cp), 8);
        }
    }
    out += quote;
    return out;
}

void dump_string(std::string& out, std::string_view s) {
    out += '"';
    for (char c : s) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\b':
                out += "\\b";
                break;
            case '\f':
                out += "\\f";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    append_hex(out, "\\u", static_cast<unsigned char>(c), 4);
                } else {
                    out += c;
                }
        }
    }
    out += '"';
}

void dump(std::string& out, const Json& v) {
    switch (v.type()) {
        case Json::value_t::null:
            out += "null";
            break;
        case Json::value_t::boolean:
            out += v.get<bool>() ? "true" : "false";
            break;
        case Json::value_t::number_integer:
            out += std::to_string(v.get<int64_t>());
            break;
        case Json::value_t::number_unsigned:
            out += std::to_string(v.get<uint64_t>());
            break;
        case Json::value_t::number_float: {
            const double d = v.get<double>();
            if (std::isnan(d)) {
                out += "NaN";
            } else if (std::isinf(d)) {
                out += d > 0 ? "Infinity" : "-Infinity";
            } else {
                out += py_float_repr(d);
            }
            break;
        }
        case Json::value_t::string:
            dump_string(out, v.get_ref<const std::string&>());
            break;
        case Json::value_t::array: {
            out += '[';
            bool first = true;
            for (const Json& item : v) {
                if (!first) out += ", ";
                first = false;
                dump(out, item);
            }
            out += ']';
            break;
        }
        case Json::value_t::object: {
            out += '{';
            bool first = true;
            for (const auto& [key, item] : v.items()) {
                if (!first) out += ", ";
                first = false;
                dump_string(out, key);
                out += ": ";
                dump(out, item);
            }
            out += '}';
            break;
        }
        case Json::value_t::binary:
            out += is_big_int(v) ? big_int_digits(v) : "null";
            break;
        case Json::value_t::discarded:
            out += "null";
            break;
    }
}

// Exact decimal digits of an integral double (|v| may exceed 64 bits).
std::string integral_double_digits(double v) {
    const bool negative = v < 0;
    v = std::fabs(v);
    if (v < 9.2e18) {
        const std::string digits = std::to_string(static_cast<int64_t>(v));
        return negative && digits != "0" ? "-" + digits : digits;
    }
    int exponent = 0;
    const double fraction = std::frexp(v, &exponent);  // v = fraction * 2^exponent
    auto mantissa = static_cast<uint64_t>(std::ldexp(fraction, 53));
    std::string digits = std::to_string(mantissa);  // most significant first
    for (int i = 0; i < exponent - 53; ++i) {
        int carry = 0;
        for (size_t k = digits.size(); k-- > 0;) {
            const int d = (digits[k] - '0') * 2 + carry;
            digits[k] = static_cast<char>('0' + d % 10);
            carry = d / 10;
        }
        if (carry > 0) digits.insert(digits.begin(), static_cast<char>('0' + carry));
    }
    return negative ? "-" + digits : digits;
}

}  // namespace

bool is_big_int(const Json& value) {
    return value.is_binary() && value.get_binary().has_subtype() &&
           value.get_binary().subtype() == kBigIntSubtype;
}

std::string big_int_digits(const Json& value) {
    const auto& bytes = value.get_binary();
    return std::string(bytes.begin(), bytes.end());
}

bool py_truthy(const Json& value) {
    switch (value.type()) {
        case Json::value_t::null:
            return false;
        case Json::value_t::boolean:
            return value.get<bool>();
        case Json::value_t::number_integer:
            return value.get<int64_t>() != 0;
        case Json::value_t::number_unsigned:
            return value.get<uint64_t>() != 0;
        case Json::value_t::number_float:
            return value.get<double>() != 0.0;
        // nlohmann's empty() is false for every string, hence the explicit check.
        case Json::value_t::string:
            return !value.get_ref<const std::string&>().empty();
        case Json::value_t::array:
        case Json::value_t::object:
            return !value.empty();
        case Json::value_t::binary:
            return is_big_int(value);
        case Json::value_t::discarded:
            return false;
    }
    return false;
}

std::string py_float_repr(double value) {
    if (std::isnan(value)) return "nan";
    if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
    char buf[64];
    const auto result = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
    std::string_view text(buf, static_cast<size_t>(result.ptr - buf));
    std::string out;
    if (text[0] == '-') {
        out += '-';
        text.remove_prefix(1);
    }
    const size_t e = text.find('e');
    std::string digits;
    for (char c : text.substr(0, e)) {
        if (c != '.') digits += c;
    }
    int exponent = 0;
    std::string_view exp_text = text.substr(e + 1);
    const bool exp_negative = exp_text[0] == '-';
    if (exp_text[0] == '+' || exp_text[0] == '-') exp_text.remove_prefix(1);
    std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exponent);
    if (exp_negative) exponent = -exponent;
    const int point = exponent + 1;  // digits d1 d2 ... with the decimal point after `point`
    if (point <= -4 || point > 16) {
        out += digits[0];
        if (digits.size() > 1) out += "." + digits.substr(1);
        char exp_buf[16];
        std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                      exponent < 0 ? -exponent : exponent);
        out += exp_buf;
    } else if (point <= 0) {
        out += "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    } else if (static_cast<size_t>(point) >= digits.size()) {
        out += digits + std::string(static_cast<size_t>(point) - digits.size(), '0') + ".0";
    } else {
        out += digits.substr(0, static_cast<size_t>(point)) + "." +
               digits.substr(static_cast<size_t>(point));
    }
    return out;
}

std::string py_repr(const Json& value) {
    switch (value.type()) {
        case Json::value_t::null:
            return "None";
        case Json::value_t::boolean:
            return value.get<bool>() ? "True" : "False";
        case Json::value_t::number_integer:
            return std::to_string(value.get<int64_t>());
        case Json::value_t::number_unsigned:
            return std::to_string(value.get<uint64_t>());
        case Json::value_t::number_float:
            return py_float_repr(value.get<double>());
        case Json::value_t::string:
            return repr_string(value.get_ref<const std::string&>());
        case Json::value_t::array: {
            std::string out = "[";
            bool first = true;
            for (const Json& item : value) {
                if (!first) out += ", ";
                first = false;
                out += py_repr(item);
            }
            return out + "]";
        }
        case Json::value_t::object: {
            std::string out = "{";
            bool first = true;
            for (const auto& [key, item] : value.items()) {
                if (!first) out += ", ";
                first = false;
                out += repr_string(key) + ": " + py_repr(item);
            }
            return out + "}";
        }
        case Json::value_t::binary:
            return is_big_int(value) ? big_int_digits(value) : "b''";
        case Json::value_t::discarded:
            return "None";
    }
    return "None";
}

std::string py_str(const Json& value) {
    if (value.is_string()) return value.get<std::string>();
    return py_repr(value);
}

std::string py_json_dumps(const Json& value) {
    std::string out;
    dump(out, value);
    return out;
}

std::string dump_json(const Json& value) {
    return py_json_dumps(value);
}

std::optional<std::string> py_key(const Json& value) {
    switch (value.type()) {
        case Json::value_t::null:
            return "N";
        case Json::value_t::boolean:
            return value.get<bool>() ? "I1" : "I0";
        case Json::value_t::number_integer:
            return "I" + std::to_string(value.get<int64_t>());
        case Json::value_t::number_unsigned:
            return "I" + std::to_string(value.get<uint64_t>());
        case Json::value_t::number_float: {
            const double d = value.get<double>();
            if (std::isnan(d)) {
                // Two NaN objects are never the same dict key.
                static thread_local uint64_t counter = 0;
                return "nan#" + std::to_string(counter++);
            }
            if (std::isfinite(d) && d == std::trunc(d)) return "I" + integral_double_digits(d);
            return "F" + py_float_repr(d);
        }
        case Json::value_t::string:
            return "S" + value.get<std::string>();
        case Json::value_t::binary:
            if (is_big_int(value)) return "I" + big_int_digits(value);
            return std::nullopt;
        case Json::value_t::array:
        case Json::value_t::object:
        case Json::value_t::discarded:
            return std::nullopt;
    }
    return std::nullopt;
}

const Json* py_get(const Json& object, std::string_view key) {
    if (!object.is_object()) return nullptr;
    auto it = object.find(std::string(key));
    return it == object.end() ? nullptr : &*it;
}

}  // namespace dsv4::chat
