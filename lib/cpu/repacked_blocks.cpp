#include "cpu/repacked_blocks.hpp"

#include "core/check.hpp"
#include "core/half.hpp"

#include <cmath>
#include <cstring>

namespace sitsrt::cpu {

namespace {

// Calls visit(b, group_start, t, i, scale) for block b of a row of nb blocks, block i of its
// group of t blocks starting at group_start, with the offset of its fp16 scale in the
// repacked row (after the group's t * level_bytes of levels).
template <typename Visit>
void for_each_repacked_block(std::int64_t nb, std::size_t block_bytes, std::size_t level_bytes, Visit&& visit) {
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const RepackGroup group = repack_group(g, nb, block_bytes);
    const std::size_t scales = group.offset + static_cast<std::size_t>(group.blocks) * level_bytes;
    for (int i = 0; i < group.blocks; ++i) {
      visit(g * kRepackGroupBlocks + i, group.offset, group.blocks, i, scales + 2 * static_cast<std::size_t>(i));
    }
  }
}

constexpr std::size_t kQ4Qs = kQBlock / 2;

}  // namespace

// Q8_0R: each level stored as the unsigned byte q ^ 0x80, then the group's scales.
void repack_row_q8_0(const BlockQ8_0* src, std::byte* dst, std::int64_t nb) noexcept {
  for_each_repacked_block(nb, sizeof(BlockQ8_0), kQBlock, [&](std::int64_t b, std::size_t group, int, int i, std::size_t scale) {
    const std::size_t levels = group + static_cast<std::size_t>(kQBlock * i);
    for (int e = 0; e < kQBlock; ++e) {
      dst[levels + static_cast<std::size_t>(e)] = static_cast<std::byte>(static_cast<std::uint8_t>(src[b].qs[e]) ^ 0x80u);
    }
    std::memcpy(dst + scale, &src[b].d, 2);
  });
}

void unpack_row_q8_0r(const std::byte* src, BlockQ8_0* dst, std::int64_t nb) noexcept {
  for_each_repacked_block(nb, sizeof(BlockQ8_0), kQBlock, [&](std::int64_t b, std::size_t group, int, int i, std::size_t scale) {
    const std::size_t levels = group + static_cast<std::size_t>(kQBlock * i);
    for (int e = 0; e < kQBlock; ++e) {
      dst[b].qs[e] = static_cast<std::int8_t>(static_cast<std::uint8_t>(src[levels + static_cast<std::size_t>(e)]) ^ 0x80u);
    }
    std::memcpy(&dst[b].d, src + scale, 2);
  });
}

// Q8_0P: per group, block i's levels transposed into 8 vectors of 4-level words (lane = row), then
// the group's 16-row scale arrays.
void repack_tile_q8_0p(const std::byte* src, std::size_t src_stride, std::byte* dst, std::int64_t nb) noexcept {
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const Q8PanelGroup group = q8_0p_group(g, nb);
    for (int r = 0; r < kTileRows; ++r) {
      const auto* row = reinterpret_cast<const BlockQ8_0*>(src + static_cast<std::size_t>(r) * src_stride);
      for (int i = 0; i < group.blocks; ++i) {
        const BlockQ8_0& block = row[g * kRepackGroupBlocks + i];
        std::byte* levels = dst + group.levels + 512 * static_cast<std::size_t>(i) + 4 * static_cast<std::size_t>(r);
        for (int e = 0; e < kQBlock; ++e) {
          levels[64 * (e / 4) + e % 4] = static_cast<std::byte>(static_cast<std::uint8_t>(block.qs[e]) ^ 0x80u);
        }
        std::memcpy(dst + group.scales + 32 * static_cast<std::size_t>(i) + 2 * static_cast<std::size_t>(r), &block.d,
                    2);
      }
    }
  }
}

