// parse_json / dump_json follow Python's json module, which the reference's prompts show:
// numbers as Python re-prints them, exact big integers, escapes, repeated keys.
#include <gtest/gtest.h>

#include <chrono>

#include "chat/py_value.h"
#include "dsv4/chat.h"

namespace dsv4::chat {
namespace {

std::string roundtrip(std::string_view text) {
    auto value = parse_json(text);
    EXPECT_TRUE(value.has_value()) << text << ": " << value.status().message();
    return value ? dump_json(*value) : std::string();
}

TEST(PythonJson, NumbersComeBackAsPythonPrintsThem) {
    // The examples of the golden README.
    EXPECT_EQ(roundtrip("1e5"), "100000.0");
    EXPECT_EQ(roundtrip("2.5E-7"), "2.5e-07");
    EXPECT_EQ(roundtrip("1.50"), "1.5");
    EXPECT_EQ(roundtrip("-0"), "0");
    EXPECT_EQ(roundtrip("-0.0"), "-0.0");
    EXPECT_EQ(roundtrip("1E400"), "Infinity");
    EXPECT_EQ(roundtrip("-1E400"), "-Infinity");
    EXPECT_EQ(roundtrip("1e-400"), "0.0");
    EXPECT_EQ(roundtrip("123456789012345678901234567890"), "123456789012345678901234567890");
    EXPECT_EQ(roundtrip("-98765432109876543210"), "-98765432109876543210");
    EXPECT_EQ(roundtrip("12345678901234567890"), "12345678901234567890");
    // repr's switch to exponent form: below 1e-4 and from 1e16.
    EXPECT_EQ(roundtrip("0.0001"), "0.0001");
    EXPECT_EQ(roundtrip("0.00001"), "1e-05");
    EXPECT_EQ(roundtrip("1e15"), "1000000000000000.0");
    EXPECT_EQ(roundtrip("1e16"), "1e+16");
    EXPECT_EQ(roundtrip("1.5e300"), "1.5e+300");
    EXPECT_EQ(roundtrip("0.1"), "0.1");
    EXPECT_EQ(roundtrip("123456.789"), "123456.789");
    EXPECT_EQ(roundtrip("NaN"), "NaN");
    EXPECT_EQ(roundtrip("[Infinity, -Infinity]"), "[Infinity, -Infinity]");
}

TEST(PythonJson, StringsAndContainers) {
    EXPECT_EQ(roundtrip(R"({"a": [1, {"b": null}], "c": true})"),
              R"({"a": [1, {"b": null}], "c": true})");
    EXPECT_EQ(roundtrip(R"({"b":1,"a":2})"), R"({"b": 1, "a": 2})");  // order kept
    EXPECT_EQ(roundtrip(R"({"a": 1, "b": 2, "a": 3})"), R"({"a": 3, "b": 2})");
    EXPECT_EQ(roundtrip(R"("\u00e9\ud83d\ude00 \/")"), "\"é😀 /\"");
    EXPECT_EQ(roundtrip(R"("\u0001\u001f\u007f\u2028\n\t\"\\")"),
              "\"\\u0001\\u001f\x7f\u2028\\n\\t\\\"\\\\\"");
    EXPECT_EQ(roundtrip(R"("\ud800")"), "\"\uFFFD\"");
    EXPECT_EQ(roundtrip(" \t\n[]\r\n"), "[]");
    EXPECT_EQ(roundtrip("{}"), "{}");
}

TEST(PythonJson, RejectsWhatPythonRejects) {
    for (const char* bad : {"", "[1,]", R"({"a":1,})", "01", "1.", "-", "tru", "[1 2]", "\"a\nb\"",
                            "{'a': 1}", "1 2", "\"\\x\"", "\xEF\xBB\xBF[]", "{\"a\" 1}", "nan"}) {
        EXPECT_FALSE(parse_json(bad).has_value()) << bad;
    }
    EXPECT_FALSE(parse_json(std::string(5000, '7')).has_value());  // int() digit limit
    EXPECT_TRUE(parse_json(std::string(4300, '7')).has_value());
    EXPECT_FALSE(parse_json(std::string(2000, '[')).has_value());  // nesting depth
}

TEST(PythonJson, ReprAndStr) {
    auto v = [](std::string_view text) { return *parse_json(text); };
    EXPECT_EQ(py_str(v("null")), "None");
    EXPECT_EQ(py_str(v("true")), "True");
    EXPECT_EQ(py_str(v("\"plain\"")), "plain");
    EXPECT_EQ(py_str(v("1e5")), "100000.0");
    EXPECT_EQ(py_str(v(R"({"a": [1, "x", null, false]})")), "{'a': [1, 'x', None, False]}");
    EXPECT_EQ(py_repr(v(R"("it's")")), "\"it's\"");
    EXPECT_EQ(py_repr(v(R"("say \"hi\" it's")")), "'say \"hi\" it\\'s'");
    EXPECT_EQ(py_repr(v(R"("a\tb\u0001\u007f\u00a0\u00e9\u200b\u2028😀\\")")),
              "'a\\tb\\x01\\x7f\\xa0é\\u200b\\u2028😀\\\\'");
    EXPECT_EQ(py_repr(v("[1.0, -0.0, NaN, Infinity]")), "[1.0, -0.0, nan, inf]");
}

TEST(PythonJson, TruthinessAndKeys) {
    auto v = [](std::string_view text) { return *parse_json(text); };
    for (const char* falsy : {"null", "false", "0", "0.0", "-0.0", "\"\"", "[]", "{}"}) {
        EXPECT_FALSE(py_truthy(v(falsy))) << falsy;
    }
    for (const char* truthy : {"true", "1", "0.5", "NaN", "\"0\"", "[0]", "{\"a\": 0}",
                               "123456789012345678901234567890"}) {
        EXPECT_TRUE(py_truthy(v(truthy))) << truthy;
    }
    EXPECT_EQ(py_key(v("1")), py_key(v("1.0")));
    EXPECT_EQ(py_key(v("1")), py_key(v("true")));
    EXPECT_EQ(py_key(v("1e20")), py_key(v("100000000000000000000")));
    EXPECT_NE(py_key(v("1")), py_key(v("\"1\"")));
    EXPECT_NE(py_key(v("NaN")), py_key(v("NaN")));
    EXPECT_FALSE(py_key(v("[1]")).has_value());
    EXPECT_FALSE(py_key(v("{}")).has_value());
}

TEST(PythonJson, RepeatedKeysKeepFirstPositionAndLastValue) {
    EXPECT_EQ(roundtrip(R"({"a": 1, "b": 2, "a": 3})"), R"({"a": 3, "b": 2})");
    EXPECT_EQ(roundtrip(R"({"b": {"x": 1}, "a": 0, "b": [2]})"), R"({"b": [2], "a": 0})");
}

// A request body is untrusted: a wide object must cost linear time. ordered_json's own lookup
// is a linear scan, which made this 200,000-key object take minutes (40,000 keys: 20 s).
TEST(PythonJson, WideObjectParsesInLinearTime) {
    constexpr int kKeys = 200000;
    std::string text = "{";
    for (int i = 0; i < kKeys; ++i) text += (i ? ", \"k" : "\"k") + std::to_string(i) + "\": 1";
    text += ", \"k7\": 2}";  // one repeat at the end: found through the index, not a scan
    const auto start = std::chrono::steady_clock::now();
    auto value = parse_json(text);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(value.has_value());
    EXPECT_EQ(value->size(), static_cast<size_t>(kKeys));
    EXPECT_EQ((*value)["k7"], 2);
    EXPECT_EQ(value->begin().key(), "k0");
    EXPECT_EQ(std::next(value->begin(), 7).key(), "k7");
    // Linear is well under a second even under ASan; quadratic is minutes.
    EXPECT_LT(seconds, 10.0);
}

}  // namespace
}  // namespace dsv4::chat
