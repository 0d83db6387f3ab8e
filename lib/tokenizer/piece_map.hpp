// Piece text -> token id, looked up by std::string_view slices without building strings.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace sitsrt::detail {

struct PieceHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view text) const noexcept { return std::hash<std::string_view>{}(text); }
};

using PieceToId = std::unordered_map<std::string, std::int32_t, PieceHash, std::equal_to<>>;

}  // namespace sitsrt::detail
