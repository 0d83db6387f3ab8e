// One sequence's KV cache in a KvBlockPool: a block table that grows as the sequence does.
// Before a step writes positions [pos0, pos0 + n), prepare_write() gives the sequence blocks for
// them, copying any shared block it is about to write (copy-on-write), so a fork or a prefix
// taken from the cache never sees another sequence's writes. Dropping the sequence (or
// truncate()) releases its blocks at once. Used by one thread at a time.
//
// With an exact recent window (KvGeometry::recent_window, int8/int4 sides) the sequence also
// owns its ring of f16 rows (KvRecentRing, taken from the backend at its first write and given
// back with its positions). Positions taken from the prefix cache have no f16 copies: they are
// read quantized even inside a later query's window (exact_from), so a prefix-cache hit is not
// bit-identical to computing the prefix (the engine turns prefix caching off in deterministic
// mode for such layouts).
#pragma once

#include "backend/kv_block_pool.hpp"
#include "backend/kv_cache.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace sitsrt {

class PagedKvCache final : public KvCache {
 public:
  // max_positions: the most the sequence may ever hold (the context length).
  PagedKvCache(KvBlockPool& pool, std::int64_t max_positions);
  ~PagedKvCache() override;
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  // Positions the blocks held now can store (table size x block size).
  [[nodiscard]] std::int64_t capacity() const noexcept override;
  [[nodiscard]] ops::KvLayerRef layer(std::int64_t index) const noexcept override;
  [[nodiscard]] std::size_t bytes() const noexcept override;

  [[nodiscard]] std::int64_t max_positions() const noexcept { return max_positions_; }
  [[nodiscard]] std::span<const std::int32_t> block_table() const noexcept { return table_; }
  // Blocks prepare_write(size(), n) would need to take from the pool (new ones and copies).
  [[nodiscard]] std::int64_t blocks_needed(std::int64_t n) const;

  // Makes positions [pos0, pos0 + n) writable: allocates the missing blocks, copies shared ones
  // (and takes the exact window's ring). False (nothing lost: the blocks already held stay) when
  // the pool has too few free blocks or the backend's budget no room for the ring; throws
  // kInvalidArgument past max_positions.
  [[nodiscard]] bool prepare_write(std::int64_t pos0, std::int64_t n);

  // Keeps positions [0, n) and releases the blocks past them (n = 0: the ring too; else the
  // positions below n that the ring no longer holds lose their exact copies).
  void truncate(std::int64_t n);
  // A new sequence sharing this one's blocks (copy-on-write) and size.
  [[nodiscard]] std::unique_ptr<PagedKvCache> fork() const;

  // Swapping: swap_out() saves the blocks' rows to host memory and releases the blocks (size()
  // is kept); swap_in() takes blocks again and restores the rows (false, nothing taken, when the
  // pool has too few free blocks). swapped() tells which state the sequence is in.
  void swap_out();
  [[nodiscard]] bool swap_in();
  [[nodiscard]] bool swapped() const noexcept { return swapped_blocks_ > 0; }
  [[nodiscard]] std::size_t swapped_bytes() const noexcept { return swap_.size(); }

  // Prefix caching. adopt_prefix takes, from the start of an empty sequence, the longest run of
  // full published blocks holding tokens[0, k * block_size) and returns the positions adopted
  // (size() becomes that). publish_full_blocks registers the full blocks of [0, size()) not yet
  // published, given the tokens written at those positions.
  std::int64_t adopt_prefix(std::span<const std::int32_t> tokens);
  void publish_full_blocks(std::span<const std::int32_t> tokens);

 private:
  bool take_ring();  // the exact window's ring, when the layout has one; false when out of budget

  KvBlockPool& pool_;
  std::int64_t max_positions_;
  std::vector<std::int32_t> table_;
  std::vector<std::uint64_t> hashes_;  // of the leading blocks published or adopted, in order
  std::vector<std::byte> swap_;        // the rows of swapped-out blocks, in table order
  std::size_t swapped_blocks_ = 0;
  std::unique_ptr<KvRecentRing> ring_;  // the exact window's rows (null: none yet, or no window)
  std::vector<std::byte> ring_swap_;    // the ring's rows while swapped out
  std::int64_t exact_from_ = 0;         // ops::KvLayerRef::exact_from
};

}  // namespace sitsrt
