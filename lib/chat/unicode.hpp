// Code-point level helpers for the template interpreter. Python strings are sequences of code
// points, so len(), indexing, slicing, strip() and the case methods work on decoded UTF-8.
// Every string the interpreter sees is valid UTF-8 (the template source and the JSON inputs are
// checked on entry), so decoding here does not re-validate.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::chat::unicode {

// Whether `text` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
[[nodiscard]] bool is_valid_utf8(std::string_view text) noexcept;

[[nodiscard]] std::u32string decode(std::string_view text);
[[nodiscard]] std::string encode(std::u32string_view code_points);
void append(std::string& out, char32_t code_point);
[[nodiscard]] std::size_t length(std::string_view text) noexcept;  // in code points

// The code point starting at text[at] and its byte length.
struct Decoded {
  char32_t code_point;
  std::size_t bytes;
};
[[nodiscard]] Decoded decode_at(std::string_view text, std::size_t at) noexcept;

// Python's str.isspace() (also what Python's re module means by \s).
[[nodiscard]] bool is_space(char32_t c) noexcept;
// Python's str.isprintable(), which decides what repr() escapes. Approximated: controls, format
// characters, separators other than ' ', private use and non-characters are unprintable;
// unassigned code points are taken as printable.
[[nodiscard]] bool is_printable(char32_t c) noexcept;
// Python's \w in a str pattern: letters, digits and '_'.
[[nodiscard]] bool is_word(char32_t c) noexcept;
[[nodiscard]] bool is_alpha(char32_t c) noexcept;
[[nodiscard]] bool is_digit(char32_t c) noexcept;
[[nodiscard]] bool is_upper(char32_t c) noexcept;
[[nodiscard]] bool is_lower(char32_t c) noexcept;
// Simple (one-to-one) Unicode case mappings of one code point.
[[nodiscard]] char32_t to_upper(char32_t c) noexcept;
[[nodiscard]] char32_t to_lower(char32_t c) noexcept;

// Python's str.upper() and str.lower(): the simple mappings plus Python's one-to-many ones
// (U+00DF to "SS", ligatures, U+0130) and the final-sigma rule. upper() raises kUnsupported for
// the Greek letters whose full mapping is not tabulated here.
[[nodiscard]] std::string upper(std::string_view text);
[[nodiscard]] std::string lower(std::string_view text);

}  // namespace sitsrt::chat::unicode