void unpack_tile_row_q8_0p(const std::byte* src, int lane, BlockQ8_0* dst, std::int64_t nb) noexcept {
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const Q8PanelGroup group = q8_0p_group(g, nb);
    for (int i = 0; i < group.blocks; ++i) {
      BlockQ8_0& block = dst[g * kRepackGroupBlocks + i];
      const std::byte* levels =
          src + group.levels + 512 * static_cast<std::size_t>(i) + 4 * static_cast<std::size_t>(lane);
      for (int e = 0; e < kQBlock; ++e) {
        block.qs[e] = static_cast<std::int8_t>(static_cast<std::uint8_t>(levels[64 * (e / 4) + e % 4]) ^ 0x80u);
      }
      std::memcpy(&block.d, src + group.scales + 32 * static_cast<std::size_t>(i) + 2 * static_cast<std::size_t>(lane),
                  2);
    }
  }
}

// Q4_0R: the GGUF qs of a group's blocks interleaved by words in units of 16, then their scales.
void repack_row_q4_0(const BlockQ4_0* src, std::byte* dst, std::int64_t nb) noexcept {
  for_each_repacked_block(nb, sizeof(BlockQ4_0), kQ4Qs, [&](std::int64_t b, std::size_t group, int t, int i, std::size_t scale) {
    for (int j = 0; j < 4; ++j) std::memcpy(dst + group + q4_0r_word_offset(t, i, j), src[b].qs + 4 * j, 4);
    std::memcpy(dst + scale, &src[b].d, 2);
  });
}

void unpack_row_q4_0r(const std::byte* src, BlockQ4_0* dst, std::int64_t nb) noexcept {
  for_each_repacked_block(nb, sizeof(BlockQ4_0), kQ4Qs, [&](std::int64_t b, std::size_t group, int t, int i, std::size_t scale) {
    for (int j = 0; j < 4; ++j) std::memcpy(dst[b].qs + 4 * j, src + group + q4_0r_word_offset(t, i, j), 4);
    std::memcpy(&dst[b].d, src + scale, 2);
  });
}

// Q4_KR: each super-block's levels regrouped per sub-block and interleaved by words across the
// unit, its scales and mins as plain 6-bit fields.
namespace {

// 8 six-bit values <-> 6 bytes, value s at bits 6 s .. 6 s + 5.
void pack_six_bits(const int* v, std::byte* out) noexcept {
  std::uint64_t bits = 0;
  for (int s = 0; s < 8; ++s) bits |= static_cast<std::uint64_t>(v[s] & 63) << (6 * s);
  for (int k = 0; k < 6; ++k) out[k] = static_cast<std::byte>(bits >> (8 * k));
}
void unpack_six_bits(const std::byte* in, int* v) noexcept {
  std::uint64_t bits = 0;
  for (int k = 0; k < 6; ++k) bits |= static_cast<std::uint64_t>(in[k]) << (8 * k);
  for (int s = 0; s < 8; ++s) v[s] = static_cast<int>((bits >> (6 * s)) & 63);
}
// Stored Q4_K: element e of sub-block s is nibble s % 2 of byte 32 (s / 2) + e.
std::size_t q4_k_level_byte(int s, int e) noexcept {
  return static_cast<std::size_t>(32 * (s / 2) + e);
}

}  // namespace

void repack_row_q4_k(const BlockQ4_K* src, std::byte* dst, std::int64_t nb) noexcept {
  for (std::int64_t u = 0; kQ4KRepackUnitBlocks * u < nb; ++u) {
    const Q4KUnit unit = q4_k_unit(u, nb);
    for (int k = 0; k < unit.blocks; ++k) {
      const BlockQ4_K& b = src[kQ4KRepackUnitBlocks * u + k];
      int sc[8], m[8];
      for (int s = 0; s < 8; ++s) {
        const ScaleMin sm = unpack_scale_min_k4(b.scales, s);
        sc[s] = sm.scale;
        m[s] = sm.min;
        std::uint8_t levels[16];
        for (int e = 0; e < 16; ++e) {
          const int shift = 4 * (s % 2);
          levels[e] = static_cast<std::uint8_t>(((b.qs[q4_k_level_byte(s, e)] >> shift) & 15) |
                                                (((b.qs[q4_k_level_byte(s, e + 16)] >> shift) & 15) << 4));
        }
        const int i = 8 * k + s;
        for (int j = 0; j < 4; ++j) {
          std::memcpy(dst + unit.levels + static_cast<std::size_t>(4 * (8 * unit.blocks * j + i)), levels + 4 * j, 4);
        }
      }
      pack_six_bits(sc, dst + unit.scales + 6 * static_cast<std::size_t>(k));
      pack_six_bits(m, dst + unit.mins + 6 * static_cast<std::size_t>(k));
      std::memcpy(dst + unit.d + 2 * static_cast<std::size_t>(k), &b.d, 2);
      std::memcpy(dst + unit.dmin + 2 * static_cast<std::size_t>(k), &b.dmin, 2);
    }
  }
}

