// The key/value cache attention reads through: per layer, an ops::KvLayerRef (element types,
// block size, block table, memory of the backend's device). ContiguousKvCache is the first
// implementation: one buffer from the backend holding, for every layer, `capacity` rows of K
// and of V, i.e. a single block per sequence. A paged pool with block tables and quantized
// K/V (INT8/INT4) implements the same interface.
#pragma once

#include "backend/backend.hpp"
#include "backend/kv_recent_ring.hpp"
#include "core/dtype.hpp"
#include "ops/kv_ref.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <span>

namespace sitsrt {

class KvCache {
 public:
  virtual ~KvCache() = default;
  [[nodiscard]] virtual ops::KvLayerRef layer(std::int64_t index) const noexcept = 0;
  [[nodiscard]] virtual std::int64_t capacity() const noexcept = 0;
  [[nodiscard]] virtual std::size_t bytes() const noexcept = 0;

  // Positions filled so far (the next token goes at position size()).
  [[nodiscard]] std::int64_t size() const noexcept { return size_; }
  void set_size(std::int64_t n) noexcept { size_ = n; }

 private:
  std::int64_t size_ = 0;
};

// What one cached position holds: its heads, the element type of K and of V, whether each side
// is stored Hadamard-rotated, and the K centering offsets and channel scales (ops::KvLayerRef).
struct KvCacheLayout {
  std::int64_t n_kv_heads = 0;
  std::int64_t head_dim = 0;
  ops::KvType k_type = ops::KvType::kF16;
  ops::KvType v_type = ops::KvType::kF16;
  bool k_rotated = false;
  bool v_rotated = false;
  // n_layers x (n_kv_heads * head_dim) floats subtracted from K rows before storing (layer l's
  // at l * kv_width); empty: none. Not owned: the engine keeps them for its life.
  std::span<const float> k_offsets;
  std::span<const float> k_scales;  // n_layers x kv_width K channel scales (ops::KvLayerRef::k_scale); empty: none
  std::int64_t recent_window = 0;   // exact recent window of int8/int4 sides (ops::KvLayerRef); 0: none
};

class ContiguousKvCache final : public KvCache {
 public:
  // Any K and V types; throws kUnsupported for a width a type cannot hold (ops::kv_row_bytes)
  // or rotation without a power-of-two head_dim.
  ContiguousKvCache(Backend& backend, std::int64_t n_layers, std::int64_t capacity, const KvCacheLayout& layout);
  // type: kF32 or kF16 for both K and V (rows of kv_width values); throws kUnsupported otherwise.
  ContiguousKvCache(Backend& backend, std::int64_t n_layers, std::int64_t capacity, std::int64_t kv_width, DType type);

  [[nodiscard]] ops::KvLayerRef layer(std::int64_t index) const noexcept override;
  [[nodiscard]] std::int64_t capacity() const noexcept override { return capacity_; }
  [[nodiscard]] std::size_t bytes() const noexcept override { return buffer_->size() + (ring_ ? ring_->bytes() : 0); }
  // The one buffer holding every layer's rows (the exact window's are apart): layer l's K rows
  // start at offset layer(l).k - layer(0).k.
  [[nodiscard]] const BackendBuffer& buffer() const noexcept { return *buffer_; }

  static std::size_t bytes_for(std::int64_t n_layers, std::int64_t capacity, const KvCacheLayout& layout);
  static std::size_t bytes_for(std::int64_t n_layers, std::int64_t capacity, std::int64_t kv_width, DType type);

 private:
  std::int64_t n_layers_;
  std::int64_t capacity_;
  KvCacheLayout layout_;
  std::size_t k_row_bytes_;
  std::size_t v_row_bytes_;
  std::unique_ptr<BackendBuffer> buffer_;
  std::unique_ptr<KvRecentRing> ring_;  // when the layout keeps an exact recent window
  static constexpr std::array<std::int32_t, 1> kOneBlock{0};  // the whole capacity is block 0
};

}  // namespace sitsrt
