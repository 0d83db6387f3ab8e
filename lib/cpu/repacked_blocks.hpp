// Repacked layouts of Q8_0, Q4_0, FP8 E4M3 and Q4_K rows (cpu::WeightLayout::kQ8_0R / kQ4_0R /
// kFP8_E4M3R / kQ4_KR): the same levels and scales as the stored blocks, regrouped so that the
// AVX-512 decode kernels load levels with 64-byte loads and no unpacking shuffles (Q4_0R: one
// block per 32-bit lane), and read four (Q8_0R) or sixteen (Q4_0R) scales with one load, or
// (FP8R) take each block's scale as an fp16 memory broadcast. The CPU backend repacks resident
// matmul weights into them at load (cpu/weight_layout.hpp); they are CPU kernel layouts, never
// in files (no DType names them). Byte for byte (docs/quantization.md):
//
// A row of nb blocks is cut into groups of kRepackGroupBlocks (32) blocks, the last group
// holding the t = nb mod 32 rest (if any). Group g starts at byte g * 32 * block_bytes, so the
// row has the stored format's size and 1024-element column chunks start at the same offsets.
// A group of t blocks is [levels of its t blocks][t fp16 scales, block order]:
//   Q8_0R: block i's 32 levels at 32 i, each stored as the unsigned byte q + 128 (q ^ 0x80).
//   Q4_0R: the GGUF qs (16 bytes: element k in the low nibble of byte k, element k + 16 in its
//          high nibble) of units of 16 blocks, interleaved by 4-byte words: a unit of n blocks
//          (n = 16 but in a row's last unit) starting with block 16 u of the group is at 256 u,
//          and holds word j (qs bytes 4j..4j+3) of its block i at 4 (n j + i). One 64-byte load
//          then gives word j of 16 blocks, block i in 32-bit lane i (q4_0r_word_offset).
// Element values are those of the stored block: d * q (Q8_0), d * (nibble - 8) (Q4_0).
//
// FP8R: groups of kFp8RepackGroupBlocks (16) 64-element blocks (1024 elements, the group g at
// byte g * 16 * 68, the last one holding the rest t). A group of t >= 2 blocks is
// [t x 64 codes][fp32 s][t fp16 r, block order][2t - 4 zero bytes], each code stored with its
// mantissa's lowest bit moved next to the sign (fp8r_code: s m0 e3 e2 e1 e0 m2 m1, so that one
// vpmultishiftqb and one mask make it an fp16, matvec_fp8r_avx512fp16.cpp), block i's scale being
// d_i = s * r_i exactly (fp32 product); a group of one block is [64 codes][fp32 d]. The
// repacker takes s = the least power of two >= the largest |d| (exact for the encoder's 11-bit scales, see
// quantize_fp8_block) or s = the largest d (exact for per-channel scales, all d equal); rows it
// cannot split exactly stay FP8 (weight_layout.cpp), so FP8R dequantizes bit-identically to FP8.
//
// Q4_KR: units of 2 super-blocks (512 elements; the unit u at byte 288 u, a row's last unit
// holding one when nb is odd). A unit of n super-blocks is
// [levels: 128 n][scales: 6 n][mins: 6 n][d: 2 n][dmin: 2 n]: its 8 n sub-blocks (sub-block s
// of super-block k is sub-block i = 8 k + s of the unit) hold their 32 levels as Q4_0R's blocks
// do (element e in the low nibble of byte e, element e + 16 in the high one, word j = bytes
// 4j..4j+3 at 4 (8 n j + i)); each super-block's 8 six-bit scales, then its 8 mins, are 6 bytes
// (value s at bits 6 s .. 6 s + 5, little-endian); d and dmin are the stored fp16s.
#pragma once

#include "core/kquant_blocks.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/weight_layout.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu {

inline constexpr int kRepackGroupBlocks = 32;
inline constexpr std::int64_t kRepackGroupElements = kRepackGroupBlocks * kQBlock;  // 1024

// Where group g of a row of nb blocks lies, and how many blocks it holds (groups of
// group_blocks: 32 for Q8_0R / Q4_0R, kFp8RepackGroupBlocks for FP8R).
struct RepackGroup {
  std::size_t offset;  // from the row start
  int blocks;
};
inline RepackGroup repack_group(std::int64_t g, std::int64_t nb, std::size_t block_bytes,
                                int group_blocks = kRepackGroupBlocks) noexcept {
  const std::int64_t first = g * group_blocks;
  const std::int64_t left = nb - first;
  return {static_cast<std::size_t>(first) * block_bytes, static_cast<int>(left < group_blocks ? left : group_blocks)};
}

inline constexpr int kFp8RepackGroupBlocks = 16;
static_assert(kFp8RepackGroupBlocks * kFp8Block == kRepackGroupElements);

// An E4M3 code (s e3 e2 e1 e0 m2 m1 m0) as FP8R stores it (s m0 e3 e2 e1 e0 m2 m1), and back.
inline constexpr std::uint8_t fp8r_code(std::uint8_t e4m3) noexcept {
  return static_cast<std::uint8_t>((e4m3 & 0x80u) | ((e4m3 & 1u) << 6) | ((e4m3 >> 1) & 0x3Fu));
}
inline constexpr std::uint8_t e4m3_code(std::uint8_t fp8r) noexcept {
  return static_cast<std::uint8_t>((fp8r & 0x80u) | ((fp8r & 0x3Fu) << 1) | ((fp8r >> 6) & 1u));
}