void unpack_row_q4_kr(const std::byte* src, BlockQ4_K* dst, std::int64_t nb) noexcept {
  for (std::int64_t u = 0; kQ4KRepackUnitBlocks * u < nb; ++u) {
    const Q4KUnit unit = q4_k_unit(u, nb);
    for (int k = 0; k < unit.blocks; ++k) {
      BlockQ4_K& b = dst[kQ4KRepackUnitBlocks * u + k];
      std::memset(b.qs, 0, sizeof(b.qs));
      for (int s = 0; s < 8; ++s) {
        std::uint8_t levels[16];
        const int i = 8 * k + s;
        for (int j = 0; j < 4; ++j) {
          std::memcpy(levels + 4 * j, src + unit.levels + static_cast<std::size_t>(4 * (8 * unit.blocks * j + i)), 4);
        }
        const int shift = 4 * (s % 2);
        for (int e = 0; e < 16; ++e) {
          b.qs[q4_k_level_byte(s, e)] |= static_cast<std::uint8_t>((levels[e] & 15) << shift);
          b.qs[q4_k_level_byte(s, e + 16)] |= static_cast<std::uint8_t>((levels[e] >> 4) << shift);
        }
      }
      int sc[8], m[8];
      unpack_six_bits(src + unit.scales + 6 * static_cast<std::size_t>(k), sc);
      unpack_six_bits(src + unit.mins + 6 * static_cast<std::size_t>(k), m);
      pack_scale_min_k4(sc, m, b.scales);
      std::memcpy(&b.d, src + unit.d + 2 * static_cast<std::size_t>(k), 2);
      std::memcpy(&b.dmin, src + unit.dmin + 2 * static_cast<std::size_t>(k), 2);
    }
  }
}

// FP8R: the codes of a group back to back (fp8r_code), then s and the relative scales r_i = d_i / s.
namespace {

// r = d / s rounded to fp16; true when s * r gives d back exactly.
bool relative_scale(float d, float s, std::uint16_t& r) noexcept {
  r = fp32_to_fp16(s != 0.0f ? d / s : 0.0f);
  return s * fp16_to_fp32(r) == d;
}

// The group scale s for blocks b[0, t) and their r_i; false when no candidate is exact.
bool split_scales(const BlockFP8_E4M3* b, int t, float& s, std::uint16_t* r) noexcept {
  float largest = 0.0f;
  for (int i = 0; i < t; ++i) largest = std::fmax(largest, std::fabs(b[i].d));
  int e = 0;
  const float m = std::frexp(largest, &e);  // largest = m 2^e, m in [0.5, 1)
  const float power = m == 0.5f ? largest : std::ldexp(1.0f, e);  // the least 2^j >= largest
  for (const float candidate : {power, largest}) {
    s = candidate;
    bool exact = true;
    for (int i = 0; i < t; ++i) exact = relative_scale(b[i].d, s, r[i]) && exact;
    if (exact) return true;
  }
  s = power;
  for (int i = 0; i < t; ++i) relative_scale(b[i].d, s, r[i]);
  return false;
}

}  // namespace

