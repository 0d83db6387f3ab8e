// Splits text at the texts of special tokens, so that "<|im_start|>user" becomes the token
// <|im_start|> followed by the text "user". As llama.cpp (tokenizer_st_partition): user-defined
// tokens always, control and unknown-type tokens only when asked to.
#pragma once

#include "tokenizer/vocabulary.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sitsrt::detail {

// Raw text to tokenize (token == -1) or one matched special token.
struct TextFragment {
  std::string_view text;
  std::int32_t token = -1;
};

class SpecialTokenMatcher {
 public:
  // Indexes every non-empty control, unknown-type or user-defined piece; when two tokens share
  // a text, the lower id wins.
  explicit SpecialTokenMatcher(const Vocabulary& vocab);

  // llama.cpp's order: the longest token text first (the lower id among equally long ones),
  // each one taken at its leftmost occurrences in the text the longer ones left, then the next.
  // User-defined tokens always; control and unknown-type ones with `parse_special`. Views point
  // into `text`; no fragment is empty.
  [[nodiscard]] std::vector<TextFragment> split(std::string_view text, bool parse_special) const;

  // Whether split() can find anything without `parse_special` (the vocabulary has user-defined
  // tokens).
  [[nodiscard]] bool has_user_defined() const noexcept { return has_user_defined_; }

 private:
  // A byte trie; children sorted by byte for binary search.
  struct Node {
    std::vector<std::pair<unsigned char, std::int32_t>> children;
    std::int32_t entry = -1;  // index into entries_
  };
  struct Entry {
    std::int32_t id;
    std::string text;
    bool always;  // user-defined: matched without parse_special
  };
  [[nodiscard]] std::int32_t child(std::int32_t node, unsigned char byte) const;

  std::vector<Node> nodes_;
  std::vector<Entry> entries_;
  std::array<bool, 256> starts_special_{};  // first bytes of any special text
  bool has_user_defined_ = false;
};

}  // namespace sitsrt::detail
