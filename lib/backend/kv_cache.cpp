#include "backend/kv_cache.hpp"

#include "core/check.hpp"

namespace sitsrt {
namespace {

// F32/F16 rows of kv_width values are the same bytes whatever the head split: one head.
KvCacheLayout float_layout(std::int64_t kv_width, DType type) {
  if (type != DType::kF32 && type != DType::kF16) {
    raise(ErrorCode::kUnsupported, "KV cache type {} is not supported (f32, f16)", name(type));
  }
  const ops::KvType t = type == DType::kF32 ? ops::KvType::kF32 : ops::KvType::kF16;
  return {1, kv_width, t, t, false, false};
}

}  // namespace

std::size_t ContiguousKvCache::bytes_for(std::int64_t n_layers, std::int64_t capacity, const KvCacheLayout& layout) {
  const std::size_t row = ops::kv_row_bytes(layout.k_type, layout.n_kv_heads, layout.head_dim) +
                          ops::kv_row_bytes(layout.v_type, layout.n_kv_heads, layout.head_dim);
  return static_cast<std::size_t>(n_layers) * static_cast<std::size_t>(capacity) * row +
         kv_window_shape(n_layers, layout.n_kv_heads * layout.head_dim, layout.k_type, layout.v_type,
                         layout.recent_window)
             .bytes();
}

std::size_t ContiguousKvCache::bytes_for(std::int64_t n_layers, std::int64_t capacity, std::int64_t kv_width,
                                         DType type) {
  return bytes_for(n_layers, capacity, float_layout(kv_width, type));
}

ContiguousKvCache::ContiguousKvCache(Backend& backend, std::int64_t n_layers, std::int64_t capacity,
                                     const KvCacheLayout& layout)
    : n_layers_(n_layers),
      capacity_(capacity),
      layout_(layout),
      k_row_bytes_(ops::kv_row_bytes(layout.k_type, layout.n_kv_heads, layout.head_dim)),
      v_row_bytes_(ops::kv_row_bytes(layout.v_type, layout.n_kv_heads, layout.head_dim)) {
  const bool power_of_two = layout.head_dim > 0 && (layout.head_dim & (layout.head_dim - 1)) == 0;
  if ((layout.k_rotated || layout.v_rotated) && !power_of_two) {
    raise(ErrorCode::kUnsupported, "a rotated KV cache needs a power-of-two head_dim, not {}", layout.head_dim);
  }
  const KvWindowShape window = kv_window_shape(n_layers, layout.n_kv_heads * layout.head_dim, layout.k_type,
                                               layout.v_type, layout.recent_window);
  buffer_ = backend.allocate(bytes_for(n_layers, capacity, layout) - window.bytes(), "KV cache");
  if (window.active()) ring_ = std::make_unique<KvRecentRing>(backend, window);
}

ContiguousKvCache::ContiguousKvCache(Backend& backend, std::int64_t n_layers, std::int64_t capacity,
                                     std::int64_t kv_width, DType type)
    : ContiguousKvCache(backend, n_layers, capacity, float_layout(kv_width, type)) {}

ops::KvLayerRef ContiguousKvCache::layer(std::int64_t index) const noexcept {
  // Per layer: capacity K rows, then capacity V rows.
  const std::size_t k_plane = static_cast<std::size_t>(capacity_) * k_row_bytes_;
  const std::size_t v_plane = static_cast<std::size_t>(capacity_) * v_row_bytes_;
  std::byte* base = buffer_->data() + static_cast<std::size_t>(index) * (k_plane + v_plane);
  ops::KvLayerRef ref;
  ref.k_type = layout_.k_type;
  ref.v_type = layout_.v_type;
  ref.k = base;
  ref.v = base + k_plane;
  ref.k_row_bytes = k_row_bytes_;
  ref.v_row_bytes = v_row_bytes_;
  ref.kv_width = layout_.n_kv_heads * layout_.head_dim;
  ref.capacity = capacity_;
  ref.block_size = capacity_;
  ref.block_table = kOneBlock;
  ref.device = buffer_->device();
  ref.k_rotated = layout_.k_rotated;
  ref.v_rotated = layout_.v_rotated;
  if (!layout_.k_offsets.empty()) ref.k_offset = layout_.k_offsets.data() + index * ref.kv_width;
  if (!layout_.k_scales.empty()) ref.k_scale = layout_.k_scales.data() + index * ref.kv_width;
  if (ring_) ring_->fill(ref, index);  // positions are written from 0 on: every copy is the ring's
  return ref;
}

}  // namespace sitsrt
