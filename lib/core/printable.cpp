#include "core/printable.hpp"

#include <cstdint>

namespace sitsrt {
namespace {

// Length of the valid UTF-8 sequence at text[i] (2..4) and its code point, or 0 when invalid.
std::size_t utf8_sequence(std::string_view text, std::size_t i, std::uint32_t& cp) {
  const auto byte = [&](std::size_t k) { return static_cast<std::uint8_t>(text[k]); };
  const std::uint8_t b0 = byte(i);
  std::size_t n = 0;
  std::uint32_t min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2, cp = b0 & 0x1Fu, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3, cp = b0 & 0x0Fu, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4, cp = b0 & 0x07u, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0u) != 0x80u) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

bool hidden_code_point(std::uint32_t cp) noexcept {
  return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

void escape_byte(std::uint8_t b, std::string& out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  switch (b) {
    case '\n': out += "\\n"; return;
    case '\t': out += "\\t"; return;
    case '\r': out += "\\r"; return;
    case '\0': out += "\\0"; return;
    default: break;
  }
  out += "\\x";
  out += kHex[b >> 4];
  out += kHex[b & 0xF];
}

}  // namespace

std::string printable(std::string_view text, bool keep_line_breaks) {
  const auto plain = [&](std::uint8_t b) {
    return (b >= 0x20 && b < 0x7F) || (keep_line_breaks && (b == '\n' || b == '\t'));
  };
  std::size_t first = 0;
  while (first < text.size() && plain(static_cast<std::uint8_t>(text[first]))) ++first;
  if (first == text.size()) return std::string(text);
  std::string out(text.substr(0, first));
  out.reserve(text.size() + 16);
  for (std::size_t i = first; i < text.size();) {
    const auto b = static_cast<std::uint8_t>(text[i]);
    if (plain(b)) {
      out += static_cast<char>(b);
      ++i;
      continue;
    }
    std::uint32_t cp = 0;
    const std::size_t n = b >= 0x80 ? utf8_sequence(text, i, cp) : 0;
    if (n == 0) {
      escape_byte(b, out);
      ++i;
      continue;
    }
    if (hidden_code_point(cp)) {
      for (std::size_t k = 0; k < n; ++k) escape_byte(static_cast<std::uint8_t>(text[i + k]), out);
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

}  // namespace sitsrt
