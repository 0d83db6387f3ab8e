// Shared property of the tokenizer fuzz targets: the streaming UTF-8 decoder, fed one token's
// bytes at a time, emits only valid UTF-8 and adds up to the whole-sequence decode().
#pragma once

#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8.hpp"
#include "tokenizer/utf8_stream.hpp"

#include <span>
#include <string>
#include <string_view>

namespace sitsrt::fuzz {

inline bool valid_utf8(std::string_view s) {
  while (!s.empty()) {
    const auto sequence = detail::scan_utf8(s);
    if (sequence.status != detail::Utf8Status::kComplete) return false;
    s.remove_prefix(sequence.length);
  }
  return true;
}

inline void check_stream_decode(const Tokenizer& tokenizer, std::span<const std::int32_t> ids) {
  Utf8StreamDecoder stream;
  std::string streamed;
  for (const auto id : ids) {
    const std::string piece = stream.push(tokenizer.token_bytes(id));
    if (!valid_utf8(piece)) __builtin_trap();
    streamed += piece;
  }
  streamed += stream.flush();
  if (!valid_utf8(streamed) || streamed != tokenizer.decode(ids)) __builtin_trap();
}

}  // namespace sitsrt::fuzz
