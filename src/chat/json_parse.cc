// parse_json: Python's json.loads (its C scanner), so that values re-rendered into a prompt
// come out as the reference renders them.
#include <charconv>
#include <cmath>
#include <unordered_map>

#include "base/utf8.h"
#include "chat/py_value.h"

namespace dsv4::chat {

namespace {

// Python's default recursion limit is 1000 frames, a few of them taken by the caller when the
// reference decodes tool-call arguments; deeper nesting raises there (and is caught: the
// arguments then stay one string), so it is an error here too.
constexpr int kMaxDepth = 990;
// Python 3.11 refuses int() of strings longer than this (sys.get_int_max_str_digits()).
constexpr size_t kMaxIntDigits = 4300;

class Parser {
  public:
    explicit Parser(std::string_view text) : s_(text) {}

    Expected<Json> parse() {
        skip_ws();
        Json value;
        if (!parse_value(value, 0)) return error(message_);
        skip_ws();
        if (pos_ != s_.size()) return error("Extra data at offset ", pos_);
        return value;
    }

  private:
    bool fail(const std::string& what) {
        message_ = what + " at offset " + std::to_string(pos_);
        return false;
    }

    void skip_ws() {
        while (pos_ < s_.size() &&
               (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
            ++pos_;
        }
    }

    bool literal(std::string_view word) {
        if (s_.substr(pos_, word.size()) != word) return false;
        pos_ += word.size();
        return true;
    }

    bool parse_value(Json& out, int depth) {
        if (depth > kMaxDepth) return fail("maximum nesting depth exceeded");
        if (pos_ >= s_.size()) return fail("Expecting value");
        const char c = s_[pos_];
        if (c == '"') {
            std::string text;
            if (!parse_string(text)) return false;
            out = std::move(text);
            return true;
        }
        if (c == '{') return parse_object(out, depth);
        if (c == '[') return parse_array(out, depth);
        if (literal("null")) {
            out = nullptr;
            return true;
        }
        if (literal("true")) {
            out = true;
            return true;
        }
        if (literal("false")) {
            out = false;
            return true;
        }
        if (literal("NaN")) {
            out = std::nan("");
            return true;
        }
        if (literal("Infinity")) {
            out = HUGE_VAL;
            return true;
        }
        if (literal("-Infinity")) {
            out = -HUGE_VAL;
            return true;
        }
        if (c == '-' || (c >= '0' && c <= '9')) return parse_number(out);
        return fail("Expecting value");
    }

    static bool is_digit(char c) { return c >= '0' && c <= '9'; }

    bool parse_number(Json& out) {
        const size_t start = pos_;
        size_t i = pos_;
        if (s_[i] == '-') ++i;
        if (i < s_.size() && s_[i] >= '1' && s_[i] <= '9') {
            while (i < s_.size() && is_digit(s_[i])) ++i;
        } else if (i < s_.size() && s_[i] == '0') {
            ++i;
        } else {
            return fail("Expecting value");
        }
        bool is_float = false;
        if (i + 1 < s_.size() && s_[i] == '.' && is_digit(s_[i + 1])) {
            is_float = true;
            i += 2;
            while (i < s_.size() && is_digit(s_[i])) ++i;
        }
        if (i < s_.size() && (s_[i] == 'e' || s_[i] == 'E')) {
            size_t j = i + 1;
            if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
            const size_t digits = j;
            while (j < s_.size() && is_digit(s_[j])) ++j;
            // An exponent without digits is not part of the number (Python backs off too).
            if (j > digits) {
                is_float = true;
                i = j;
            }
        }
        pos_ = i;
        const std::string_view text = s_.substr(start, i - start);
        if (is_float) {
            out = parse_float(text);
            return true;
        }
        const bool negative = text[0] == '-';
        if (text.size() - (negative ? 1 : 0) > kMaxIntDigits) {
            return fail("integer string too long (exceeds Python's 4300 digit limit)");
        }
        int64_t signed_value = 0;
        auto r = std::from_chars(text.data(), text.data() + text.size(), signed_value);
        if (r.ec == std::errc() && r.ptr == text.data() + text.size()) {
            out = signed_value;
            return true;
        }
        uint64_t unsigned_value = 0;
        r = std::from_chars(text.data(), text.data() + text.size(), unsigned_value);
        if (!negative && r.ec == std::errc() && r.ptr == text.data() + text.size()) {
            out = unsigned_value;
            return true;
        }
        out = Json::binary(std::vector<std::uint8_t>(text.begin(), text.end()), kBigIntSubtype);
        return true;
    }

    // float(text): correctly rounded; overflow gives +-inf and underflow +-0.0, like Python.
    static double parse_float(std::string_view text) {
        double value = 0;
        const auto r = std::from_chars(text.data(), text.data() + text.size(), value);
        if (r.ec != std::errc::result_out_of_range) return value;
        const bool negative = text[0] == '-';
        // Out of range: the decimal exponent says which way.
        long exponent = 0;
        const size_t e = text.find_first_of("eE");
        if (e != std::string_view::npos) {
            std::string_view exp_text = text.substr(e + 1);
            const bool exp_negative = !exp_text.empty() && exp_text[0] == '-';
            if (!exp_text.empty() && (exp_text[0] == '+' || exp_text[0] == '-')) {
                exp_text.remove_prefix(1);
            }
            // Saturate: the exact size does not matter past the double range.
            for (char c : exp_text) exponent = std::min<long>(exponent * 10 + (c - '0'), 1000000);
            if (exp_negative) exponent = -exponent;
        }
        const std::string_view mantissa = text.substr(0, e);
        const size_t point = mantissa.find('.');
        const std::string_view integer = mantissa.substr(
            negative ? 1 : 0,
            point == std::string_view::npos ? std::string_view::npos : point - (negative ? 1 : 0));
        const bool integer_nonzero = integer.find_first_not_of('0') != std::string_view::npos;
        const bool large =
            integer_nonzero ? exponent + static_cast<long>(integer.size()) > 0 : exponent > 0;
        const double magnitude = large ? HUGE_VAL : 0.0;
        return negative ? -magnitude : magnitude;
    }

    static int hex_value(char c) {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    }

    bool read_hex4(size_t at, uint32_t& value) const {
        if (at + 4 > s_.size()) return false;
        value = 0;
        for (size_t k = 0; k < 4; ++k) {
            const int h = hex_value(s_[at + k]);
            if (h < 0) return false;
            value = value * 16 + static_cast<uint32_t>(h);
        }
        return true;
    }

    bool parse_string(std::string& out) {
        ++pos_;  // the opening quote
        while (true) {
            if (pos_ >= s_.size()) return fail("Unterminated string");
            const char c = s_[pos_];
            if (c == '"') {
                ++pos_;
                return true;
            }
            if (static_cast<unsigned char>(c) < 0x20) return fail("Invalid control character");
            if (c != '\\') {
                out += c;
                ++pos_;
                continue;
            }
            if (pos_ + 1 >= s_.size()) return fail("Unterminated string");
            const char e = s_[pos_ + 1];
            pos_ += 2;
            switch (e) {
                case '"':
                    out += '"';
                    break;
                case '\\':
                    out += '\\';
                    break;
                case '/':
                    out += '/';
                    break;
                case 'b':
                    out += '\b';
                    break;
                case 'f':
                    out += '\f';
                    break;
                case 'n':
                    out += '\n';
                    break;
                case 'r':
                    out += '\r';
                    break;
                case 't':
                    out += '\t';
                    break;
                case 'u': {
                    uint32_t cp = 0;
                    if (!read_hex4(pos_, cp)) return fail("Invalid \\uXXXX escape");
                    pos_ += 4;
                    uint32_t low = 0;
                    if (cp >= 0xD800 && cp <= 0xDBFF && pos_ + 1 < s_.size() && s_[pos_] == '\\' &&
                        s_[pos_ + 1] == 'u' && read_hex4(pos_ + 2, low) && low >= 0xDC00 &&
                        low <= 0xDFFF) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                        pos_ += 6;
                    } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                        // A lone surrogate is a valid Python str but has no UTF-8 form.
                        cp = 0xFFFD;
                    }
                    append_utf8(out, cp);
                    break;
                }
                default:
                    return fail("Invalid \\escape");
            }
        }
    }

