// Repacked layouts of Q8_0 and Q4_0 rows (DType::kQ8_0R / kQ4_0R): the same levels and fp16
// scales as the GGUF blocks, regrouped so that the AVX-512 decode kernels load levels with
// 64-byte loads and no unpacking shuffles, and read four (Q8_0R) or sixteen (Q4_0R) scales with
// one load.
// The CPU backend repacks resident matmul weights into them at load (cpu/weight_layout.hpp);
// they are never written to files. Byte for byte (docs/quantization.md):
//
// A row of nb blocks is cut into groups of kRepackGroupBlocks (32) blocks, the last group
// holding the t = nb mod 32 rest (if any). Group g starts at byte g * 32 * block_bytes, so the
// row has the stored format's size and 1024-element column chunks start at the same offsets.
// A group of t blocks is [levels of its t blocks][t fp16 scales, block order]:
//   Q8_0R: block i's 32 levels at 32 i, each stored as the unsigned byte q + 128 (q ^ 0x80).
//   Q4_0R: block i's GGUF qs (16 bytes: element k in the low nibble of byte k, element k + 16
//          in its high nibble) at 16 i, so four consecutive blocks are one 64-byte load.
// Element values are those of the stored block: d * q (Q8_0), d * (nibble - 8) (Q4_0).
#pragma once

#include "core/quant_blocks.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt {

inline constexpr int kRepackGroupBlocks = 32;
inline constexpr std::int64_t kRepackGroupElements = kRepackGroupBlocks * kQBlock;  // 1024

// Where group g of a row of nb blocks lies, and how many blocks it holds.
struct RepackGroup {
  std::size_t offset;  // from the row start
  int blocks;
};
inline RepackGroup repack_group(std::int64_t g, std::int64_t nb, std::size_t block_bytes) noexcept {
  const std::int64_t first = g * kRepackGroupBlocks;
  const std::int64_t left = nb - first;
  return {static_cast<std::size_t>(first) * block_bytes,
          static_cast<int>(left < kRepackGroupBlocks ? left : kRepackGroupBlocks)};
}

// Whole rows (or whole-group prefixes of rows) of nb blocks, stored <-> repacked.
void repack_row_q8_0(const BlockQ8_0* src, std::byte* dst, std::int64_t nb) noexcept;
void repack_row_q4_0(const BlockQ4_0* src, std::byte* dst, std::int64_t nb) noexcept;
void unpack_row_q8_0r(const std::byte* src, BlockQ8_0* dst, std::int64_t nb) noexcept;
void unpack_row_q4_0r(const std::byte* src, BlockQ4_0* dst, std::int64_t nb) noexcept;

// The stored format a repacked one regroups (kQ8_0R -> kQ8_0, kQ4_0R -> kQ4_0); `type` itself
// for every other format.
DType stored_format_of(DType type) noexcept;
// The repacked layout of a stored format, or `type` itself when it has none.
DType repacked_format_of(DType type) noexcept;

}  // namespace sitsrt
