// SentencePiece-style tokenizer (tokenizer.ggml.model = "llama"): text is split into UTF-8
// characters, adjacent pieces are merged greedily by vocabulary score, and pieces missing from
// the vocabulary fall back to <0xNN> byte tokens. Produces the same ids as llama.cpp's SPM
// tokenizer for text without special-token markup (see spm_tokenizer.cpp for the differences).
#pragma once

#include "tokenizer/vocabulary.hpp"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sitsrt {

class SpmTokenizer {
 public:
  // Missing scores/types in a hand-built vocabulary default to 0 / kNormal; inconsistent sizes
  // or out-of-range special ids throw sitsrt::Error (kInvalidArgument).
  explicit SpmTokenizer(Vocabulary vocab);

  // Encodes text; prepends BOS when add_bos (and the vocabulary has one). Never appends EOS
  // (vocab().add_eos is left to the caller). Special-token text such as "<s>" is encoded as
  // plain text. Thread-safe. Throws kInvalidArgument only when a character has neither byte
  // tokens nor an unknown token to fall back to.
  [[nodiscard]] std::vector<std::int32_t> encode(std::string_view text, bool add_bos) const;

  // Bytes a token stands for when printed: U+2581 becomes ' ', <0xNN> becomes the byte 0xNN,
  // control, unknown-type and unused tokens print nothing, user-defined tokens print their
  // piece verbatim. May be an incomplete UTF-8 sequence. Throws kInvalidArgument for an id
  // outside the vocabulary.
  [[nodiscard]] std::string token_bytes(std::int32_t id) const;

  // Whole-sequence decode (invalid UTF-8 is replaced by U+FFFD per maximal subpart). Drops one
  // leading space of the result (the dummy prefix) when `strip_leading_space`.
  [[nodiscard]] std::string decode(std::span<const std::int32_t> ids, bool strip_leading_space = false) const;

  [[nodiscard]] const Vocabulary& vocab() const noexcept { return vocab_; }
  [[nodiscard]] bool is_end_of_generation(std::int32_t id) const noexcept;  // EOS (and other EOG ids)

 private:
  // Lets the merge loop look up std::string_view slices without building strings.
  struct PieceHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view text) const noexcept { return std::hash<std::string_view>{}(text); }
  };

  void emit_symbol(std::string_view text, std::vector<std::int32_t>& out) const;
  void append_token_bytes(std::int32_t id, std::string& out) const;

  Vocabulary vocab_;
  // Pieces that text may be merged into (normal, user-defined, undefined types).
  std::unordered_map<std::string, std::int32_t, PieceHash, std::equal_to<>> piece_to_id_;
  std::size_t max_piece_bytes_ = 0;  // longest mergeable piece: longer pairs need no lookup
  std::int32_t byte_tokens_[256];    // id of "<0xNN>" per byte, -1 when absent
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