    bool parse_array(Json& out, int depth) {
        ++pos_;
        out = Json::array();
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ']') {
            ++pos_;
            return true;
        }
        while (true) {
            Json item;
            if (!parse_value(item, depth + 1)) return false;
            out.push_back(std::move(item));
            skip_ws();
            if (pos_ < s_.size() && s_[pos_] == ']') {
                ++pos_;
                return true;
            }
            if (pos_ >= s_.size() || s_[pos_] != ',') return fail("Expecting ',' delimiter");
            ++pos_;
            skip_ws();
        }
    }

    bool parse_object(Json& out, int depth) {
        ++pos_;
        out = Json::object();
        // ordered_json looks keys up by a linear scan, so out[key] per member made a wide
        // object cost O(n^2) (40,000 keys took 20 s: a request body could stall a server).
        // Members are appended to the underlying vector, and repeated keys found through this
        // index instead.
        auto& members = out.get_ref<Json::object_t&>();
        std::unordered_map<std::string, size_t> index;
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == '}') {
            ++pos_;
            return true;
        }
        while (true) {
            if (pos_ >= s_.size() || s_[pos_] != '"') {
                return fail("Expecting property name enclosed in double quotes");
            }
            std::string key;
            if (!parse_string(key)) return false;
            skip_ws();
            if (pos_ >= s_.size() || s_[pos_] != ':') return fail("Expecting ':' delimiter");
            ++pos_;
            skip_ws();
            Json item;
            if (!parse_value(item, depth + 1)) return false;
            // A repeated key keeps its first position and takes the last value (a dict).
            const auto [at, fresh] = index.try_emplace(key, members.size());
            if (fresh) {
                members.Container::emplace_back(std::move(key), std::move(item));
            } else {
                members.Container::operator[](at->second).second = std::move(item);
            }
            skip_ws();
            if (pos_ < s_.size() && s_[pos_] == '}') {
                ++pos_;
                return true;
            }
            if (pos_ >= s_.size() || s_[pos_] != ',') return fail("Expecting ',' delimiter");
            ++pos_;
            skip_ws();
        }
    }

    std::string_view s_;
    size_t pos_ = 0;
    std::string message_;
};

}  // namespace

Expected<Json> parse_json(std::string_view text) {
    return Parser(text).parse();
}

}  // namespace dsv4::chat
