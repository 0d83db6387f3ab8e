#include "backend/kv_recent_ring.hpp"

#include "core/check.hpp"

namespace sitsrt {
namespace {

bool quantized(ops::KvType t) noexcept {
  return t == ops::KvType::kInt8 || t == ops::KvType::kInt4;
}

// Bytes of one side's rows of one layer.
std::size_t side_bytes(const KvWindowShape& s) noexcept {
  return static_cast<std::size_t>(s.recent_window * s.kv_width) * 2;
}

}  // namespace

std::size_t KvWindowShape::bytes() const noexcept {
  if (!active()) return 0;
  return static_cast<std::size_t>(n_layers) * side_bytes(*this) * ((k ? 1u : 0u) + (v ? 1u : 0u));
}

KvWindowShape kv_window_shape(std::int64_t n_layers, std::int64_t kv_width, ops::KvType k_type, ops::KvType v_type,
                              std::int64_t recent_window) noexcept {
  return {n_layers, kv_width, recent_window, quantized(k_type), quantized(v_type)};
}

KvRecentRing::KvRecentRing(Backend& backend, const KvWindowShape& shape) : backend_(backend), shape_(shape) {
  if (!shape.active() || shape.n_layers < 1 || shape.kv_width < 1) {
    raise(ErrorCode::kInternal, "KV recent window: {} positions for {} layers x {} values (K {}, V {})",
          shape.recent_window, shape.n_layers, shape.kv_width, shape.k, shape.v);
  }
  buffer_ = backend.allocate(shape.bytes(), "KV exact recent window");
}

void KvRecentRing::fill(ops::KvLayerRef& ref, std::int64_t layer) const noexcept {
  // Per layer: the K rows (when K keeps copies), then the V rows.
  const std::size_t side = side_bytes(shape_);
  std::byte* base =
      buffer_->data() + static_cast<std::size_t>(layer) * side * ((shape_.k ? 1u : 0u) + (shape_.v ? 1u : 0u));
  ref.recent_window = shape_.recent_window;
  ref.k_recent = shape_.k ? base : nullptr;
  ref.v_recent = shape_.v ? base + (shape_.k ? side : 0) : nullptr;
}

void KvRecentRing::save(std::vector<std::byte>& out) const {
  const std::size_t at = out.size();
  out.resize(at + buffer_->size());
  backend_.read(*buffer_, 0, {out.data() + at, buffer_->size()});
}

void KvRecentRing::restore(std::span<const std::byte> in) {
  if (in.size() != buffer_->size()) {
    raise(ErrorCode::kInternal, "KV recent window: restore of {} bytes into {}", in.size(), buffer_->size());
  }
  backend_.write(*buffer_, 0, in);
}

void KvRecentRing::copy_from(const KvRecentRing& other) {
  if (other.buffer_->size() != buffer_->size()) {
    raise(ErrorCode::kInternal, "KV recent window: copy of {} bytes into {}", other.buffer_->size(), buffer_->size());
  }
  backend_.copy(*other.buffer_, 0, *buffer_, 0, buffer_->size());
}

}  // namespace sitsrt
