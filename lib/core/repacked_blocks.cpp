#include "core/repacked_blocks.hpp"

#include <cstring>

namespace sitsrt {

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

// Q4_0R: the GGUF qs of a group's blocks back to back, then their scales.
void repack_row_q4_0(const BlockQ4_0* src, std::byte* dst, std::int64_t nb) noexcept {
  constexpr int kQs = kQBlock / 2;
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const RepackGroup group = repack_group(g, nb, sizeof(BlockQ4_0));
    std::byte* levels = dst + group.offset;
    std::byte* scales = levels + static_cast<std::size_t>(group.blocks) * kQs;
    const BlockQ4_0* blocks = src + g * kRepackGroupBlocks;
    for (int i = 0; i < group.blocks; ++i) {
      std::memcpy(levels + kQs * i, blocks[i].qs, kQs);
      std::memcpy(scales + 2 * i, &blocks[i].d, 2);
    }
  }
}

void unpack_row_q4_0r(const std::byte* src, BlockQ4_0* dst, std::int64_t nb) noexcept {
  constexpr int kQs = kQBlock / 2;
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const RepackGroup group = repack_group(g, nb, sizeof(BlockQ4_0));
    const std::byte* levels = src + group.offset;
    const std::byte* scales = levels + static_cast<std::size_t>(group.blocks) * kQs;
    BlockQ4_0* blocks = dst + g * kRepackGroupBlocks;
    for (int i = 0; i < group.blocks; ++i) {
      std::memcpy(blocks[i].qs, levels + kQs * i, kQs);
      std::memcpy(&blocks[i].d, scales + 2 * i, 2);
    }
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
