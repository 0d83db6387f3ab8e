#include "chat/unicode.hpp"

#include "chat/value.hpp"

#include <clocale>
#include <cwctype>
#include <locale.h>
#include <wctype.h>

namespace sitsrt::chat::unicode {
namespace {

// glibc's C.UTF-8 locale carries the Unicode character classes and simple case mappings;
// created once, never freed (a process-lifetime constant), and read-only afterwards.
locale_t unicode_locale() noexcept {
  static const locale_t locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return locale;
}

}  // namespace

bool is_valid_utf8(std::string_view text) noexcept {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    std::size_t extra = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      extra = 1;
    } else if (lead == 0xE0) {
      extra = 2;
      lo = 0xA0;
    } else if (lead == 0xED) {
      extra = 2;
      hi = 0x9F;
    } else if (lead >= 0xE1 && lead <= 0xEF) {
      extra = 2;
    } else if (lead == 0xF0) {
      extra = 3;
      lo = 0x90;
    } else if (lead >= 0xF1 && lead <= 0xF3) {
      extra = 3;
    } else if (lead == 0xF4) {
      extra = 3;
      hi = 0x8F;
    } else {
      return false;
    }
    if (i + extra >= text.size()) return false;  // truncated sequence
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto byte = static_cast<unsigned char>(text[i + k]);
      if (byte < (k == 1 ? lo : 0x80) || byte > (k == 1 ? hi : 0xBF)) return false;
    }
    i += extra + 1;
  }
  return true;
}

Decoded decode_at(std::string_view text, std::size_t at) noexcept {
  const auto lead = static_cast<unsigned char>(text[at]);
  if (lead < 0x80) return {lead, 1};
  std::size_t extra = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : 1;
  char32_t cp = lead & (0x3F >> extra);
  for (std::size_t k = 1; k <= extra && at + k < text.size(); ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(text[at + k]) & 0x3F);
  }
  return {cp, extra + 1};
}

std::u32string decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const Decoded d = decode_at(text, i);
    out.push_back(d.code_point);
    i += d.bytes;
  }
  return out;
}

void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (const char32_t c : code_points) append(out, c);
  return out;
}

