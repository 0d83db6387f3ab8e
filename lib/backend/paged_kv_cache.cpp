#include "backend/paged_kv_cache.hpp"

#include "core/check.hpp"

#include <algorithm>

namespace sitsrt {

PagedKvCache::PagedKvCache(KvBlockPool& pool, std::int64_t max_positions) : pool_(pool), max_positions_(max_positions) {
  if (max_positions < 1) raise(ErrorCode::kInvalidArgument, "paged KV cache: {} positions", max_positions);
}

PagedKvCache::~PagedKvCache() {  // a swapped-out sequence holds no blocks
  for (std::int32_t b : table_) pool_.release(b);
}

std::int64_t PagedKvCache::capacity() const noexcept {
  return static_cast<std::int64_t>(table_.size()) * pool_.block_size();
}

ops::KvLayerRef PagedKvCache::layer(std::int64_t index) const noexcept {
  ops::KvLayerRef ref = pool_.layer(index, table_);
  ref.exact_from = exact_from_;
  if (ring_) ring_->fill(ref, index);
  return ref;
}

std::size_t PagedKvCache::bytes() const noexcept {
  return table_.size() * pool_.geometry().block_bytes() + (ring_ ? ring_->bytes() : 0);
}

bool PagedKvCache::take_ring() {
  const KvWindowShape window = pool_.geometry().window();
  if (ring_ || !window.active()) return true;
  try {
    ring_ = std::make_unique<KvRecentRing>(pool_.backend(), window);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kOutOfMemory) throw;
    return false;  // like a full pool: the scheduler waits or preempts
  }
  return true;
}

std::int64_t PagedKvCache::blocks_needed(std::int64_t n) const {
  const std::int64_t bs = pool_.block_size();
  const std::int64_t pos0 = size();
  const std::int64_t end = std::min(pos0 + n, max_positions_);
  if (n <= 0) return 0;
  std::int64_t needed = std::max<std::int64_t>(0, (end + bs - 1) / bs - static_cast<std::int64_t>(table_.size()));
  for (std::int64_t b = pos0 / bs; b < std::min<std::int64_t>((end + bs - 1) / bs, table_.size()); ++b) {
    if (pool_.references(table_[static_cast<std::size_t>(b)]) > 1 || b < static_cast<std::int64_t>(hashes_.size())) {
      ++needed;
    }
  }
  return needed;
}

bool PagedKvCache::prepare_write(std::int64_t pos0, std::int64_t n) {
  if (pos0 < 0 || n < 0 || pos0 + n > max_positions_) {
    raise(ErrorCode::kInvalidArgument, "paged KV cache: positions {}..{} exceed the context length {}", pos0,
          pos0 + n - 1, max_positions_);
  }
  if (n == 0) return true;
  if (!take_ring()) return false;
  const std::int64_t bs = pool_.block_size();
  const std::int64_t first = pos0 / bs, last = (pos0 + n - 1) / bs;
  // Shared or published blocks in the range are copied first (written blocks stop being the
  // published prefix: their hashes are dropped).
  for (std::int64_t b = first; b <= last && b < static_cast<std::int64_t>(table_.size()); ++b) {
    auto& slot = table_[static_cast<std::size_t>(b)];
    const std::optional<std::int32_t> own = pool_.copy_on_write(slot);
    if (!own) return false;
    slot = *own;
    if (b < static_cast<std::int64_t>(hashes_.size())) hashes_.resize(static_cast<std::size_t>(b));
  }
  while (static_cast<std::int64_t>(table_.size()) <= last) {
    const std::optional<std::int32_t> block = pool_.allocate();
    if (!block) return false;
    table_.push_back(*block);
  }
  return true;
}

void PagedKvCache::truncate(std::int64_t n) {
  n = std::clamp<std::int64_t>(n, 0, size());
  const std::int64_t bs = pool_.block_size();
  const auto keep = static_cast<std::size_t>((n + bs - 1) / bs);
  while (table_.size() > keep) {
    pool_.release(table_.back());
    table_.pop_back();
  }
  if (hashes_.size() > static_cast<std::size_t>(n / bs)) hashes_.resize(static_cast<std::size_t>(n / bs));
  if (n == 0) {
    ring_.reset();
    exact_from_ = 0;
  } else {  // the ring holds positions [size - window, size): those below n keep their copies
    exact_from_ = std::max(exact_from_, std::clamp<std::int64_t>(size() - pool_.geometry().recent_window, 0, n));
  }
  set_size(n);
}

