// Splits text at the texts of special tokens (control and user-defined types), so that
// "<|im_start|>user" becomes the token <|im_start|> followed by the text "user".
#pragma once

#include "tokenizer/vocabulary.hpp"

#include <array>
#include <cstdint>
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
  // Indexes every non-empty control or user-defined piece; when two tokens share a text, the
  // lower id wins.
  explicit SpecialTokenMatcher(const Vocabulary& vocab);

  // Scans left to right; at each position the longest special text that starts there is taken
  // (leftmost-longest, as Hugging Face's added-token matcher does). Views point into `text`.
  [[nodiscard]] std::vector<TextFragment> split(std::string_view text) const;

 private:
  // A byte trie; children sorted by byte for binary search.
  struct Node {
    std::vector<std::pair<unsigned char, std::int32_t>> children;
    std::int32_t token = -1;
  };
  [[nodiscard]] std::int32_t child(std::int32_t node, unsigned char byte) const;

  std::vector<Node> nodes_;
  std::array<bool, 256> starts_special_{};  // first bytes of any special text
};

}  // namespace sitsrt::detail