std::size_t length(std::string_view text) noexcept {
  std::size_t n = 0;
  for (const char byte : text) n += (static_cast<unsigned char>(byte) & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t c) noexcept {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_printable(char32_t c) noexcept {
  if (c < 0x20 || (c >= 0x7F && c < 0xA0)) return false;  // Cc
  if (c == ' ') return true;
  if (is_space(c)) return false;  // Zs, Zl, Zp
  // Cf (format characters)
  if (c == 0xAD || (c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x890 ||
      c == 0x891 || c == 0x8E2 || c == 0x180E || (c >= 0x200B && c <= 0x200F) || (c >= 0x202A && c <= 0x202E) ||
      (c >= 0x2060 && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) ||
      c == 0x110BD || c == 0x110CD || (c >= 0x13430 && c <= 0x1343F) || (c >= 0x1BCA0 && c <= 0x1BCA3) ||
      (c >= 0x1D173 && c <= 0x1D17A) || c == 0xE0001 || (c >= 0xE0020 && c <= 0xE007F)) {
    return false;
  }
  if ((c >= 0xD800 && c <= 0xDFFF) || (c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000) return false;  // Cs, Co
  if ((c >= 0xFDD0 && c <= 0xFDEF) || (c & 0xFFFE) == 0xFFFE) return false;                           // non-characters
  return true;
}

bool is_alpha(char32_t c) noexcept {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  const locale_t locale = unicode_locale();
  return locale != nullptr && iswalpha_l(static_cast<wint_t>(c), locale) != 0;
}

bool is_digit(char32_t c) noexcept {
  if (c < 0x80) return c >= '0' && c <= '9';
  const locale_t locale = unicode_locale();
  return locale != nullptr && iswdigit_l(static_cast<wint_t>(c), locale) != 0;
}

bool is_word(char32_t c) noexcept { return c == '_' || is_alpha(c) || is_digit(c); }

bool is_upper(char32_t c) noexcept {
  if (c < 0x80) return c >= 'A' && c <= 'Z';
  const locale_t locale = unicode_locale();
  return locale != nullptr && iswupper_l(static_cast<wint_t>(c), locale) != 0;
}

bool is_lower(char32_t c) noexcept {
  if (c < 0x80) return c >= 'a' && c <= 'z';
  const locale_t locale = unicode_locale();
  return locale != nullptr && iswlower_l(static_cast<wint_t>(c), locale) != 0;
}

char32_t to_upper(char32_t c) noexcept {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  const locale_t locale = unicode_locale();
  return locale != nullptr ? static_cast<char32_t>(towupper_l(static_cast<wint_t>(c), locale)) : c;
}

char32_t to_lower(char32_t c) noexcept {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  const locale_t locale = unicode_locale();
  return locale != nullptr ? static_cast<char32_t>(towlower_l(static_cast<wint_t>(c), locale)) : c;
}

namespace {

// Python's str.upper() applies Unicode's full (one-to-many) mappings of SpecialCasing.txt.
struct Expansion {
  char32_t from;
  std::u32string_view to;
};
constexpr Expansion kUpperExpansions[] = {
    {0x00DF, U"SS"}, {0x0149, U"\u02BCN"}, {0x01F0, U"J\u030C"}, {0x0587, U"\u0535\u0552"},
    {0x1E96, U"H\u0331"}, {0x1E97, U"T\u0308"}, {0x1E98, U"W\u030A"}, {0x1E99, U"Y\u030A"},
    {0x1E9A, U"A\u02BE"}, {0xFB00, U"FF"}, {0xFB01, U"FI"}, {0xFB02, U"FL"}, {0xFB03, U"FFI"},
    {0xFB04, U"FFL"}, {0xFB05, U"ST"}, {0xFB06, U"ST"}, {0xFB13, U"\u0544\u0546"},
    {0xFB14, U"\u0544\u0535"}, {0xFB15, U"\u0544\u053B"}, {0xFB16, U"\u054E\u0546"},
    {0xFB17, U"\u0544\u053D"},
};

// Greek letters whose full upper-case mapping (iota subscripts, accented diaereses) is not
// tabulated here: upper() refuses them rather than print a different text than Python.
bool greek_special_upper(char32_t c) noexcept {
  return c == 0x0390 || c == 0x03B0 || (c >= 0x1F50 && c <= 0x1F56 && c % 2 == 0) || (c >= 0x1F80 && c <= 0x1FAF) ||
         (c >= 0x1FB2 && c <= 0x1FB4) || c == 0x1FB6 || c == 0x1FB7 || c == 0x1FBC || (c >= 0x1FC2 && c <= 0x1FC4) ||
         c == 0x1FC6 || c == 0x1FC7 || c == 0x1FCC || c == 0x1FD2 || c == 0x1FD3 || c == 0x1FD6 || c == 0x1FD7 ||
         (c >= 0x1FE2 && c <= 0x1FE4) || c == 0x1FE6 || c == 0x1FE7 || (c >= 0x1FF2 && c <= 0x1FF4) || c == 0x1FF6 ||
         c == 0x1FF7 || c == 0x1FFC;
}

bool cased(char32_t c) noexcept { return is_upper(c) || is_lower(c); }

}  // namespace

std::string upper(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const Decoded d = decode_at(text, i);
    i += d.bytes;
    const char32_t c = d.code_point;
    if (c >= 0xDF) {
      bool expanded = false;
      for (const Expansion& e : kUpperExpansions) {
        if (e.from == c) {
          for (const char32_t x : e.to) append(out, x);
          expanded = true;
          break;
        }
      }
      if (expanded) continue;
      if (greek_special_upper(c)) {
        fault(Fault::kUnsupported, "upper-casing U+{:04X} (Python maps it to several characters)", static_cast<unsigned>(c));
      }
    }
    append(out, to_upper(c));
  }
  return out;
}

std::string lower(std::string_view text) {
  const std::u32string cps = decode(text);
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    if (c == 0x0130) {  // capital I with dot above: "i" + combining dot, as Python
      append(out, U'i');
      append(out, 0x0307);
    } else if (c == 0x03A3) {  // Python's Final_Sigma rule, on the neighbouring characters
      const bool final = i > 0 && cased(cps[i - 1]) && (i + 1 == cps.size() || !cased(cps[i + 1]));
      append(out, final ? 0x03C2 : 0x03C3);
    } else {
      append(out, to_lower(c));
    }
  }
  return out;
}

}  // namespace sitsrt::chat::unicode
