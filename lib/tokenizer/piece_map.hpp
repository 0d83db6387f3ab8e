// Piece text -> token id for the tokenizers' merge loops. An open-addressing table (linear
// probing, stored hashes, keys copied into one arena): std::unordered_map with a custom hash
// does not cache hash codes and re-hashes the chain's keys on every lookup, which made it
// 58% of SentencePiece encode time with a 262k-entry vocabulary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::detail {

class PieceIndex {
 public:
  // Adds `piece` -> `id`; for a piece already present, `overwrite` decides which id stays.
  void insert(std::string_view piece, std::int32_t id, bool overwrite) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    const std::uint64_t hash = hash_of(piece);
    for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.id < 0) {
        slot = {hash, static_cast<std::uint32_t>(arena_.size()), static_cast<std::uint32_t>(piece.size()), id};
        arena_.append(piece);
        ++count_;
        return;
      }
      if (slot.hash == hash && key(slot) == piece) {
        if (overwrite) slot.id = id;
        return;
      }
    }
  }

  // The id of `piece`, -1 when absent.
  [[nodiscard]] std::int32_t find(std::string_view piece) const noexcept {
    if (count_ == 0) return -1;
    const std::uint64_t hash = hash_of(piece);
    for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& slot = slots_[i];
      if (slot.id < 0) return -1;
      if (slot.hash == hash && key(slot) == piece) return slot.id;
    }
  }

  void reserve(std::size_t pieces) {
    while (slots_.size() < pieces * 2) grow();
  }

 private:
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t offset = 0;  // into arena_
    std::uint32_t length = 0;
    std::int32_t id = -1;  // -1: empty
  };

  static std::uint64_t hash_of(std::string_view piece) noexcept { return std::hash<std::string_view>{}(piece); }
  [[nodiscard]] std::string_view key(const Slot& slot) const noexcept {
    return std::string_view(arena_).substr(slot.offset, slot.length);
  }
  void grow() {
    std::vector<Slot> old(std::max<std::size_t>(16, slots_.size() * 2));
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    for (const Slot& slot : old) {
      if (slot.id < 0) continue;
      std::size_t i = slot.hash & mask_;
      while (slots_[i].id >= 0) i = (i + 1) & mask_;
      slots_[i] = slot;
    }
  }

  std::vector<Slot> slots_;  // power-of-two size, at most half full
  std::size_t mask_ = 0;
  std::size_t count_ = 0;
  std::string arena_;
};

}  // namespace sitsrt::detail
