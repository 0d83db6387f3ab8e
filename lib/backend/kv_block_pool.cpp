#include "backend/kv_block_pool.hpp"

#include "core/check.hpp"

#include <algorithm>

namespace sitsrt {

std::size_t KvGeometry::token_bytes() const {
  return static_cast<std::size_t>(n_layers) *
         (ops::kv_row_bytes(k_type, n_kv_heads, head_dim) + ops::kv_row_bytes(v_type, n_kv_heads, head_dim));
}

std::size_t KvGeometry::block_bytes() const { return token_bytes() * static_cast<std::size_t>(block_size); }

std::uint64_t kv_block_hash(std::uint64_t previous, std::span<const std::int32_t> tokens) noexcept {
  // FNV-1a over the previous hash and the token ids, then a final avalanche (splitmix64), so
  // prefixes that differ in one token land far apart in the table.
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  };
  mix(previous);
  for (std::int32_t t : tokens) mix(static_cast<std::uint32_t>(t));
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 31);
}

std::int64_t KvBlockPool::blocks_for_bytes(const KvGeometry& geometry, std::uint64_t bytes) {
  return static_cast<std::int64_t>(bytes / geometry.block_bytes());
}

KvBlockPool::KvBlockPool(Backend& backend, const KvGeometry& geometry, std::int64_t n_blocks)
    : backend_(backend),
      geometry_(geometry),
      n_blocks_(n_blocks),
      k_row_bytes_(ops::kv_row_bytes(geometry.k_type, geometry.n_kv_heads, geometry.head_dim)),
      v_row_bytes_(ops::kv_row_bytes(geometry.v_type, geometry.n_kv_heads, geometry.head_dim)) {
  if (geometry.n_layers < 1 || geometry.n_kv_heads < 1 || geometry.head_dim < 1 || geometry.block_size < 1 ||
      n_blocks < 1 || n_blocks > INT32_MAX) {
    raise(ErrorCode::kInvalidArgument, "KV pool: {} blocks of {} positions for {} layers x {} heads x {}", n_blocks,
          geometry.block_size, geometry.n_layers, geometry.n_kv_heads, geometry.head_dim);
  }
  const auto rows = static_cast<std::size_t>(n_blocks * geometry.block_size);
  k_plane_bytes_ = rows * k_row_bytes_;
  v_plane_bytes_ = rows * v_row_bytes_;
  buffer_ = backend.allocate(static_cast<std::size_t>(geometry.n_layers) * (k_plane_bytes_ + v_plane_bytes_),
                             "KV block pool");
  blocks_.resize(static_cast<std::size_t>(n_blocks));
  free_.reserve(static_cast<std::size_t>(n_blocks));
  // Lowest ids first, so a lone sequence's table is 0, 1, 2, ... (contiguous in memory).
  for (std::int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<std::int32_t>(b));
  counters_.blocks = n_blocks;
}

void KvBlockPool::check(std::int32_t block, const char* what) const {
  if (block < 0 || block >= n_blocks_) raise(ErrorCode::kInternal, "KV pool: {} of block {} of {}", what, block, n_blocks_);
}

std::int64_t KvBlockPool::free_blocks() const {
  std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(free_.size() + cached_.size());
}

KvPoolStats KvBlockPool::stats() const {
  std::lock_guard lock(mutex_);
  KvPoolStats s = counters_;
  s.free_blocks = static_cast<std::int64_t>(free_.size() + cached_.size());
  s.cached_blocks = static_cast<std::int64_t>(cached_.size());
  return s;
}

void KvBlockPool::unpublish(std::int32_t block) {
  BlockState& s = blocks_[static_cast<std::size_t>(block)];
  if (!s.hash) return;
  const auto it = published_.find(*s.hash);
  if (it != published_.end() && it->second == block) published_.erase(it);
  s.hash.reset();
  s.tokens.clear();
}

