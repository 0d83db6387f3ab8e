// Piece text -> token id for the tokenizers' merge loops. An open-addressing table (linear
// probing over 8-byte slots holding a hash tag, keys copied into one arena): std::unordered_map
// with a custom hash does not cache hash codes and re-hashes the chain's keys on every lookup,
// which made it 58% of SentencePiece encode time with a 262k-entry vocabulary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace sitsrt::detail {

class PieceIndex {
 public:
  // Adds `piece` -> `id`; for a piece already present, `overwrite` decides which id stays.
  void insert(std::string_view piece, std::int32_t id, bool overwrite) {
    if ((keys_.size() + 1) * 4 > slots_.size() * 3) grow();
    const std::uint64_t hash = hash_of(piece);
    for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.key < 0) {
        slot = {tag_of(hash), static_cast<std::int32_t>(keys_.size())};
        keys_.push_back({static_cast<std::uint32_t>(arena_.size()), static_cast<std::uint32_t>(piece.size()), id});
        arena_.append(piece);
        return;
      }
      if (slot.tag == tag_of(hash) && key(slot.key) == piece) {
        if (overwrite) keys_[slot.key].id = id;
        return;
      }
    }
  }

  // The id of `piece`, -1 when absent.
  [[nodiscard]] std::int32_t find(std::string_view piece) const noexcept {
    if (keys_.empty()) return -1;
    const std::uint64_t hash = hash_of(piece);
    for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot slot = slots_[i];
      if (slot.key < 0) return -1;
      if (slot.tag == tag_of(hash) && key(slot.key) == piece) return keys_[slot.key].id;
    }
  }

  void reserve(std::size_t pieces) {
    keys_.reserve(pieces);
    while (slots_.size() * 3 < pieces * 4) grow();
  }

 private:
  // 8 bytes, so that a probe touches one cache line of a table that stays small.
  struct Slot {
    std::uint32_t tag = 0;  // upper hash bits: most mismatches are rejected without a key compare
    std::int32_t key = -1;  // index into keys_; -1: empty
  };
  struct Key {
    std::uint32_t offset;  // into arena_
    std::uint32_t length;
    std::int32_t id;
  };

  static std::uint64_t hash_of(std::string_view piece) noexcept { return std::hash<std::string_view>{}(piece); }
  static std::uint32_t tag_of(std::uint64_t hash) noexcept { return static_cast<std::uint32_t>(hash >> 32); }
  [[nodiscard]] std::string_view key(std::int32_t index) const noexcept {
    const Key& k = keys_[static_cast<std::size_t>(index)];
    return std::string_view(arena_).substr(k.offset, k.length);
  }
  void grow() {
    std::vector<Slot> old(std::max<std::size_t>(16, slots_.size() * 2));
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    for (const Slot& slot : old) {
      if (slot.key < 0) continue;
      std::size_t i = hash_of(key(slot.key)) & mask_;
      while (slots_[i].key >= 0) i = (i + 1) & mask_;
      slots_[i] = slot;
    }
  }

  std::vector<Slot> slots_;  // power-of-two size, at most three quarters full
  std::size_t mask_ = 0;
  std::vector<Key> keys_;
  std::string arena_;  // all keys, back to back
};

}  // namespace sitsrt::detail
