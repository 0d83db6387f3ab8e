#include "backend/kv_cache.hpp"

#include "core/check.hpp"

namespace sitsrt {

std::size_t ContiguousKvCache::bytes_for(std::int64_t n_layers, std::int64_t capacity, std::int64_t kv_width,
                                         DType type) {
  return static_cast<std::size_t>(n_layers) * 2 * static_cast<std::size_t>(capacity) * row_bytes(type, kv_width);
}

ContiguousKvCache::ContiguousKvCache(Backend& backend, std::int64_t n_layers, std::int64_t capacity,
                                     std::int64_t kv_width, DType type)
    : n_layers_(n_layers), capacity_(capacity), kv_width_(kv_width), type_(type), row_bytes_(row_bytes(type, kv_width)) {
  if (type != DType::kF32 && type != DType::kF16) {
    raise(ErrorCode::kUnsupported, "KV cache type {} is not supported (f32, f16)", name(type));
  }
  kv_type_ = type == DType::kF32 ? ops::KvType::kF32 : ops::KvType::kF16;
  buffer_ = backend.allocate(bytes_for(n_layers, capacity, kv_width, type), "KV cache");
}

ops::KvLayerRef ContiguousKvCache::layer(std::int64_t index) const noexcept {
  const std::size_t plane = static_cast<std::size_t>(capacity_) * row_bytes_;
  std::byte* base = buffer_->data() + static_cast<std::size_t>(index) * 2 * plane;
  ops::KvLayerRef ref;
  ref.k_type = ref.v_type = kv_type_;
  ref.k = base;
  ref.v = base + plane;
  ref.k_row_bytes = ref.v_row_bytes = row_bytes_;
  ref.kv_width = kv_width_;
  ref.capacity = capacity_;
  ref.block_size = capacity_;
  ref.block_table = kOneBlock;
  ref.device = buffer_->device();
  return ref;
}

}  // namespace sitsrt
