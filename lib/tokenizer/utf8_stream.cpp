#include "tokenizer/utf8_stream.hpp"
#include "tokenizer/utf8.hpp"

namespace sitsrt {

std::string Utf8StreamDecoder::push(std::string_view bytes) {
  pending_.append(bytes);
  std::string complete;
  const std::size_t consumed = detail::append_sanitized_utf8(pending_, complete, /*hold_incomplete_tail=*/true);
  // At most 3 bytes (one incomplete character) remain, so this erase is cheap.
  pending_.erase(0, consumed);
  return complete;
}

std::string Utf8StreamDecoder::flush() {
  std::string rest;
  detail::append_sanitized_utf8(pending_, rest, /*hold_incomplete_tail=*/false);
  pending_.clear();
  return rest;
}

}  // namespace sitsrt
