// GPT-2's byte-to-unicode mapping, used by byte-level BPE vocabularies: every byte becomes one
// printable code point so that pieces are valid text. Bytes '!'..'~', U+00A1..U+00AC and
// U+00AE..U+00FF map to themselves; the other 68 bytes (controls, space, DEL, NBSP, soft
// hyphen...) map in byte order to U+0100, U+0101, ... (space -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sitsrt::detail {

// UTF-8 of the code point `byte` maps to (1 or 2 bytes).
[[nodiscard]] std::string_view byte_level_char(std::uint8_t byte) noexcept;

// Appends the mapped form of `bytes` to `out`.
void append_byte_level(std::string_view bytes, std::string& out);

// Appends the bytes a mapped piece stands for. Characters outside the mapping (which a
// well-formed byte-level vocabulary never has) are copied through unchanged.
void append_byte_level_decoded(std::string_view piece, std::string& out);

}  // namespace sitsrt::detail
