// Byte-level BPE (tokenizer.ggml.model = "gpt2"; GPT-2, Llama 3, Qwen2): the text is cut into
// pre-tokens by regexes, each pre-token's bytes are mapped to GPT-2's printable code points,
// and adjacent symbols are merged in the rank order of the merge list. Every byte has a
// token, so any input encodes and decode(encode(text)) == text for valid UTF-8. The
// pre-tokenizers llama.cpp runs with byte_encode = false (Gemma 4, Sarvam) make it
// SentencePiece-style: symbols are UTF-8 characters, spaces U+2581, <0xNN> byte fallback.
#pragma once

#include "tokenizer/piece_map.hpp"
#include "tokenizer/pre_tokenizer.hpp"
#include "tokenizer/special_tokens.hpp"
#include "tokenizer/tokenizer.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sitsrt {

class BpeTokenizer final : public Tokenizer {
 public:
  // Needs vocab.merges ("left right", highest priority first) and the pre-tokenizer (explicit
  // vocab.pre_patterns, else the patterns vocab.pre names). Throws kInvalidModel naming
  // `source` for a merge whose parts or result are not pieces, kUnsupported for an unknown
  // pre-tokenizer name.
  BpeTokenizer(Vocabulary vocab, std::string_view source);

  [[nodiscard]] std::vector<std::int32_t> encode(std::string_view text, bool add_bos,
                                                 bool parse_special = false) const override;
  [[nodiscard]] const Vocabulary& vocab() const noexcept override { return vocab_; }
  // EOS, and control tokens that end a turn in the common chat formats (<|eot_id|>,
  // <|im_end|>, <|endoftext|>, ...), as llama.cpp treats them.
  [[nodiscard]] bool is_end_of_generation(std::int32_t id) const noexcept override;

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t result;
  };
  struct Scratch;

  void encode_text(std::string_view text, std::vector<std::int32_t>& out, Scratch& scratch) const;
  void encode_pre_token(std::string_view bytes, std::vector<std::int32_t>& out, Scratch& scratch) const;
  [[nodiscard]] const Merge* find_merge(std::int32_t left, std::int32_t right) const;
  void append_token_bytes(std::int32_t id, std::string& out) const override;

  Vocabulary vocab_;
  detail::RegexSplitter splitter_;
  detail::SpecialTokenMatcher specials_;
  detail::PieceIndex piece_to_id_;                      // normal and undefined-type pieces
  std::unordered_map<std::uint64_t, Merge> merges_;     // (left id << 32 | right id) -> merge
  // Byte-level: the id of each byte's one-character piece; raw UTF-8: of its <0xNN> piece; -1 if none.
  std::array<std::int32_t, 256> byte_tokens_{};
  bool raw_utf8_ = false;            // SentencePiece-style BPE (pieces are UTF-8, U+2581 for space)
  bool escape_spaces_ = false;       // ' ' -> U+2581 before splitting
  bool newline_runs_whole_ = false;  // Gemma 4: a '\n'-only pre-token that is a piece is one token
  std::vector<std::int32_t> end_of_generation_;         // sorted
};

}  // namespace sitsrt
