#include "tokenizer/special_tokens.hpp"

#include <algorithm>

namespace sitsrt::detail {

SpecialTokenMatcher::SpecialTokenMatcher(const Vocabulary& vocab) : nodes_(1) {
  for (std::int32_t id = 0; id < vocab.size(); ++id) {
    const TokenType type = vocab.types.empty() ? TokenType::kNormal : vocab.types[id];
    const std::string& piece = vocab.pieces[id];
    if ((type != TokenType::kControl && type != TokenType::kUserDefined) || piece.empty()) continue;
    std::int32_t node = 0;
    for (const char c : piece) {
      const auto byte = static_cast<unsigned char>(c);
      auto& children = nodes_[node].children;
      const auto it = std::find_if(children.begin(), children.end(), [&](const auto& e) { return e.first == byte; });
      if (it != children.end()) {
        node = it->second;
        continue;
      }
      const auto next = static_cast<std::int32_t>(nodes_.size());
      children.emplace_back(byte, next);
      nodes_.emplace_back();  // invalidates `children`, which is not used again
      node = next;
    }
    if (nodes_[node].token < 0) nodes_[node].token = id;
    starts_special_[static_cast<unsigned char>(piece[0])] = true;
  }
  for (Node& n : nodes_) std::sort(n.children.begin(), n.children.end());
}

std::int32_t SpecialTokenMatcher::child(std::int32_t node, unsigned char byte) const {
  const auto& children = nodes_[node].children;
  const auto it = std::lower_bound(children.begin(), children.end(), std::pair<unsigned char, std::int32_t>{byte, -1});
  return it != children.end() && it->first == byte ? it->second : -1;
}

std::vector<TextFragment> SpecialTokenMatcher::split(std::string_view text) const {
  std::vector<TextFragment> out;
  std::size_t text_start = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::int32_t token = -1;
    std::size_t match_end = pos;
    if (starts_special_[static_cast<unsigned char>(text[pos])]) {
      std::int32_t node = 0;
      for (std::size_t i = pos; i < text.size(); ++i) {
        node = child(node, static_cast<unsigned char>(text[i]));
        if (node < 0) break;
        if (nodes_[node].token >= 0) {
          token = nodes_[node].token;
          match_end = i + 1;
        }
      }
    }
    if (token < 0) {
      ++pos;
      continue;
    }
    if (pos > text_start) out.push_back({text.substr(text_start, pos - text_start), -1});
    out.push_back({text.substr(pos, match_end - pos), token});
    pos = text_start = match_end;
  }
  if (text_start < text.size()) out.push_back({text.substr(text_start), -1});
  return out;
}

}  // namespace sitsrt::detail
