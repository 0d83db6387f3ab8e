// UTF-8 validation shared by the tokenizer (character splitting, decode) and Utf8StreamDecoder.
// Follows the Unicode "maximal subpart" rule (Unicode 15, section 3.9, table 3-7): overlong
// forms, surrogates and code points above U+10FFFF are invalid, and each maximal invalid
// subpart becomes exactly one U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sitsrt::detail {

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

enum class Utf8Status {
  kComplete,    // `length` bytes form one valid character
  kIncomplete,  // all `length` available bytes are a valid start of a longer character
  kInvalid,     // the first `length` bytes are a maximal subpart that cannot start a character
};

struct Utf8Sequence {
  Utf8Status status;
  std::size_t length;  // >= 1
};

// Classifies the character that starts at text[0]; `text` must not be empty.
constexpr Utf8Sequence scan_utf8(std::string_view text) noexcept {
  const auto lead = static_cast<std::uint8_t>(text[0]);
  if (lead < 0x80) return {Utf8Status::kComplete, 1};
  std::size_t continuation_bytes = 0;
  // Valid range of the second byte; the lead byte narrows it to exclude overlong forms,
  // surrogates (ED A0..BF) and code points above U+10FFFF (F4 90..).
  std::uint8_t lo = 0x80;
  std::uint8_t hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    continuation_bytes = 1;
  } else if (lead == 0xE0) {
    continuation_bytes = 2;
    lo = 0xA0;
  } else if (lead == 0xED) {
    continuation_bytes = 2;
    hi = 0x9F;
  } else if (lead >= 0xE1 && lead <= 0xEF) {
    continuation_bytes = 2;
  } else if (lead == 0xF0) {
    continuation_bytes = 3;
    lo = 0x90;
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    continuation_bytes = 3;
  } else if (lead == 0xF4) {
    continuation_bytes = 3;
    hi = 0x8F;
  } else {
    return {Utf8Status::kInvalid, 1};  // 80..C1 (continuation or overlong lead), F5..FF
  }
  for (std::size_t i = 1; i <= continuation_bytes; ++i) {
    if (i >= text.size()) return {Utf8Status::kIncomplete, i};
    const auto byte = static_cast<std::uint8_t>(text[i]);
    if (byte < lo || byte > hi) return {Utf8Status::kInvalid, i};
    lo = 0x80;
    hi = 0xBF;
  }
  return {Utf8Status::kComplete, continuation_bytes + 1};
}

// Appends `bytes` to `out` with every invalid subpart replaced by U+FFFD. When
// `hold_incomplete_tail`, a trailing incomplete-but-valid character is not consumed (the caller
// keeps it for more bytes); otherwise it too becomes U+FFFD. Returns the bytes consumed.
inline std::size_t append_sanitized_utf8(std::string_view bytes, std::string& out, bool hold_incomplete_tail) {
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    // Copy runs of ASCII in one go; they dominate real text.
    std::size_t ascii_end = pos;
    while (ascii_end < bytes.size() && static_cast<std::uint8_t>(bytes[ascii_end]) < 0x80) ++ascii_end;
    out.append(bytes.substr(pos, ascii_end - pos));
    pos = ascii_end;
    if (pos == bytes.size()) break;

    const Utf8Sequence sequence = scan_utf8(bytes.substr(pos));
    switch (sequence.status) {
      case Utf8Status::kComplete:
        out.append(bytes.substr(pos, sequence.length));
        break;
      case Utf8Status::kIncomplete:
        if (hold_incomplete_tail) return pos;
        out.append(kReplacementCharacter);
        break;
      case Utf8Status::kInvalid:
        out.append(kReplacementCharacter);
        break;
    }
    pos += sequence.length;
  }
  return pos;
}

}  // namespace sitsrt::detail