// Group g of an FP8R row of nb blocks.
inline RepackGroup fp8_repack_group(std::int64_t g, std::int64_t nb) noexcept {
  return repack_group(g, nb, sizeof(BlockFP8_E4M3), kFp8RepackGroupBlocks);
}

inline constexpr int kQ4RepackUnitBlocks = 16;

// Q4_0R: the byte offset, from its group's start, of word j (qs bytes 4j .. 4j + 3) of block i
// of a group of t blocks.
inline std::size_t q4_0r_word_offset(int t, int i, int j) noexcept {
  const int unit = i / kQ4RepackUnitBlocks;
  const int rest = t - kQ4RepackUnitBlocks * unit;
  const int n = rest < kQ4RepackUnitBlocks ? rest : kQ4RepackUnitBlocks;
  return static_cast<std::size_t>(kQ4RepackUnitBlocks * (kQBlock / 2) * unit + 4 * (n * j + i % kQ4RepackUnitBlocks));
}

// Whole rows (or whole-group prefixes of rows) of nb blocks, stored <-> repacked.
void repack_row_q8_0(const BlockQ8_0* src, std::byte* dst, std::int64_t nb) noexcept;
void repack_row_q4_0(const BlockQ4_0* src, std::byte* dst, std::int64_t nb) noexcept;
void unpack_row_q8_0r(const std::byte* src, BlockQ8_0* dst, std::int64_t nb) noexcept;
void unpack_row_q4_0r(const std::byte* src, BlockQ4_0* dst, std::int64_t nb) noexcept;
// False when some group's scales have no exact split s * r_i: dst then holds the nearest r_i
// (a valid FP8R row whose values differ slightly from src's).
bool repack_row_fp8(const BlockFP8_E4M3* src, std::byte* dst, std::int64_t nb) noexcept;
void unpack_row_fp8r(const std::byte* src, BlockFP8_E4M3* dst, std::int64_t nb) noexcept;  // d_i = s * r_i

// Q4_KR (above): super-blocks per unit, and where the parts of unit u of a row of nb lie.
inline constexpr int kQ4KRepackUnitBlocks = 2;
struct Q4KUnit {
  std::size_t levels, scales, mins, d, dmin;  // byte offsets from the row start
  int blocks;                                 // n: super-blocks in the unit
};
inline Q4KUnit q4_k_unit(std::int64_t u, std::int64_t nb) noexcept {
  const std::int64_t left = nb - kQ4KRepackUnitBlocks * u;
  const auto n = static_cast<std::size_t>(left < kQ4KRepackUnitBlocks ? left : kQ4KRepackUnitBlocks);
  const std::size_t at = static_cast<std::size_t>(u) * kQ4KRepackUnitBlocks * sizeof(BlockQ4_K);
  return {at, at + 128 * n, at + 134 * n, at + 140 * n, at + 142 * n, static_cast<int>(n)};
}
void repack_row_q4_k(const BlockQ4_K* src, std::byte* dst, std::int64_t nb) noexcept;

// Q8_0P (kQ8_0P, a tiled layout: weight_layout.hpp): a matrix's rows in tiles of kTileRows (16),
// tile t at byte t * 16 * row_stride, its first 16 * row_bytes bytes holding the 16 rows' blocks
// (the rest of the 16 strides zero); rows past the last whole tile are Q8_0R rows. A tile is cut
// into the rows' repack groups (32 blocks, the last holding the rest t), group g at
// 16 * g * 32 * 34 bytes: [t x 512 bytes of levels][t x 32 bytes of scales]. Block i's levels are
// 8 vectors of 64 bytes, vector p holding levels 4p .. 4p + 3 of each row (byte 64p + 4r + k:
// level 4p + k of row r, stored q ^ 0x80 as in Q8_0R); its scales are the 16 rows' fp16 d (row r
// at 32 i + 2 r). So VPDPBUSD against a broadcast 4-level activation word gives 16 rows' partial
// sums at once with no transpose (qdot_q8_panels_avx512vnni.cpp); the sizes equal Q8_0's.
struct Q8PanelGroup {
  std::size_t levels, scales;  // byte offsets from the tile start
  int blocks;
};
inline Q8PanelGroup q8_0p_group(std::int64_t g, std::int64_t nb) noexcept {
  const RepackGroup row = repack_group(g, nb, sizeof(BlockQ8_0));
  const std::size_t at = static_cast<std::size_t>(kTileRows) * row.offset;
  return {at, at + 512 * static_cast<std::size_t>(row.blocks), row.blocks};
}
// The 16 stored rows at src (src_stride bytes apart) -> one tile at dst (16 * nb * 34 bytes).
void repack_tile_q8_0p(const std::byte* src, std::size_t src_stride, std::byte* dst, std::int64_t nb) noexcept;
// Row `lane` (< 16) of the tile at src as stored blocks.
void unpack_tile_row_q8_0p(const std::byte* src, int lane, BlockQ8_0* dst, std::int64_t nb) noexcept;
void unpack_row_q4_kr(const std::byte* src, BlockQ4_K* dst, std::int64_t nb) noexcept;

// Reference conversions of whole rows of n elements in any layout (the stored ones as
// sitsrt::dequantize_row / quantize_row): a repacked row dequantizes bit for bit as its stored
// rows, and quantizes as the stored format's quantizer followed by the repack (FP8R exactly:
// the encoder's scales have 11 significant bits). Throws kInvalidArgument when n is not whole blocks.
void dequantize_row(WeightLayout layout, const void* src, float* dst, std::int64_t n);
void quantize_row(WeightLayout layout, const float* src, void* dst, std::int64_t n);

}  // namespace sitsrt::cpu