std::optional<std::int32_t> KvBlockPool::allocate() {
  std::lock_guard lock(mutex_);
  std::int32_t block = -1;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (!cached_.empty()) {
    block = cached_.front();
    cached_.pop_front();
    unpublish(block);
    ++counters_.evictions;
  } else {
    return std::nullopt;
  }
  blocks_[static_cast<std::size_t>(block)].refs = 1;
  return block;
}

void KvBlockPool::retain(std::int32_t block) {
  std::lock_guard lock(mutex_);
  check(block, "retain");
  BlockState& s = blocks_[static_cast<std::size_t>(block)];
  if (s.refs == 0) raise(ErrorCode::kInternal, "KV pool: retain of unreferenced block {}", block);
  ++s.refs;
}

void KvBlockPool::release(std::int32_t block) {
  std::lock_guard lock(mutex_);
  check(block, "release");
  BlockState& s = blocks_[static_cast<std::size_t>(block)];
  if (s.refs == 0) raise(ErrorCode::kInternal, "KV pool: release of unreferenced block {}", block);
  if (--s.refs > 0) return;
  if (s.hash) {
    s.lru = cached_.insert(cached_.end(), block);
  } else {
    free_.push_back(block);
  }
}

std::int32_t KvBlockPool::references(std::int32_t block) const {
  std::lock_guard lock(mutex_);
  check(block, "references");
  return blocks_[static_cast<std::size_t>(block)].refs;
}

std::optional<std::int32_t> KvBlockPool::copy_on_write(std::int32_t block) {
  {
    std::lock_guard lock(mutex_);
    check(block, "copy_on_write");
    const BlockState& s = blocks_[static_cast<std::size_t>(block)];
    if (s.refs == 0) raise(ErrorCode::kInternal, "KV pool: copy_on_write of unreferenced block {}", block);
    // A published block is shared with the prefix cache's future readers: never written in place.
    if (s.refs == 1 && !s.hash) return block;
  }
  const std::optional<std::int32_t> copy = allocate();
  if (!copy) return std::nullopt;
  const auto rows = static_cast<std::size_t>(geometry_.block_size);
  for (std::int64_t l = 0; l < geometry_.n_layers; ++l) {
    const std::size_t base = static_cast<std::size_t>(l) * (k_plane_bytes_ + v_plane_bytes_);
    const std::size_t k_block = rows * k_row_bytes_, v_block = rows * v_row_bytes_;
    backend_.copy(*buffer_, base + static_cast<std::size_t>(block) * k_block, *buffer_,
                  base + static_cast<std::size_t>(*copy) * k_block, k_block);
    const std::size_t v_base = base + k_plane_bytes_;
    backend_.copy(*buffer_, v_base + static_cast<std::size_t>(block) * v_block, *buffer_,
                  v_base + static_cast<std::size_t>(*copy) * v_block, v_block);
  }
  release(block);
  std::lock_guard lock(mutex_);
  ++counters_.copies;
  return copy;
}

void KvBlockPool::publish(std::int32_t block, std::uint64_t hash, std::span<const std::int32_t> tokens) {
  std::lock_guard lock(mutex_);
  check(block, "publish");
  BlockState& s = blocks_[static_cast<std::size_t>(block)];
  if (s.refs == 0 || static_cast<std::int64_t>(tokens.size()) != geometry_.block_size) {
    raise(ErrorCode::kInternal, "KV pool: publish of block {} ({} references, {} tokens)", block, s.refs, tokens.size());
  }
  if (s.hash || published_.contains(hash)) return;
  s.hash = hash;
  s.tokens.assign(tokens.begin(), tokens.end());
  published_.emplace(hash, block);
}

std::optional<std::int32_t> KvBlockPool::lookup(std::uint64_t hash, std::span<const std::int32_t> tokens) {
  std::lock_guard lock(mutex_);
  const auto it = published_.find(hash);
  if (it == published_.end()) {
    ++counters_.prefix_misses;
    return std::nullopt;
  }
  const std::int32_t block = it->second;
  BlockState& s = blocks_[static_cast<std::size_t>(block)];
  if (!std::equal(tokens.begin(), tokens.end(), s.tokens.begin(), s.tokens.end())) {
    ++counters_.prefix_misses;
    return std::nullopt;
  }
  if (s.refs == 0) cached_.erase(s.lru);
  ++s.refs;
  ++counters_.prefix_hits;
  return block;
}

