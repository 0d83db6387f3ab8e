// How attention finds one layer's cached keys and values, whatever the cache: positions are
// grouped in blocks of `block_size`; logical block b of the sequence lives in physical block
// block_table[b], whose position r starts at k + (block_table[b] * block_size + r) * k_row_bytes
// (same for v). A contiguous cache is one block as large as its capacity; a paged cache gives
// each sequence its own table. Element types are chosen per K and V (KvType).
#pragma once

#include "core/device.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace sitsrt::ops {

// Element types of cached K or V rows. One row holds one position's n_kv_heads * head_dim
// values (head after head, as the projection writes them):
//   kF32, kF16: the values.
//   kInt8: the values as int8 q in [-127, 127], then one f16 scale per head (x ~ q * scale).
//   kInt4: the values as 4-bit indices into 16 non-uniform levels (two per byte, the even
//          element in the low nibble), then one 8-bit scale code per group of 32 consecutive
//          values of the row (x ~ level(index) * scale_of(code), core/kv_int4.hpp).
// A backend's kernels read these rows in place; the layout is shared by every backend.
enum class KvType : std::uint8_t { kF32, kF16, kInt8, kInt4 };

[[nodiscard]] std::string_view name(KvType type) noexcept;
// Parses "f32", "f16", "int8", "int4"; throws kInvalidArgument naming the valid names.
[[nodiscard]] KvType parse_kv_type(std::string_view text);
// Bytes of one cached row; throws kUnsupported for a width the type cannot hold (int4 needs
// kv_width % 32 == 0), naming the type and the width.
[[nodiscard]] std::size_t kv_row_bytes(KvType type, std::int64_t n_kv_heads, std::int64_t head_dim);

struct KvLayerRef {
  KvType k_type = KvType::kF16;
  KvType v_type = KvType::kF16;
  std::byte* k = nullptr;
  std::byte* v = nullptr;
  std::size_t k_row_bytes = 0;
  std::size_t v_row_bytes = 0;
  std::int64_t kv_width = 0;    // elements per position: n_kv_heads * head_dim
  std::int64_t capacity = 0;    // positions this sequence may hold
  std::int64_t block_size = 0;  // positions per block
  std::span<const std::int32_t> block_table;
  Device device;
  // Rotated sides hold each head vector multiplied by the normalised Walsh-Hadamard matrix of
  // size head_dim (a power of two) before quantizing: it spreads outlier channels over the
  // head, so one scale fits every value better. Attention undoes it (q rotated for K, the
  // output rotated back for V); the values written and read stay those of the projections.
  bool k_rotated = false;
  bool v_rotated = false;
  // kv_width floats subtracted from every K row before it is rotated and quantized (host
  // memory; null: none). Attention needs no correction: q.(k - c) = q.k - q.c shifts every
  // score of a query by the same amount, which softmax ignores (no logit softcapping here).
  // Centering removes the large per-channel means K projections carry, so int8/int4 scales
  // fit the varying part (docs/serving.md).
  const float* k_offset = nullptr;
  // kv_width positive floats the centered K row is divided by before rotating (null: none);
  // attention multiplies q by them, so q.k' = (q s).((k - c) / s) = q.(k - c). Scales that even
  // out the channels' magnitudes keep a few large channels from setting every group's scale.
  const float* k_scale = nullptr;
  // Exact recent window (recent_window > 0; int8/int4 sides only): those sides also keep f16
  // copies of their rows as quantized (centered, scaled, rotated), and a query at position i
  // reads positions max(exact_from, i - recent_window + 1) .. i from the copies: the keys a query
  // attends most keep f16 precision (int4 KLD, docs/serving.md). The sequence's ring holds the
  // copies of its latest positions, p in row p % recent_window of k_recent / v_recent (f16 rows
  // of kv_width values; null for an unquantized side); a backend stages a step's own rows and
  // moves the latest into the ring after attention. exact_from: positions before it have no
  // copy (taken from the prefix cache) and are read quantized.
  std::byte* k_recent = nullptr;
  std::byte* v_recent = nullptr;
  std::int64_t recent_window = 0;
  std::int64_t exact_from = 0;
  // Head-major blocks (a backend's choice, BackendInfo::head_major_kv; int4 only with
  // head_dim % 32 == 0): within each block, head g's block_size head rows lie together, from
  // g * block_size * (bytes of a head row) on, rather than each position's row together. A head
  // row is the head's values as the type stores them, then the head's scales (int8: its f16
  // scale; int4: its head_dim / 32 codes). A block keeps its bytes' place in the pool, so block
  // copies and swaps do not depend on it; readers of single rows do.
  bool k_head_major = false;
  bool v_head_major = false;

  // True when the blocks are the storage in order (a contiguous cache, or a paged one whose
  // table is 0, 1, 2, ...): position p is then at k + p * k_row_bytes (row-major sides).
  [[nodiscard]] bool contiguous() const noexcept {
    for (std::size_t b = 0; b < block_table.size(); ++b) {
      if (block_table[b] != static_cast<std::int32_t>(b)) return false;
    }
    return true;
  }
};

}  // namespace sitsrt::ops
