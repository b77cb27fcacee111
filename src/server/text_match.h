// Marker search over generated text that arrives in pieces: the earliest complete marker, and
// how much of the text's end must wait because the next piece may complete a marker there.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <vector>

namespace dsv4::server {

// The model's end-of-sentence marker, as the output parsers meet it in text.
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";

struct Found {
    size_t pos = std::string_view::npos;
    std::string_view marker;
    bool found() const { return pos != std::string_view::npos; }
};

// The earliest complete marker in s (the first listed wins a tie); with ends_after, only one
// that ends past s's first ends_after bytes (text searched before cannot match again).
template <typename Markers>
Found find_first(std::string_view s, const Markers& markers, size_t ends_after = 0) {
    Found f;
    for (std::string_view m : markers) {
        const size_t p = s.find(m, ends_after >= m.size() ? ends_after - m.size() + 1 : 0);
        if (p != std::string_view::npos && p < f.pos) f = {p, m};
    }
    return f;
}
inline Found find_first(std::string_view s, std::initializer_list<std::string_view> markers) {
    return find_first<std::initializer_list<std::string_view>>(s, markers);
}

// Length of the longest suffix of s that is a proper prefix of a marker.
template <typename Markers>
size_t held_back(std::string_view s, const Markers& markers) {
    size_t keep = 0;
    for (std::string_view m : markers) {
        for (size_t n = std::min(s.size(), m.size() - 1); n > keep; --n) {
            if (s.substr(s.size() - n) == m.substr(0, n)) {
                keep = n;
                break;
            }
        }
    }
    return keep;
}
inline size_t held_back(std::string_view s, std::initializer_list<std::string_view> markers) {
    return held_back<std::initializer_list<std::string_view>>(s, markers);
}

}  // namespace dsv4::server
