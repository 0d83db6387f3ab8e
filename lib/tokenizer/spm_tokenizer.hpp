// SentencePiece-style tokenizer (tokenizer.ggml.model = "llama"): text is split into UTF-8
// characters, adjacent pieces are merged greedily by vocabulary score, and pieces missing from
// the vocabulary fall back to <0xNN> byte tokens.
#pragma once

#include "tokenizer/vocabulary.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sitsrt {

class SpmTokenizer {
 public:
  explicit SpmTokenizer(Vocabulary vocab);

  // Encodes text; prepends BOS when add_bos (and the vocabulary has one). Thread-safe.
  [[nodiscard]] std::vector<std::int32_t> encode(std::string_view text, bool add_bos) const;

  // Bytes a token stands for when printed: U+2581 becomes ' ', <0xNN> becomes the byte 0xNN,
  // control and unknown-type tokens print nothing. May be an incomplete UTF-8 sequence.
  [[nodiscard]] std::string token_bytes(std::int32_t id) const;

  // Whole-sequence decode (invalid UTF-8 is replaced by U+FFFD). Drops the dummy-prefix
  // space of the first token when `strip_leading_space`.
  [[nodiscard]] std::string decode(std::span<const std::int32_t> ids, bool strip_leading_space = false) const;

  [[nodiscard]] const Vocabulary& vocab() const noexcept { return vocab_; }
  [[nodiscard]] bool is_end_of_generation(std::int32_t id) const noexcept;  // EOS (and other EOG ids)

 private:
  Vocabulary vocab_;
  std::unordered_map<std::string, std::int32_t> piece_to_id_;
  std::int32_t byte_tokens_[256];
};

// Turns a stream of token bytes into valid UTF-8 text pieces: a character split across
// several byte tokens is held back until complete; invalid sequences become U+FFFD.
class Utf8StreamDecoder {
 public:
  // Appends bytes and returns the text that is now complete (possibly empty).
  std::string push(std::string_view bytes);
  // Returns what is held back (an incomplete sequence becomes U+FFFD) and resets.
  std::string flush();

 private:
  std::string pending_;
};

}  // namespace sitsrt
