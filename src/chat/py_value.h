// Python's view of JSON values, which the reference encoder's output depends on: truthiness,
// str() (what str.format inserts), repr(), json.dumps, and dict-key equality.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "dsv4/chat.h"

namespace dsv4::chat {

// bool(value): null, false, 0, 0.0, "", [] and {} are false.
bool py_truthy(const Json& value);

// value == "text" (only a string equals a string).
inline bool py_is(const Json& value, std::string_view text) {
    return value.is_string() && value.get_ref<const std::string&>() == text;
}

// str(value): strings as they are, everything else as repr().
std::string py_str(const Json& value);

// repr(value): None, True, 1.5, 'text' (with Python's quoting and escapes), [..], {..}.
std::string py_repr(const Json& value);

// repr(float): shortest round-trip digits, exponent form below 1e-4 and from 1e16 on.
std::string py_float_repr(double value);

// json.dumps(value, ensure_ascii=False) (the same as dump_json).
std::string py_json_dumps(const Json& value);

// A string that is equal for two values exactly when Python's == holds and both hash alike
// (1 == 1.0 == True), or nullopt for unhashable values (lists and dicts: Python raises
// TypeError when one is used as a dict key or looked up in a set).
std::optional<std::string> py_key(const Json& value);

// msg.get(key): the member, or nullptr when it is missing.
const Json* py_get(const Json& object, std::string_view key);

// The digits of an integer too large for 64 bits (parse_json's representation).
bool is_big_int(const Json& value);
std::string big_int_digits(const Json& value);

}  // namespace dsv4::chat
