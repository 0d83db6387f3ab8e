#include "tokenizer/byte_level.hpp"

#include "tokenizer/utf8.hpp"

#include <array>

namespace sitsrt::detail {
namespace {

constexpr bool maps_to_itself(std::uint32_t byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
}

constexpr std::uint32_t kMappedEnd = 0x100 + 68;  // code points of the mapping are all below this

struct Tables {
  std::array<std::uint32_t, 256> code_point{};
  std::array<std::int16_t, kMappedEnd> byte_of{};  // -1: not a mapped code point
  std::array<char, 256 * 2> utf8{};
  std::array<std::uint8_t, 256> utf8_length{};
};

constexpr Tables make_tables() {
  Tables t;
  for (auto& b : t.byte_of) b = -1;
  std::uint32_t next_extra = 0x100;
  for (std::uint32_t byte = 0; byte < 256; ++byte) {
    const std::uint32_t cp = maps_to_itself(byte) ? byte : next_extra++;
    t.code_point[byte] = cp;
    t.byte_of[cp] = static_cast<std::int16_t>(byte);
    if (cp < 0x80) {
      t.utf8[byte * 2] = static_cast<char>(cp);
      t.utf8_length[byte] = 1;
    } else {  // all mapped code points are below U+0800: two UTF-8 bytes
      t.utf8[byte * 2] = static_cast<char>(0xC0 | (cp >> 6));
      t.utf8[byte * 2 + 1] = static_cast<char>(0x80 | (cp & 0x3F));
      t.utf8_length[byte] = 2;
    }
  }
  return t;
}

constexpr Tables kTables = make_tables();
static_assert(kTables.code_point[' '] == 0x120 && kTables.code_point['\n'] == 0x10A);

}  // namespace

std::string_view byte_level_char(std::uint8_t byte) noexcept {
  return {&kTables.utf8[byte * 2], kTables.utf8_length[byte]};
}

void append_byte_level(std::string_view bytes, std::string& out) {
  for (const char c : bytes) out.append(byte_level_char(static_cast<std::uint8_t>(c)));
}

void append_byte_level_decoded(std::string_view piece, std::string& out) {
  std::size_t pos = 0;
  while (pos < piece.size()) {
    const Utf8Sequence character = scan_utf8(piece.substr(pos));
    const std::size_t length = character.status == Utf8Status::kComplete ? character.length : 1;
    std::uint32_t cp = kMappedEnd;
    const auto lead = static_cast<std::uint8_t>(piece[pos]);
    if (length == 1 && character.status == Utf8Status::kComplete) {
      cp = lead;
    } else if (length == 2) {
      cp = ((lead & 0x1Fu) << 6) | (static_cast<std::uint8_t>(piece[pos + 1]) & 0x3Fu);
    }
    if (cp < kMappedEnd && kTables.byte_of[cp] >= 0) {
      out.push_back(static_cast<char>(kTables.byte_of[cp]));
    } else {
      out.append(piece.substr(pos, length));
    }
    pos += length;
  }
}

}  // namespace sitsrt::detail