void KvBlockPool::save(std::int32_t block, std::vector<std::byte>& out) const {
  check(block, "save");
  const auto rows = static_cast<std::size_t>(geometry_.block_size);
  const std::size_t k_block = rows * k_row_bytes_, v_block = rows * v_row_bytes_;
  for (std::int64_t l = 0; l < geometry_.n_layers; ++l) {
    const std::size_t base = static_cast<std::size_t>(l) * (k_plane_bytes_ + v_plane_bytes_);
    const std::size_t at = out.size();
    out.resize(at + k_block + v_block);
    backend_.read(*buffer_, base + static_cast<std::size_t>(block) * k_block, {out.data() + at, k_block});
    backend_.read(*buffer_, base + k_plane_bytes_ + static_cast<std::size_t>(block) * v_block,
                  {out.data() + at + k_block, v_block});
  }
}

void KvBlockPool::restore(std::int32_t block, std::span<const std::byte> in) {
  check(block, "restore");
  const auto rows = static_cast<std::size_t>(geometry_.block_size);
  const std::size_t k_block = rows * k_row_bytes_, v_block = rows * v_row_bytes_;
  if (in.size() != geometry_.block_bytes()) {
    raise(ErrorCode::kInternal, "KV pool: restore of {} bytes into a {}-byte block", in.size(), geometry_.block_bytes());
  }
  for (std::int64_t l = 0; l < geometry_.n_layers; ++l) {
    const std::size_t base = static_cast<std::size_t>(l) * (k_plane_bytes_ + v_plane_bytes_);
    const std::byte* src = in.data() + static_cast<std::size_t>(l) * (k_block + v_block);
    backend_.write(*buffer_, base + static_cast<std::size_t>(block) * k_block, {src, k_block});
    backend_.write(*buffer_, base + k_plane_bytes_ + static_cast<std::size_t>(block) * v_block, {src + k_block, v_block});
  }
}

ops::KvLayerRef KvBlockPool::layer(std::int64_t index, std::span<const std::int32_t> table) const noexcept {
  std::byte* base = buffer_->data() + static_cast<std::size_t>(index) * (k_plane_bytes_ + v_plane_bytes_);
  ops::KvLayerRef ref;
  ref.k_type = geometry_.k_type;
  ref.v_type = geometry_.v_type;
  ref.k = base;
  ref.v = base + k_plane_bytes_;
  ref.k_row_bytes = k_row_bytes_;
  ref.v_row_bytes = v_row_bytes_;
  ref.kv_width = geometry_.kv_width();
  ref.capacity = static_cast<std::int64_t>(table.size()) * geometry_.block_size;
  ref.block_size = geometry_.block_size;
  ref.block_table = table;
  ref.k_rotated = geometry_.k_rotated;
  ref.v_rotated = geometry_.v_rotated;
  if (!geometry_.k_offsets.empty()) ref.k_offset = geometry_.k_offsets.data() + index * ref.kv_width;
  if (!geometry_.k_scales.empty()) ref.k_scale = geometry_.k_scales.data() + index * ref.kv_width;
  if (geometry_.window().active()) ref.recent_window = geometry_.recent_window;  // rows: the sequence's ring
  // int4 is stored by head only where its scale groups of 32 fall within heads.
  const auto by_head = [&](ops::KvType t) {
    return geometry_.head_major && (t != ops::KvType::kInt4 || geometry_.head_dim % 32 == 0);
  };
  ref.k_head_major = by_head(ref.k_type);
  ref.v_head_major = by_head(ref.v_type);
  ref.device = buffer_->device();
  return ref;
}

}  // namespace sitsrt
