#include "tokenizer/special_tokens.hpp"

#include <algorithm>

namespace sitsrt::detail {

SpecialTokenMatcher::SpecialTokenMatcher(const Vocabulary& vocab) : nodes_(1) {
  for (std::int32_t id = 0; id < vocab.size(); ++id) {
    const TokenType type = vocab.types.empty() ? TokenType::kNormal : vocab.types[id];
    const std::string& piece = vocab.pieces[id];
    const bool user_defined = type == TokenType::kUserDefined;
    if ((type != TokenType::kControl && type != TokenType::kUnknown && !user_defined) || piece.empty()) continue;
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
    if (nodes_[node].entry >= 0) continue;
    nodes_[node].entry = static_cast<std::int32_t>(entries_.size());
    entries_.push_back({id, piece, user_defined});
    has_user_defined_ = has_user_defined_ || user_defined;
    starts_special_[static_cast<unsigned char>(piece[0])] = true;
  }
  for (Node& n : nodes_) std::sort(n.children.begin(), n.children.end());
}

std::int32_t SpecialTokenMatcher::child(std::int32_t node, unsigned char byte) const {
  const auto& children = nodes_[node].children;
  const auto it = std::lower_bound(children.begin(), children.end(), std::pair<unsigned char, std::int32_t>{byte, -1});
  return it != children.end() && it->first == byte ? it->second : -1;
}

std::vector<TextFragment> SpecialTokenMatcher::split(std::string_view text, bool parse_special) const {
  std::vector<TextFragment> out;
  if (text.empty()) return out;
  // The tokens that occur anywhere (one trie walk per position that can start one).
  std::vector<std::int32_t> found;
  std::vector<bool> seen(entries_.size(), false);
  for (std::size_t pos = 0; pos < text.size(); ++pos) {
    if (!starts_special_[static_cast<unsigned char>(text[pos])]) continue;
    std::int32_t node = 0;
    for (std::size_t i = pos; i < text.size(); ++i) {
      node = child(node, static_cast<unsigned char>(text[i]));
      if (node < 0) break;
      const std::int32_t entry = nodes_[node].entry;
      if (entry >= 0 && !seen[entry] && (parse_special || entries_[entry].always)) {
        seen[entry] = true;
        found.push_back(entry);
      }
    }
  }
  out.push_back({text, -1});
  if (found.empty()) return out;
  std::sort(found.begin(), found.end(), [&](std::int32_t a, std::int32_t b) {
    const Entry& x = entries_[a];
    const Entry& y = entries_[b];
    return x.text.size() != y.text.size() ? x.text.size() > y.text.size() : x.id < y.id;
  });

  // Each token in turn splits the text fragments left so far at its occurrences.
  std::vector<TextFragment> next;
  for (const std::int32_t entry : found) {
    const std::string_view special = entries_[entry].text;
    const std::int32_t token = entries_[entry].id;
    next.clear();
    for (const TextFragment& fragment : out) {
      if (fragment.token >= 0) {
        next.push_back(fragment);
        continue;
      }
      std::string_view rest = fragment.text;
      for (std::size_t at = rest.find(special); at != std::string_view::npos; at = rest.find(special)) {
        if (at > 0) next.push_back({rest.substr(0, at), -1});
        next.push_back({rest.substr(at, special.size()), token});
        rest.remove_prefix(at + special.size());
      }
      if (!rest.empty()) next.push_back({rest, -1});
    }
    out.swap(next);
  }
  return out;
}

}  // namespace sitsrt::detail
