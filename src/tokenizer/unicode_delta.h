// Code points that Oniguruma in HF tokenizers 0.23 (Unicode 16.0) puts in a general category
// but PCRE2 10.42 (Unicode 14.0) leaves unassigned, so \p{L} etc. must list them explicitly
// for the Split regexes to cut text exactly as HF does. Every entry was checked against HF's
// own pre-tokenizer (all code points, probes per category class); none of them was assigned
// in Unicode 14, so adding them to a class never conflicts with PCRE2's own tables.
#pragma once

#include <string_view>

namespace dsv4::tok {

// L: 9272 code points in 35 ranges
constexpr std::string_view kDeltaL =
    "\\x{1c89}-\\x{1c8a}\\x{a7cb}-\\x{a7cd}\\x{a7da}-\\x{a7dc}\\x{105c0}-\\x{105f3}"
    "\\x{10d4a}-\\x{10d65}\\x{10d6f}-\\x{10d85}\\x{10ec2}-\\x{10ec4}\\x{1123f}-\\x{11240}"
    "\\x{11380}-\\x{11389}\\x{1138b}\\x{1138e}\\x{11390}-\\x{113b5}\\x{113b7}\\x{113d1}"
    "\\x{113d3}\\x{11bc0}-\\x{11be0}\\x{11f02}\\x{11f04}-\\x{11f10}\\x{11f12}-\\x{11f33}"
    "\\x{1342f}\\x{13441}-\\x{13446}\\x{13460}-\\x{143fa}\\x{16100}-\\x{1611d}"
    "\\x{16d40}-\\x{16d6c}\\x{18cff}\\x{1b132}\\x{1b155}\\x{1df25}-\\x{1df2a}"
    "\\x{1e030}-\\x{1e06d}\\x{1e4d0}-\\x{1e4eb}\\x{1e5d0}-\\x{1e5ed}\\x{1e5f0}\\x{2b739}"
    "\\x{2ebf0}-\\x{2ee5d}\\x{31350}-\\x{323af}";
// M: 93 code points in 24 ranges
constexpr std::string_view kDeltaM =
    "\\x{897}\\x{cf3}\\x{ece}\\x{10d69}-\\x{10d6d}\\x{10efc}-\\x{10eff}\\x{11241}"
    "\\x{113b8}-\\x{113c0}\\x{113c2}\\x{113c5}\\x{113c7}-\\x{113ca}\\x{113cc}-\\x{113d0}"
    "\\x{113d2}\\x{113e1}-\\x{113e2}\\x{11f00}-\\x{11f01}\\x{11f03}\\x{11f34}-\\x{11f3a}"
    "\\x{11f3e}-\\x{11f42}\\x{11f5a}\\x{13440}\\x{13447}-\\x{13455}\\x{1611e}-\\x{1612f}"
    "\\x{1e08f}\\x{1e4ec}-\\x{1e4ef}\\x{1e5ee}-\\x{1e5ef}";
// N: 120 code points in 10 ranges
constexpr std::string_view kDeltaN =
    "\\x{10d40}-\\x{10d49}\\x{116d0}-\\x{116e3}\\x{11bf0}-\\x{11bf9}\\x{11f50}-\\x{11f59}"
    "\\x{16130}-\\x{16139}\\x{16d70}-\\x{16d79}\\x{1ccf0}-\\x{1ccf9}\\x{1d2c0}-\\x{1d2d3}"
    "\\x{1e4f0}-\\x{1e4f9}\\x{1e5f1}-\\x{1e5fa}";
// P: 36 code points in 10 ranges
constexpr std::string_view kDeltaP =
    "\\x{1b4e}-\\x{1b4f}\\x{1b7f}\\x{10d6e}\\x{113d4}-\\x{113d5}\\x{113d7}-\\x{113d8}"
    "\\x{11b00}-\\x{11b09}\\x{11be1}\\x{11f43}-\\x{11f4f}\\x{16d6d}-\\x{16d6f}\\x{1e5ff}";
// S: 773 code points in 25 ranges
constexpr std::string_view kDeltaS =
    "\\x{2427}-\\x{2429}\\x{2ffc}-\\x{2fff}\\x{31e4}-\\x{31e5}\\x{31ef}"
    "\\x{10d8e}-\\x{10d8f}\\x{1cc00}-\\x{1ccef}\\x{1cd00}-\\x{1ceb3}\\x{1f6dc}"
    "\\x{1f774}-\\x{1f776}\\x{1f77b}-\\x{1f77f}\\x{1f7d9}\\x{1f8b2}-\\x{1f8bb}"
    "\\x{1f8c0}-\\x{1f8c1}\\x{1fa75}-\\x{1fa77}\\x{1fa87}-\\x{1fa89}\\x{1fa8f}"
    "\\x{1faad}-\\x{1faaf}\\x{1fabb}-\\x{1fabf}\\x{1fac6}\\x{1face}-\\x{1facf}"
    "\\x{1fada}-\\x{1fadc}\\x{1fadf}\\x{1fae8}-\\x{1fae9}\\x{1faf7}-\\x{1faf8}"
    "\\x{1fbcb}-\\x{1fbef}";

// The PCRE2 class content to add to \p{<category>} (category one of L M N P S), else empty.
inline std::string_view unicode16_delta(char category) {
    switch (category) {
        case 'L':
            return kDeltaL;
        case 'M':
            return kDeltaM;
        case 'N':
            return kDeltaN;
        case 'P':
            return kDeltaP;
        case 'S':
            return kDeltaS;
        default:
            return {};
    }
}

}  // namespace dsv4::tok
