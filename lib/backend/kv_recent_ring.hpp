// The f16 rows of one sequence's exact recent window (ops::KvLayerRef::recent_window): for every
// layer and each int8/int4 side, recent_window rows of kv_width halves, position p in row
// p % recent_window. One buffer from the backend (on its device), counted against its budget.
#pragma once

#include "backend/backend.hpp"
#include "ops/kv_ref.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace sitsrt {

// Which sides of a cache keep an exact window, and how long it is (0: none).
struct KvWindowShape {
  std::int64_t n_layers = 0;
  std::int64_t kv_width = 0;
  std::int64_t recent_window = 0;
  bool k = false;  // K is int8/int4 (only quantized sides keep copies)
  bool v = false;

  [[nodiscard]] bool active() const noexcept { return recent_window > 0 && (k || v); }
  // Bytes of one sequence's ring (0 when inactive).
  [[nodiscard]] std::size_t bytes() const noexcept;
};

// The window of a layout: quantized sides when recent_window > 0.
[[nodiscard]] KvWindowShape kv_window_shape(std::int64_t n_layers, std::int64_t kv_width, ops::KvType k_type,
                                            ops::KvType v_type, std::int64_t recent_window) noexcept;

class KvRecentRing {
 public:
  // Allocates shape.bytes() from the backend (kOutOfMemory naming the window when the budget
  // cannot hold it); shape.active() must hold.
  KvRecentRing(Backend& backend, const KvWindowShape& shape);

  // Sets ref's recent-window fields for `layer` (exact_from is the caller's).
  void fill(ops::KvLayerRef& ref, std::int64_t layer) const noexcept;
  [[nodiscard]] std::size_t bytes() const noexcept { return buffer_->size(); }

  // The rows to host memory and back (a swapped-out sequence), and from another ring (a fork).
  void save(std::vector<std::byte>& out) const;
  void restore(std::span<const std::byte> in);
  void copy_from(const KvRecentRing& other);

 private:
  Backend& backend_;
  KvWindowShape shape_;
  std::unique_ptr<BackendBuffer> buffer_;
};

}  // namespace sitsrt
