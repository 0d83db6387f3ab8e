// The key/value cache attention reads through: per layer, an ops::KvLayerRef (element types,
// block size, block table, memory of the backend's device). ContiguousKvCache is the first
// implementation: one buffer from the backend holding, for every layer, `capacity` rows of K
// and of V, i.e. a single block per sequence. A paged pool with block tables and quantized
// K/V (INT8/INT4) implements the same interface.
#pragma once

#include "backend/backend.hpp"
#include "core/dtype.hpp"
#include "ops/kv_ref.hpp"

#include <array>
#include <cstdint>
#include <memory>

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

class ContiguousKvCache final : public KvCache {
 public:
  // type: kF32 or kF16 for both K and V; throws kUnsupported otherwise.
  ContiguousKvCache(Backend& backend, std::int64_t n_layers, std::int64_t capacity, std::int64_t kv_width, DType type);

  [[nodiscard]] ops::KvLayerRef layer(std::int64_t index) const noexcept override;
  [[nodiscard]] std::int64_t capacity() const noexcept override { return capacity_; }
  [[nodiscard]] std::size_t bytes() const noexcept override { return buffer_->size(); }

  static std::size_t bytes_for(std::int64_t n_layers, std::int64_t capacity, std::int64_t kv_width, DType type);

 private:
  std::int64_t n_layers_;
  std::int64_t capacity_;
  std::int64_t kv_width_;
  DType type_;
  ops::KvType kv_type_ = ops::KvType::kF16;
  std::size_t row_bytes_;
  std::unique_ptr<BackendBuffer> buffer_;
  static constexpr std::array<std::int32_t, 1> kOneBlock{0};  // the whole capacity is block 0
};

}  // namespace sitsrt