bool repack_row_fp8(const BlockFP8_E4M3* src, std::byte* dst, std::int64_t nb) noexcept {
  bool exact = true;
  for (std::int64_t g = 0; g * kFp8RepackGroupBlocks < nb; ++g) {
    const RepackGroup group = fp8_repack_group(g, nb);
    const BlockFP8_E4M3* b = src + g * kFp8RepackGroupBlocks;
    std::byte* at = dst + group.offset;
    const std::size_t codes = static_cast<std::size_t>(group.blocks) * kFp8Block;
    for (int i = 0; i < group.blocks; ++i) {
      for (int e = 0; e < kFp8Block; ++e) at[static_cast<std::size_t>(kFp8Block * i + e)] = static_cast<std::byte>(fp8r_code(b[i].qs[e]));
    }
    if (group.blocks == 1) {
      std::memcpy(at + codes, &b[0].d, 4);
      continue;
    }
    float s = 0.0f;
    std::uint16_t r[kFp8RepackGroupBlocks];
    exact = split_scales(b, group.blocks, s, r) && exact;
    std::memcpy(at + codes, &s, 4);
    std::memcpy(at + codes + 4, r, 2 * static_cast<std::size_t>(group.blocks));
    std::memset(at + codes + 4 + 2 * static_cast<std::size_t>(group.blocks), 0,
                2 * static_cast<std::size_t>(group.blocks) - 4);
  }
  return exact;
}

void unpack_row_fp8r(const std::byte* src, BlockFP8_E4M3* dst, std::int64_t nb) noexcept {
  for (std::int64_t g = 0; g * kFp8RepackGroupBlocks < nb; ++g) {
    const RepackGroup group = fp8_repack_group(g, nb);
    BlockFP8_E4M3* b = dst + g * kFp8RepackGroupBlocks;
    const std::byte* at = src + group.offset;
    const std::size_t codes = static_cast<std::size_t>(group.blocks) * kFp8Block;
    float s = 0.0f;
    std::memcpy(&s, at + codes, 4);
    for (int i = 0; i < group.blocks; ++i) {
      for (int e = 0; e < kFp8Block; ++e) b[i].qs[e] = e4m3_code(static_cast<std::uint8_t>(at[static_cast<std::size_t>(kFp8Block * i + e)]));
      std::uint16_t r = 0x3C00;  // 1.0: a one-block group stores d itself
      if (group.blocks > 1) std::memcpy(&r, at + codes + 4 + 2 * static_cast<std::size_t>(i), 2);
      b[i].d = s * fp16_to_fp32(r);
    }
  }
}

namespace {

// Repacked rows go through their stored format one group at a time (a group is self-contained).
void dequantize_repacked(WeightLayout layout, const void* src, float* dst, std::int64_t nb) {
  if (layout == WeightLayout::kFP8_E4M3R) {
    for (std::int64_t g = 0; g * kFp8RepackGroupBlocks < nb; ++g) {
      const RepackGroup group = fp8_repack_group(g, nb);
      BlockFP8_E4M3 blocks[kFp8RepackGroupBlocks];
      unpack_row_fp8r(static_cast<const std::byte*>(src) + group.offset, blocks, group.blocks);
      sitsrt::dequantize_row(DType::kFP8_E4M3, blocks, dst + g * kRepackGroupElements, group.blocks * kFp8Block);
    }
    return;
  }
  if (layout == WeightLayout::kQ4_KR) {  // one unit of 2 super-blocks at a time
    for (std::int64_t u = 0; kQ4KRepackUnitBlocks * u < nb; ++u) {
      const Q4KUnit unit = q4_k_unit(u, nb);
      BlockQ4_K blocks[kQ4KRepackUnitBlocks];
      unpack_row_q4_kr(static_cast<const std::byte*>(src) + unit.levels, blocks, unit.blocks);
      sitsrt::dequantize_row(DType::kQ4_K, blocks, dst + u * kQ4KRepackUnitBlocks * kSuperBlock,
                             unit.blocks * kSuperBlock);
    }
    return;
  }
  const std::size_t block_bytes = static_cast<std::size_t>(traits(stored_type(layout)).block_bytes);
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const RepackGroup group = repack_group(g, nb, block_bytes);
    const auto* at = static_cast<const std::byte*>(src) + group.offset;
    float* out = dst + g * kRepackGroupElements;
    if (layout == WeightLayout::kQ8_0R) {
      BlockQ8_0 blocks[kRepackGroupBlocks];
      unpack_row_q8_0r(at, blocks, group.blocks);
      sitsrt::dequantize_row(DType::kQ8_0, blocks, out, group.blocks * kQBlock);
    } else {
      BlockQ4_0 blocks[kRepackGroupBlocks];
      unpack_row_q4_0r(at, blocks, group.blocks);
      sitsrt::dequantize_row(DType::kQ4_0, blocks, out, group.blocks * kQBlock);
    }
  }
}

