// Registry of element and weight formats: block size, bytes per block, name.
// Quantized formats store `block_size` consecutive elements of a row in one block. These are the
// formats files hold; a backend's own in-memory layouts (such as the CPU kernels' repacked ones)
// are not DTypes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sitsrt {

enum class DType : std::uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // 32 x int8 + fp16 scale (INT8 g32 symmetric)
  kQ4_0,  // 32 x 4-bit + fp16 scale, offset 8 (INT4 g32 symmetric)
  kQ4_1,  // 32 x 4-bit + fp16 scale + fp16 min
  kQ5_0,  // 32 x 5-bit + fp16 scale, offset 16
  kQ5_1,  // 32 x 5-bit + fp16 scale + fp16 min
  kFP8_E4M3,  // 64 x OCP FP8 E4M3FN + fp32 scale (per-channel checkpoints repeat theirs per block)
  kQ4_G128,   // 128 x 4-bit + fp16 scale + 4-bit zero (INT4 g128 asymmetric, AWQ/GPTQ)
  // K-quants (256-element super-blocks) and IQ4_NL; layouts in core/kquant_blocks.hpp.
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,
  kIQ4_NL,
};

inline constexpr int kDTypeCount = 17;

struct DTypeTraits {
  std::string_view name;  // lower-case, as used on the command line and in JSON ("q8_0")
  int block_size;         // elements per block (1 for plain floats)
  int block_bytes;        // bytes per block
  bool quantized;
};

const DTypeTraits& traits(DType type) noexcept;
inline std::string_view name(DType type) noexcept { return traits(type).name; }

// Parses a name such as "f16" or "Q8_0" (case-insensitive).
std::optional<DType> dtype_from_name(std::string_view name) noexcept;

// Bytes of `n` consecutive elements; throws kInvalidArgument when n is not a whole number of blocks.
std::size_t row_bytes(DType type, std::int64_t n);

// True when `n` elements form whole blocks of `type`.
bool fits_blocks(DType type, std::int64_t n) noexcept;

}  // namespace sitsrt