std::unique_ptr<PagedKvCache> PagedKvCache::fork() const {
  auto copy = std::make_unique<PagedKvCache>(pool_, max_positions_);
  for (std::int32_t b : table_) pool_.retain(b);
  copy->table_ = table_;
  copy->hashes_ = hashes_;
  copy->set_size(size());
  copy->exact_from_ = exact_from_;
  if (ring_) {
    copy->ring_ = std::make_unique<KvRecentRing>(pool_.backend(), pool_.geometry().window());
    copy->ring_->copy_from(*ring_);
  }
  return copy;
}

void PagedKvCache::swap_out() {
  if (swapped()) return;
  swap_.clear();
  swap_.reserve(table_.size() * pool_.geometry().block_bytes());
  for (std::int32_t b : table_) pool_.save(b, swap_);
  if (ring_) {
    ring_->save(ring_swap_);
    ring_.reset();
  }
  swapped_blocks_ = table_.size();
  for (std::int32_t b : table_) pool_.release(b);
  table_.clear();
  hashes_.clear();  // the copies coming back are private blocks
}

bool PagedKvCache::swap_in() {
  if (!swapped()) return true;
  if (pool_.free_blocks() < static_cast<std::int64_t>(swapped_blocks_)) return false;
  if (!ring_swap_.empty()) {
    if (!take_ring()) return false;
    ring_->restore(ring_swap_);
  }
  const std::size_t block_bytes = pool_.geometry().block_bytes();
  std::vector<std::int32_t> blocks;
  for (std::size_t i = 0; i < swapped_blocks_; ++i) {
    const std::optional<std::int32_t> b = pool_.allocate();
    if (!b) {  // another thread took blocks since the count: give back, stay swapped
      for (std::int32_t x : blocks) pool_.release(x);
      ring_.reset();
      return false;
    }
    blocks.push_back(*b);
    pool_.restore(*b, std::span(swap_).subspan(i * block_bytes, block_bytes));
  }
  table_ = std::move(blocks);
  swapped_blocks_ = 0;
  swap_.clear();
  swap_.shrink_to_fit();
  ring_swap_ = {};
  return true;
}

std::int64_t PagedKvCache::adopt_prefix(std::span<const std::int32_t> tokens) {
  if (size() != 0 || !table_.empty()) raise(ErrorCode::kInternal, "paged KV cache: adopt_prefix on a used sequence");
  const auto bs = static_cast<std::size_t>(pool_.block_size());
  std::uint64_t previous = 0;
  for (std::size_t b = 0; (b + 1) * bs <= tokens.size() && static_cast<std::int64_t>((b + 1) * bs) <= max_positions_;
       ++b) {
    const auto block_tokens = tokens.subspan(b * bs, bs);
    const std::uint64_t hash = kv_block_hash(previous, block_tokens);
    const std::optional<std::int32_t> block = pool_.lookup(hash, block_tokens);
    if (!block) break;
    table_.push_back(*block);
    hashes_.push_back(hash);
    previous = hash;
  }
  set_size(static_cast<std::int64_t>(table_.size() * bs));
  exact_from_ = size();  // adopted positions have no exact copies
  return size();
}

void PagedKvCache::publish_full_blocks(std::span<const std::int32_t> tokens) {
  const auto bs = static_cast<std::size_t>(pool_.block_size());
  const auto full = static_cast<std::size_t>(size()) / bs;
  if (tokens.size() < full * bs) raise(ErrorCode::kInternal, "paged KV cache: {} tokens for {} full blocks", tokens.size(), full);
  std::uint64_t previous = hashes_.empty() ? 0 : hashes_.back();
  for (std::size_t b = hashes_.size(); b < full; ++b) {
    const auto block_tokens = tokens.subspan(b * bs, bs);
    const std::uint64_t hash = kv_block_hash(previous, block_tokens);
    pool_.publish(table_[b], hash, block_tokens);
    hashes_.push_back(hash);
    previous = hash;
  }
}

}  // namespace sitsrt
