#include "core/repacked_blocks.hpp"

#include <cstring>

namespace sitsrt {

namespace {

// Calls visit(i, levels, scale) for block i of a row of nb blocks, with the offsets of its
// levels (level_bytes of them) and of its fp16 scale in the repacked row.
template <typename Visit>
void for_each_repacked_block(std::int64_t nb, std::size_t block_bytes, std::size_t level_bytes, Visit&& visit) {
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const RepackGroup group = repack_group(g, nb, block_bytes);
    const std::size_t scales = group.offset + static_cast<std::size_t>(group.blocks) * level_bytes;
    for (int i = 0; i < group.blocks; ++i) {
      visit(g * kRepackGroupBlocks + i, group.offset + static_cast<std::size_t>(i) * level_bytes,
            scales + 2 * static_cast<std::size_t>(i));
    }
  }
}

constexpr std::size_t kQ4Qs = kQBlock / 2;

}  // namespace

// Q8_0R: each level stored as the unsigned byte q ^ 0x80, then the group's scales.
void repack_row_q8_0(const BlockQ8_0* src, std::byte* dst, std::int64_t nb) noexcept {
  for_each_repacked_block(nb, sizeof(BlockQ8_0), kQBlock, [&](std::int64_t b, std::size_t levels, std::size_t scale) {
    for (int e = 0; e < kQBlock; ++e) {
      dst[levels + static_cast<std::size_t>(e)] = static_cast<std::byte>(static_cast<std::uint8_t>(src[b].qs[e]) ^ 0x80u);
    }
    std::memcpy(dst + scale, &src[b].d, 2);
  });
}

void unpack_row_q8_0r(const std::byte* src, BlockQ8_0* dst, std::int64_t nb) noexcept {
  for_each_repacked_block(nb, sizeof(BlockQ8_0), kQBlock, [&](std::int64_t b, std::size_t levels, std::size_t scale) {
    for (int e = 0; e < kQBlock; ++e) {
      dst[b].qs[e] = static_cast<std::int8_t>(static_cast<std::uint8_t>(src[levels + static_cast<std::size_t>(e)]) ^ 0x80u);
    }
    std::memcpy(&dst[b].d, src + scale, 2);
  });
}

// Q4_0R: the GGUF qs of a group's blocks back to back, then their scales.
void repack_row_q4_0(const BlockQ4_0* src, std::byte* dst, std::int64_t nb) noexcept {
  for_each_repacked_block(nb, sizeof(BlockQ4_0), kQ4Qs, [&](std::int64_t b, std::size_t levels, std::size_t scale) {
    std::memcpy(dst + levels, src[b].qs, kQ4Qs);
    std::memcpy(dst + scale, &src[b].d, 2);
  });
}

void unpack_row_q4_0r(const std::byte* src, BlockQ4_0* dst, std::int64_t nb) noexcept {
  for_each_repacked_block(nb, sizeof(BlockQ4_0), kQ4Qs, [&](std::int64_t b, std::size_t levels, std::size_t scale) {
    std::memcpy(dst[b].qs, src + levels, kQ4Qs);
    std::memcpy(&dst[b].d, src + scale, 2);
  });
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
