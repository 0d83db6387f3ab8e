// One sequence of a batched attention as the kernels read it, and where its K / V rows sit: the
// paged rows through the block table, the exact f16 copies of a windowed side. Free of CUDA
// headers (SITSRT_HD functions), so the host tests of the tiled kernel's lanes
// (tests/unit/cuda_attention_tiles_test.cpp) address rows as the kernels do.
#pragma once

#include "cuda_backend/device_formats.hpp"

#include <cstdint>

namespace sitsrt::cuda {

// One sequence of a batched attention, in device memory (the backend uploads an array of these).
struct AttentionSequenceDesc {
  std::uint8_t* k = nullptr;  // the layer's K rows (physical row i at k + i * k_row_bytes)
  std::uint8_t* v = nullptr;
  std::int64_t k_row_bytes = 0;
  std::int64_t v_row_bytes = 0;
  const std::int32_t* block_table = nullptr;
  const float* k_offset = nullptr;  // kv_width values or null
  const float* k_scale = nullptr;   // kv_width values or null
  std::int64_t block_size = 0;
  std::int64_t row_begin = 0;
  std::int64_t n_rows = 0;
  std::int64_t pos0 = 0;
  int k_type = 1;  // ops::KvType codes: 0 f32, 1 f16, 2 int8, 3 int4
  int v_type = 1;
  int k_rotated = 0;
  int v_rotated = 0;
  // Exact recent window (ops::KvLayerRef::recent_window): a windowed side (int8/int4 with a ring)
  // also keeps f16 copies of its rows as quantized; a row at position i reads positions from
  // max(exact_from, i - recent_window + 1) on from them: this step's from AttentionLaunch's
  // k_exact / v_exact, older ones from the ring (position p in row p % recent_window).
  std::uint8_t* k_recent = nullptr;  // null: the side keeps no copies
  std::uint8_t* v_recent = nullptr;
  std::int64_t recent_window = 0;
  std::int64_t exact_from = 0;
};

SITSRT_HD std::int64_t physical_row(const AttentionSequenceDesc& s, std::int64_t pos) {
  const std::int64_t b = pos / s.block_size;
  return static_cast<std::int64_t>(s.block_table[b]) * s.block_size + (pos - b * s.block_size);
}

// The first position a row at `pos` (attending from `lo`) reads from the exact f16 copies of its
// windowed sides, as the CPU's exact_begin: max(exact_from, pos - window + 1) within [lo, pos + 1];
// pos + 1 (none) when neither side keeps copies.
SITSRT_HD std::int64_t exact_begin(const AttentionSequenceDesc& s, std::int64_t lo, std::int64_t pos) {
  if (s.k_recent == nullptr && s.v_recent == nullptr) return pos + 1;
  std::int64_t b = pos - s.recent_window + 1;
  b = b > s.exact_from ? b : s.exact_from;
  return b < lo ? lo : b > pos + 1 ? pos + 1 : b;
}

// The f16 copy of position p of a windowed side (rows of `width` halves): this step's own rows
// (from pos0 on) from the step's copies, older ones from the sequence's ring.
SITSRT_HD const std::uint8_t* exact_row(const AttentionSequenceDesc& s, const std::uint8_t* step_rows,
                                        const std::uint8_t* ring, std::int64_t width, std::int64_t p) {
  if (p >= s.pos0) return step_rows + (s.row_begin + p - s.pos0) * 2 * width;
  return ring + (p % s.recent_window) * 2 * width;
}

}  // namespace sitsrt::cuda