void quantize_repacked(WeightLayout layout, const float* src, void* dst, std::int64_t nb) {
  if (layout == WeightLayout::kFP8_E4M3R) {  // exact: the encoder's scales have 11 significant bits
    for (std::int64_t g = 0; g * kFp8RepackGroupBlocks < nb; ++g) {
      const RepackGroup group = fp8_repack_group(g, nb);
      BlockFP8_E4M3 blocks[kFp8RepackGroupBlocks];
      sitsrt::quantize_row(DType::kFP8_E4M3, src + g * kRepackGroupElements, blocks, group.blocks * kFp8Block);
      repack_row_fp8(blocks, static_cast<std::byte*>(dst) + group.offset, group.blocks);
    }
    return;
  }
  if (layout == WeightLayout::kQ4_KR) {
    for (std::int64_t u = 0; kQ4KRepackUnitBlocks * u < nb; ++u) {
      const Q4KUnit unit = q4_k_unit(u, nb);
      BlockQ4_K blocks[kQ4KRepackUnitBlocks];
      sitsrt::quantize_row(DType::kQ4_K, src + u * kQ4KRepackUnitBlocks * kSuperBlock, blocks,
                           unit.blocks * kSuperBlock);
      repack_row_q4_k(blocks, static_cast<std::byte*>(dst) + unit.levels, unit.blocks);
    }
    return;
  }
  const std::size_t block_bytes = static_cast<std::size_t>(traits(stored_type(layout)).block_bytes);
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const RepackGroup group = repack_group(g, nb, block_bytes);
    auto* at = static_cast<std::byte*>(dst) + group.offset;
    const float* in = src + g * kRepackGroupElements;
    if (layout == WeightLayout::kQ8_0R) {
      BlockQ8_0 blocks[kRepackGroupBlocks];
      sitsrt::quantize_row(DType::kQ8_0, in, blocks, group.blocks * kQBlock);
      repack_row_q8_0(blocks, at, group.blocks);
    } else {
      BlockQ4_0 blocks[kRepackGroupBlocks];
      sitsrt::quantize_row(DType::kQ4_0, in, blocks, group.blocks * kQBlock);
      repack_row_q4_0(blocks, at, group.blocks);
    }
  }
}

// Repacked layouts have their stored format's blocks (fits_blocks), checked as the stored rows are.
std::int64_t whole_blocks(WeightLayout layout, std::int64_t n) {
  const DTypeTraits& t = traits(stored_type(layout));
  if (!fits_blocks(layout, n)) {
    raise(ErrorCode::kInvalidArgument, "{}: row of {} elements is not a multiple of {}", name(layout), n, t.block_size);
  }
  return n / t.block_size;
}

// A tiled layout's row has no bytes of its own (matrix-wide: copy_to_layout, dequantize_matrix_row).
void refuse_tiled(WeightLayout layout, const char* op) {
  if (is_tiled(layout)) {
    raise(ErrorCode::kInvalidArgument, "{}: {} rows are interleaved in {}-row tiles (convert whole matrices)", op,
          name(layout), kTileRows);
  }
}

}  // namespace

void dequantize_row(WeightLayout layout, const void* src, float* dst, std::int64_t n) {
  refuse_tiled(layout, "dequantize_row");
  if (!is_repacked(layout)) return sitsrt::dequantize_row(stored_type(layout), src, dst, n);
  dequantize_repacked(layout, src, dst, whole_blocks(layout, n));
}

void quantize_row(WeightLayout layout, const float* src, void* dst, std::int64_t n) {
  refuse_tiled(layout, "quantize_row");
  if (!is_repacked(layout)) return sitsrt::quantize_row(stored_type(layout), src, dst, n);
  quantize_repacked(layout, src, dst, whole_blocks(layout, n));
}

}  // namespace sitsrt::cpu
