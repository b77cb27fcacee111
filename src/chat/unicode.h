// The two Unicode predicates of Python 3.11 (Unicode 14.0) that the reference's output
// depends on.
#pragma once

namespace dsv4::chat {

// str.isprintable() for one character: false for categories Cc Cf Cs Co Cn Zl Zp Zs except
// U+0020. Decides what repr() escapes.
bool py_isprintable(char32_t c);

// str.isspace() for one character (what the re module's \s matches in str patterns).
bool py_isspace(char32_t c);

}  // namespace dsv4::chat
