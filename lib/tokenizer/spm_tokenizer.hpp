// SentencePiece-style tokenizer (tokenizer.ggml.model = "llama"): text is split into UTF-8
// characters, adjacent pieces are merged greedily by vocabulary score, and pieces missing from
// the vocabulary fall back to <0xNN> byte tokens. Produces the same ids as llama.cpp's SPM
// tokenizer for text without special-token markup (see spm_tokenizer.cpp for the differences).
#pragma once

#include "tokenizer/piece_map.hpp"
#include "tokenizer/special_tokens.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/utf8_stream.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt {

class SpmTokenizer final : public Tokenizer {
 public:
  // Missing scores/types in a hand-built vocabulary default to 0 / kNormal; inconsistent sizes
  // or out-of-range special ids throw sitsrt::Error (kInvalidArgument).
  explicit SpmTokenizer(Vocabulary vocab);

  // Encodes text; prepends BOS when add_bos (and the vocabulary has one). Never appends EOS
  // (vocab().add_eos is left to the caller). Special tokens as Tokenizer::encode says; each
  // text between them gets its own dummy prefix when it follows a token (llama.cpp's rule).
  // Thread-safe. Throws kInvalidArgument only when a character has neither byte tokens nor an
  // unknown token.
  [[nodiscard]] std::vector<std::int32_t> encode(std::string_view text, bool add_bos,
                                                 bool parse_special = false) const override;

  // token_bytes(): U+2581 becomes ' ', <0xNN> becomes the byte 0xNN, control, unknown-type and
  // unused tokens print nothing, user-defined tokens print their piece verbatim.
  // decode(ids, strip_dummy_prefix): drops one leading space (the dummy prefix).

  [[nodiscard]] const Vocabulary& vocab() const noexcept override { return vocab_; }
  [[nodiscard]] bool is_end_of_generation(std::int32_t id) const noexcept override;  // EOS

 private:
  struct MergeScratch;
  void encode_fragment(std::string_view text, bool add_prefix, std::vector<std::int32_t>& ids) const;
  // Merges one run of escaped text (spaces as U+2581) and appends its ids.
  void merge_segment(std::string_view working, std::vector<std::int32_t>& ids, MergeScratch& scratch) const;
  void emit_symbol(std::string_view text, std::vector<std::int32_t>& out) const;
  void append_token_bytes(std::int32_t id, std::string& out) const override;
  [[nodiscard]] bool inserts_dummy_prefix() const noexcept override { return true; }

  Vocabulary vocab_;
  detail::SpecialTokenMatcher specials_;
  // Pieces that text may be merged into (normal, user-defined, undefined types).
  detail::PieceIndex piece_to_id_;
  std::size_t max_piece_bytes_ = 0;  // longest mergeable piece: longer pairs need no lookup
  std::int32_t byte_tokens_[256];    // id of "<0xNN>" per byte, -1 when absent
  // Mergeable pieces with a U+2581 after another character ("a_b", Gemma's ">_</"), and the
  // offsets of those U+2581: the only pieces a merge across a word boundary can make.
  struct CrossingPiece {
    std::string text;
    std::vector<std::size_t> marker_offsets;
  };
  [[nodiscard]] bool crossed(std::string_view working, std::size_t boundary) const;
  std::vector<CrossingPiece> crossing_;
  bool word_by_word_ = true;  // few enough crossing pieces to merge word by word
};

}  // namespace sitsrt
