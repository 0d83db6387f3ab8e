// How attention finds one layer's cached keys and values, whatever the cache: positions are
// grouped in blocks of `block_size`; logical block b of the sequence lives in physical block
// block_table[b], whose position r starts at k + (block_table[b] * block_size + r) * k_row_bytes
// (same for v). A contiguous cache is one block as large as its capacity; a paged cache gives
// each sequence its own table. Element types are chosen per K and V.
#pragma once

#include "core/device.hpp"
#include "core/dtype.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

namespace sitsrt::ops {

struct KvLayerRef {
  DType k_type = DType::kF16;
  DType v_type = DType::kF16;
  std::byte* k = nullptr;
  std::byte* v = nullptr;
  std::size_t k_row_bytes = 0;
  std::size_t v_row_bytes = 0;
  std::int64_t kv_width = 0;    // elements per position: n_kv_heads * head_dim
  std::int64_t capacity = 0;    // positions this sequence may hold
  std::int64_t block_size = 0;  // positions per block
  std::span<const std::int32_t> block_table;
  Device device;

  // True when the blocks are the storage in order (a contiguous cache, or a paged one whose
  // table is 0, 1, 2, ...): position p is then at k + p * k_row_bytes.
  [[nodiscard]] bool contiguous() const noexcept {
    for (std::size_t b = 0; b < block_table.size(); ++b) {
      if (block_table[b] != static_cast<std::int32_t>(b)) return false;
    }
    return true;
  }
};

}  // namespace sitsrt::ops
