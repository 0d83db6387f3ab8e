// Per-request key/value cache: one contiguous buffer holding, for every layer, `capacity`
// rows of K and of V (n_kv_heads * head_dim elements each, F32 or F16). A paged layout with
// block tables replaces this behind the same per-layer view in a later version.
#pragma once

#include "core/dtype.hpp"
#include "cpu/attention.hpp"
#include "runtime/backend.hpp"

#include <cstdint>
#include <memory>

namespace sitsrt {

class KvCache {
 public:
  KvCache(Backend& backend, std::int64_t n_layers, std::int64_t capacity, std::int64_t kv_width, DType type);

  [[nodiscard]] cpu::KvLayerView layer(std::int64_t index) const noexcept;
  [[nodiscard]] std::int64_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return buffer_->size(); }

  // Positions filled so far (the next token goes at position size()).
  [[nodiscard]] std::int64_t size() const noexcept { return size_; }
  void set_size(std::int64_t n) noexcept { size_ = n; }

  static std::size_t bytes_for(std::int64_t n_layers, std::int64_t capacity, std::int64_t kv_width, DType type);

 private:
  std::int64_t n_layers_;
  std::int64_t capacity_;
  std::int64_t kv_width_;
  DType type_;
  std::size_t row_bytes_;
  std::unique_ptr<BackendBuffer> buffer_;
  std::int64_t size_ = 0;
};

}  // namespace sitsrt
