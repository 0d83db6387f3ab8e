#include "core/repacked_blocks.hpp"

#include <cstring>

namespace sitsrt {
namespace {

// Element e (0..31) of a Q4_0 block as its 4-bit level.
std::uint8_t q4_level(const BlockQ4_0& b, int e) noexcept {
  return e < 16 ? b.qs[e] & 0x0F : b.qs[e - 16] >> 4;
}

}  // namespace

void repack_row_q8_0(const BlockQ8_0* src, std::byte* dst, std::int64_t nb) noexcept {
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const RepackGroup group = repack_group(g, nb, sizeof(BlockQ8_0));
    std::byte* levels = dst + group.offset;
    std::byte* scales = levels + static_cast<std::size_t>(group.blocks) * kQBlock;
    const BlockQ8_0* blocks = src + g * kRepackGroupBlocks;
    for (int i = 0; i < group.blocks; ++i) {
      for (int e = 0; e < kQBlock; ++e) {
        levels[i * kQBlock + e] = static_cast<std::byte>(static_cast<std::uint8_t>(blocks[i].qs[e]) ^ 0x80u);
      }
      std::memcpy(scales + 2 * i, &blocks[i].d, 2);
    }
  }
}

void unpack_row_q8_0r(const std::byte* src, BlockQ8_0* dst, std::int64_t nb) noexcept {
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const RepackGroup group = repack_group(g, nb, sizeof(BlockQ8_0));
    const std::byte* levels = src + group.offset;
    const std::byte* scales = levels + static_cast<std::size_t>(group.blocks) * kQBlock;
    BlockQ8_0* blocks = dst + g * kRepackGroupBlocks;
    for (int i = 0; i < group.blocks; ++i) {
      for (int e = 0; e < kQBlock; ++e) {
        blocks[i].qs[e] = static_cast<std::int8_t>(static_cast<std::uint8_t>(levels[i * kQBlock + e]) ^ 0x80u);
      }
      std::memcpy(&blocks[i].d, scales + 2 * i, 2);
    }
  }
}

void repack_row_q4_0(const BlockQ4_0* src, std::byte* dst, std::int64_t nb) noexcept {
  constexpr int kQs = kQBlock / 2;
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const RepackGroup group = repack_group(g, nb, sizeof(BlockQ4_0));
    auto* levels = reinterpret_cast<std::uint8_t*>(dst + group.offset);
    std::byte* scales = dst + group.offset + static_cast<std::size_t>(group.blocks) * kQs;
    const BlockQ4_0* blocks = src + g * kRepackGroupBlocks;
    const int quads = group.blocks / 4;
    for (int j = 0; j < quads; ++j) {
      for (int k = 0; k < 64; ++k) {
        const int low_block = 4 * j + k / 32, high_block = low_block + 2;
        levels[64 * j + k] = static_cast<std::uint8_t>(q4_level(blocks[low_block], k % 32) |
                                                       q4_level(blocks[high_block], k % 32) << 4);
      }
    }
    for (int i = 4 * quads; i < group.blocks; ++i) std::memcpy(levels + kQs * i, blocks[i].qs, kQs);
    for (int i = 0; i < group.blocks; ++i) std::memcpy(scales + 2 * i, &blocks[i].d, 2);
  }
}

void unpack_row_q4_0r(const std::byte* src, BlockQ4_0* dst, std::int64_t nb) noexcept {
  constexpr int kQs = kQBlock / 2;
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const RepackGroup group = repack_group(g, nb, sizeof(BlockQ4_0));
    const auto* levels = reinterpret_cast<const std::uint8_t*>(src + group.offset);
    const std::byte* scales = src + group.offset + static_cast<std::size_t>(group.blocks) * kQs;
    BlockQ4_0* blocks = dst + g * kRepackGroupBlocks;
    const int quads = group.blocks / 4;
    for (int j = 0; j < quads; ++j) {
      for (int b = 0; b < 4; ++b) {
        // Block 4j + b sits in bytes 32 (b % 2) .. + 31, low nibbles for b < 2, high for b >= 2.
        const std::uint8_t* run = levels + 64 * j + 32 * (b % 2);
        const int shift = b < 2 ? 0 : 4;
        for (int e = 0; e < kQs; ++e) {
          const auto lo = static_cast<std::uint8_t>((run[e] >> shift) & 0x0F);
          const auto hi = static_cast<std::uint8_t>((run[e + kQs] >> shift) & 0x0F);
          blocks[4 * j + b].qs[e] = static_cast<std::uint8_t>(lo | hi << 4);
        }
      }
    }
    for (int i = 4 * quads; i < group.blocks; ++i) std::memcpy(blocks[i].qs, levels + kQs * i, kQs);
    for (int i = 0; i < group.blocks; ++i) std::memcpy(&blocks[i].d, scales + 2 * i, 2);
  }
}

DType stored_format_of(DType type) noexcept {
  switch (type) {
    case DType::kQ8_0R: return DType::kQ8_0;
    case DType::kQ4_0R: return DType::kQ4_0;
    default: return type;
  }
}

DType repacked_format_of(DType type) noexcept {
  switch (type) {
    case DType::kQ8_0: return DType::kQ8_0R;
    case DType::kQ4_0: return DType::kQ4_0R;
    default: return type;
  }
}

}  // namespace sitsrt
