// A pool of fixed-size KV blocks on one backend, the memory the serving core hands to sequences:
// one buffer holding, for every layer, a K plane and a V plane of n_blocks * block_size rows
// (ops::KvType rows, so INT8/INT4 blocks are smaller and more of them fit the same budget).
//
// Blocks are reference-counted: a sequence holds one reference per block of its table, a fork
// or a prefix-cache hit adds references, and a shared block is copied before it is written
// (copy_on_write). Full blocks may be published under a hash of their tokens and of the
// blocks before them (prefix caching): a published block whose last reference goes stays
// cached, evictable in least-recently-released order, so a later prompt with the same prefix
// takes it back instead of recomputing it. Thread-safe (one mutex; calls are per block).
#pragma once

#include "backend/backend.hpp"
#include "backend/kv_recent_ring.hpp"
#include "ops/kv_ref.hpp"

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace sitsrt {

struct KvGeometry {
  std::int64_t n_layers = 0;
  std::int64_t n_kv_heads = 0;
  std::int64_t head_dim = 0;
  ops::KvType k_type = ops::KvType::kF16;
  ops::KvType v_type = ops::KvType::kF16;
  std::int64_t block_size = 16;  // positions per block
  bool k_rotated = false;        // stored Hadamard-rotated per head (ops::KvLayerRef)
  bool v_rotated = false;
  std::span<const float> k_offsets;  // n_layers x kv_width K centering offsets, empty: none (KvCacheLayout)
  std::span<const float> k_scales;   // n_layers x kv_width K channel scales, empty: none
  std::int64_t recent_window = 0;    // exact recent window of int8/int4 sides (ops::KvLayerRef), 0: none
  bool head_major = false;           // blocks stored head by head (ops::KvLayerRef::k_head_major)

  [[nodiscard]] std::int64_t kv_width() const noexcept { return n_kv_heads * head_dim; }
  // Bytes of one block over all layers, K and V (scales included).
  [[nodiscard]] std::size_t block_bytes() const;
  // Bytes per cached token over all layers, K and V.
  [[nodiscard]] std::size_t token_bytes() const;
  // Each sequence's exact recent window (its own buffer, outside the pool).
  [[nodiscard]] KvWindowShape window() const noexcept {
    return kv_window_shape(n_layers, kv_width(), k_type, v_type, recent_window);
  }
};

struct KvPoolStats {
  std::int64_t blocks = 0;          // in the pool
  std::int64_t free_blocks = 0;     // unreferenced, including cached ones (allocate() can take them)
  std::int64_t cached_blocks = 0;   // unreferenced but holding a published prefix
  std::uint64_t prefix_hits = 0;    // blocks taken back from the prefix cache
  std::uint64_t prefix_misses = 0;  // lookups that found nothing
  std::uint64_t evictions = 0;      // cached blocks reused for other data
  std::uint64_t copies = 0;         // copy-on-write copies
};

// The hash a full block is published under: of its tokens and of the previous block's hash
// (0 for the first block), so equal hashes mean equal prefixes, not only equal blocks.
[[nodiscard]] std::uint64_t kv_block_hash(std::uint64_t previous, std::span<const std::int32_t> tokens) noexcept;

class KvBlockPool {
 public:
  // Allocates n_blocks blocks from the backend (kOutOfMemory naming the KV pool when the budget
  // cannot hold them); n_blocks >= 1.
  KvBlockPool(Backend& backend, const KvGeometry& geometry, std::int64_t n_blocks);
  // The most blocks `bytes` hold (0 when not even one).
  [[nodiscard]] static std::int64_t blocks_for_bytes(const KvGeometry& geometry, std::uint64_t bytes);

  [[nodiscard]] const KvGeometry& geometry() const noexcept { return geometry_; }
  [[nodiscard]] Backend& backend() const noexcept { return backend_; }
  [[nodiscard]] std::int64_t block_size() const noexcept { return geometry_.block_size; }
  [[nodiscard]] std::int64_t n_blocks() const noexcept { return n_blocks_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return buffer_->size(); }
  [[nodiscard]] std::int64_t free_blocks() const;
  [[nodiscard]] KvPoolStats stats() const;

  // A block with one reference, or nothing when every block is referenced. Takes a never-used
  // or released block first, else evicts the least recently released cached one.
  [[nodiscard]] std::optional<std::int32_t> allocate();
  void retain(std::int32_t block);
  // Drops one reference; at zero the block is free (or cached, when published).
  void release(std::int32_t block);
  [[nodiscard]] std::int32_t references(std::int32_t block) const;

  // `block` itself when this holder is its only one; else a fresh copy (all layers, K and V)
  // with one reference, the holder's reference to `block` dropped. Nothing when no block is
  // free for the copy (then `block` is unchanged).
  [[nodiscard]] std::optional<std::int32_t> copy_on_write(std::int32_t block);

  // Registers a full, referenced block under `hash` (kv_block_hash of its tokens); its rows must
  // not change afterwards. A hash already published keeps its first block.
  void publish(std::int32_t block, std::uint64_t hash, std::span<const std::int32_t> tokens);
  // The block published under `hash` holding exactly `tokens`, with a new reference; nothing when
  // none (the tokens are compared, so a hash collision is a miss).
  [[nodiscard]] std::optional<std::int32_t> lookup(std::uint64_t hash, std::span<const std::int32_t> tokens);

  // A block's rows (every layer, K and V) to host memory and back: swapping a preempted
  // sequence out of the pool. save() appends block_bytes() bytes to `out`; restore() reads as many.
  void save(std::int32_t block, std::vector<std::byte>& out) const;
  void restore(std::int32_t block, std::span<const std::byte> in);

  // One layer of a sequence whose blocks are `table` (capacity: table.size() * block_size).
  [[nodiscard]] ops::KvLayerRef layer(std::int64_t index, std::span<const std::int32_t> table) const noexcept;

 private:
  struct BlockState {
    std::int32_t refs = 0;
    std::optional<std::uint64_t> hash;       // published under
    std::vector<std::int32_t> tokens;        // what it was published with
    std::list<std::int32_t>::iterator lru;   // in cached_ while unreferenced and published
  };
  void check(std::int32_t block, const char* what) const;
  void unpublish(std::int32_t block);  // mutex held

  Backend& backend_;
  KvGeometry geometry_;
  std::int64_t n_blocks_;
  std::size_t k_row_bytes_;
  std::size_t v_row_bytes_;
  std::size_t k_plane_bytes_;  // one layer's K rows
  std::size_t v_plane_bytes_;
  std::unique_ptr<BackendBuffer> buffer_;
  mutable std::mutex mutex_;
  std::vector<BlockState> blocks_;
  std::vector<std::int32_t> free_;    // unreferenced, unpublished
  std::list<std::int32_t> cached_;    // unreferenced, published; front = least recently released
  std::unordered_map<std::uint64_t, std::int32_t> published_;
  KvPoolStats counters_;
};

}  // namespace sitsrt
