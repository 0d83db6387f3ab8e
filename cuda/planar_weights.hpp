// The planar device layout of weight matrices, made at load from the stored blocks (68, 34, 18,
// 144 and 210 bytes each, so not 16-byte aligned): every row's codes back to back in one plane,
// then every row's per-block side data (scales, mins) in a second plane. A lane of the decode
// kernels reads a unit of codes with 16-byte loads and the unit's side data from the small plane.
// Same bytes in total as the stored rows, so a matrix keeps its place in the weight allocation.
//
//   format      unit: elements / code bytes   side record (bytes) per          codes of a stored block
//   FP8 E4M3    16 / 16 (byte codes)          f32 scale (4) per 4 units        bytes 4..67 of 68
//   INT4 g128   32 / 16 (nibbles)             f16 scale | zero << 16 (4) per 4 bytes 4..67 of 68
//   Q8_0        16 / 16 (byte codes)          f16 scale (2) per 2 units        bytes 2..33 of 34
//   Q4_0        32 / 16 (nibbles)             f16 scale (2) per unit           bytes 2..17 of 18
//   IQ4_NL      as Q4_0 (nibbles index its 16 levels)
//   Q4_1        32 / 16 (nibbles)             f16 scale, f16 min (4) per unit  bytes 4..19 of 20
//   Q5_0        32 / 16 (nibbles)             f16 scale, fifth bits (6) per    bytes 6..21 of 22
//                                             unit
//   Q5_1        32 / 16 (nibbles)             scale, min, fifth bits (8) per   bytes 8..23 of 24
//                                             unit
//   Q4_K        32 / 16 (nibbles)             d, dmin, 12 packed bytes (16)    bytes 16..143 of 144
//                                             per 8 units
//   Q5_K        32 / 16 (nibbles)             Q4_K's 16, then 32 bytes of      bytes 48..175 of 176
//                                             fifth bits (48) per 8 units
//   Q6_K        64 / 48 (3 loads: 2 of low    16 int8 scales, f16 d (18)       bytes 0..191 of 210
//               nibbles, 1 of high bit pairs)  per 4 units
//   F16, BF16   8 / 16                        none                             the row
//
// Nibble units keep the stored nibble order: Q4_0 / Q4_1 / Q5_x / INT4 g128 byte i holds elements
// i and i + 16 of a 32-element (sub-)block; Q4_K / Q5_K byte i of a 16-byte half of its 32-byte
// group holds elements i and i + 32 of the group's 64.
//
// Host and device share this header (SITSRT_HD); tests/unit/cuda_formats_test.cpp checks on the
// CPU that planar_element equals decode_element of the stored row, bit for bit.
#pragma once

#include "cuda_backend/device_formats.hpp"

#include <cstring>
#include <optional>
#include <vector>

namespace sitsrt::cuda {

// What one unit of a planar format is (table above).
struct PlanarUnit {
  int elements = 0;        // elements a unit decodes
  int code_bytes = 16;     // its codes (16-byte loads)
  int units_per_side = 0;  // units sharing one side record; 0: no side data
  int side_bytes = 0;      // bytes of one side record
  int block_elements = 1;  // elements of one stored block
  int block_bytes = 0;     // bytes of one stored block
  int side_offset = 0;     // where the side data starts in a stored block (copied as is, but INT4 g128)
  int code_offset = 0;     // where the codes start in a stored block
};

SITSRT_HD PlanarUnit planar_unit(DType format) {
  switch (format) {
    case DType::kFP8_E4M3:
      return {16, 16, 4, 4, 64, 68, 0, 4};
    case DType::kQ4_G128:
      return {32, 16, 4, 4, 128, 68, 0, 4};
    case DType::kQ8_0:
      return {16, 16, 2, 2, 32, 34, 0, 2};
    case DType::kQ4_0:
    case DType::kIQ4_NL:  // Q4_0's layout, the nibbles index a table of levels
      return {32, 16, 1, 2, 32, 18, 0, 2};
    case DType::kQ4_1:
      return {32, 16, 1, 4, 32, 20, 0, 4};
    case DType::kQ5_0:
      return {32, 16, 1, 6, 32, 22, 0, 6};
    case DType::kQ5_1:
      return {32, 16, 1, 8, 32, 24, 0, 8};
    case DType::kQ4_K:
      return {32, 16, 8, 16, 256, 144, 0, 16};
    case DType::kQ5_K:
      return {32, 16, 8, 48, 256, 176, 0, 48};
    case DType::kQ6_K:
      return {64, 48, 4, 18, 256, 210, 192, 0};
    case DType::kF16:
    case DType::kBF16:
      return {8, 16, 0, 0, 1, 2, 0, 0};
    default:
      return {};
  }
}

// Whether format F with rows of `cols` elements has the planar layout (rows of whole blocks and
// of whole units).
SITSRT_HD bool planar_supports(DType format, std::int64_t cols) {
  const PlanarUnit u = planar_unit(format);
  if (u.elements == 0 || cols <= 0) return false;
  const std::int64_t whole = u.block_elements > u.elements ? u.block_elements : u.elements;
  return cols % whole == 0;
}

// Plane geometry of an n x cols matrix: codes at data[0, n * code_row_bytes), units of
// unit.code_bytes each; then the side records, scale_row_bytes per row from data + scales_offset.
struct PlanarGeometry {
  std::int64_t code_row_bytes = 0;
  std::int64_t scale_row_bytes = 0;
  std::int64_t scales_offset = 0;
  std::int64_t units = 0;  // per row
  [[nodiscard]] SITSRT_HD std::int64_t scales_of(std::int64_t row) const {
    return scales_offset + row * scale_row_bytes;
  }
};

SITSRT_HD PlanarGeometry planar_geometry(DType format, std::int64_t rows, std::int64_t cols) {
  const PlanarUnit u = planar_unit(format);
  PlanarGeometry g;
  g.units = cols / u.elements;
  g.code_row_bytes = g.units * u.code_bytes;
  g.scale_row_bytes = u.units_per_side == 0 ? 0 : g.units / u.units_per_side * u.side_bytes;
  g.scales_offset = rows * g.code_row_bytes;  // a multiple of 16: the side plane starts aligned
  return g;
}

// Moves one stored row (row_bytes(format, cols) bytes) into its place in the planes.
inline void planar_pack_row(DType format, const std::uint8_t* stored, std::int64_t cols, std::uint8_t* codes,
                            std::uint8_t* scales) {
  const PlanarUnit u = planar_unit(format);
  if (u.units_per_side == 0) {  // float rows: the codes are the row
    std::memcpy(codes, stored, static_cast<std::size_t>(cols * u.block_bytes));
    return;
  }
  const std::int64_t blocks = cols / u.block_elements;
  const std::int64_t code_bytes = u.block_bytes - u.side_bytes;  // per block
  const std::int64_t sides_per_block = u.block_elements / (u.units_per_side * u.elements);
  const std::int64_t side_bytes = sides_per_block * u.side_bytes;  // the whole block's side data
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* block = stored + b * u.block_bytes;
    if (format == DType::kQ4_G128) {
      const std::uint32_t word = static_cast<std::uint32_t>(load_u16(block)) | static_cast<std::uint32_t>(block[2] & 15)
                                                                                   << 16;
      std::memcpy(scales + 4 * b, &word, 4);  // little-endian hosts, as the device
    } else {
      std::memcpy(scales + b * side_bytes, block + u.side_offset, static_cast<std::size_t>(side_bytes));
    }
    std::memcpy(codes + b * code_bytes, block + u.code_offset, static_cast<std::size_t>(code_bytes));
  }
}

// The value of element e of planar row (codes, scales): the float decode_element gives for the
// stored row, bit for bit.
template <DType F>
SITSRT_HD float planar_element(const std::uint8_t* codes, const std::uint8_t* scales, std::int64_t e) {
  if constexpr (F == DType::kFP8_E4M3) {
    return bits_float(load_u32(scales + 4 * (e / 64))) * fp8_e4m3_to_float(codes[e]);
  } else if constexpr (F == DType::kQ8_0) {
    return half_to_float(load_u16(scales + 2 * (e / 32))) * static_cast<float>(static_cast<std::int8_t>(codes[e]));
  } else if constexpr (F == DType::kF16) {
    return half_to_float(load_u16(codes + 2 * e));
  } else if constexpr (F == DType::kBF16) {
    return bf16_to_float(load_u16(codes + 2 * e));
  } else if constexpr (F == DType::kQ4_K || F == DType::kQ5_K) {
    // the stored block's d, dmin and packed scales (Q5_K: then its fifth bits), then its 128
    // bytes of nibbles
    constexpr int kSide = F == DType::kQ4_K ? 16 : 48;
    const std::uint8_t* side = scales + kSide * (e / 256);
    const int j = static_cast<int>(e % 256), s = j / 32, l = j % 32;
    int scale = 0, min = 0;
    unpack_scale_min_k4(side + 4, s, &scale, &min);
    int q = (codes[128 * (e / 256) + 32 * (j / 64) + l] >> (4 * (s % 2))) & 15;
    if constexpr (F == DType::kQ5_K) q |= ((side[16 + l] >> s) & 1) << 4;
    const float dl = mul_rn(half_to_float(load_u16(side)), static_cast<float>(scale));
    const float ml = mul_rn(half_to_float(load_u16(side + 2)), static_cast<float>(min));
    return mul_rn(dl, static_cast<float>(q)) - ml;
  } else if constexpr (F == DType::kQ6_K) {
    // element 128 h + 32 k + l: low nibble (k / 2) of ql[64 h + 32 (k % 2) + l], high bits 2k of
    // qh[32 h + l] (ql and qh as stored); side: 16 int8 scales, then f16 d
    const std::uint8_t* block = codes + 192 * (e / 256);
    const std::uint8_t* side = scales + 18 * (e / 256);
    const int j = static_cast<int>(e % 256), h = j / 128, k = (j % 128) / 32, l = j % 32;
    const int low = (block[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
    const int high = (block[128 + 32 * h + l] >> (2 * k)) & 3;
    const float dl =
        mul_rn(half_to_float(load_u16(side + 16)), static_cast<float>(static_cast<std::int8_t>(side[j / 16])));
    return mul_rn(dl, static_cast<float>((low | high << 4) - 32));
  } else if constexpr (F == DType::kQ4_1 || F == DType::kQ5_0 || F == DType::kQ5_1) {
    // side: d (Q4_1, Q5_1: then the min; Q5_x: then the fifth bits, bit jj of a u32)
    constexpr int kSide = F == DType::kQ4_1 ? 4 : F == DType::kQ5_0 ? 6 : 8;
    const std::uint8_t* side = scales + kSide * (e / 32);
    const int jj = static_cast<int>(e % 32);
    const std::uint8_t byte = codes[16 * (e / 32) + (jj % 16)];
    int q = jj < 16 ? (byte & 15) : (byte >> 4);
    const float d = half_to_float(load_u16(side));
    if constexpr (F == DType::kQ4_1) return add_rn(mul_rn(d, static_cast<float>(q)), half_to_float(load_u16(side + 2)));
    q |= static_cast<int>((load_u32(side + kSide - 4) >> jj) & 1u) << 4;
    if constexpr (F == DType::kQ5_0) return d * static_cast<float>(q - 16);
    return add_rn(mul_rn(d, static_cast<float>(q)), half_to_float(load_u16(side + 2)));
  } else {
    static_assert(F == DType::kQ4_G128 || F == DType::kQ4_0 || F == DType::kIQ4_NL, "a planar format (planar_unit)");
    const std::int64_t sub = e / 32;
    const int jj = static_cast<int>(e % 32);
    const std::uint8_t byte = codes[16 * sub + (jj % 16)];
    const int q = jj < 16 ? (byte & 15) : (byte >> 4);
    if constexpr (F == DType::kQ4_0) return half_to_float(load_u16(scales + 2 * sub)) * static_cast<float>(q - 8);
    if constexpr (F == DType::kIQ4_NL) {
      return half_to_float(load_u16(scales + 2 * sub)) * static_cast<float>(iq4nl_level(q));
    }
    const std::uint32_t word = load_u32(scales + 4 * (e / 128));
    return half_to_float(static_cast<std::uint16_t>(word & 0xffffu)) *
           static_cast<float>(q - static_cast<int>((word >> 16) & 15u));
  }
}

// The rows' scales of a planar FP8 E4M3 matrix (`planes`, geometry g) when every row's blocks
// share one (a checkpoint quantized per output channel: the FP8 x FP8 prefill GEMM's weight
// scales), else nothing.
inline std::optional<std::vector<float>> fp8_channel_scales(const std::uint8_t* planes, const PlanarGeometry& g,
                                                            std::int64_t rows) {
  const std::int64_t blocks = g.scale_row_bytes / static_cast<std::int64_t>(sizeof(float));
  std::vector<float> scales(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint8_t* side = planes + g.scales_of(r);
    for (std::int64_t b = 1; b < blocks; ++b) {
      if (std::memcmp(side, side + b * static_cast<std::int64_t>(sizeof(float)), sizeof(float)) != 0) {
        return std::nullopt;
      }
    }
    std::memcpy(&scales[static_cast<std::size_t>(r)], side, sizeof(float));
  }
  return scales;
}

// The 128 x 128 block scales of a planar FP8 E4M3 matrix (`planes`, geometry g, rows x cols)
// when its scales are shared per block of 128 rows x 128 columns (DeepSeek-V3 / Qwen3-FP8
// checkpoints, `--weights fp8-block`; cols a multiple of 128): the grid cuBLASLt's 128 x 128
// block scaling reads, block (row / 128, col / 128) at [row / 128 * ld + col / 128], ld =
// fp8_block128_scales_ld(cols) (rows of the grid 16-byte aligned; the padding 0). Else nothing.
inline std::int64_t fp8_block128_scales_ld(std::int64_t cols) noexcept {
  return (cols / 128 + 3) / 4 * 4;
}

inline std::optional<std::vector<float>> fp8_block128_scales(const std::uint8_t* planes, const PlanarGeometry& g,
                                                             std::int64_t rows, std::int64_t cols) {
  if (cols % 128 != 0 || rows <= 0) return std::nullopt;
  const std::int64_t ld = fp8_block128_scales_ld(cols), blocks = cols / 64;  // planar: a float per 64
  std::vector<float> grid(static_cast<std::size_t>((rows + 127) / 128 * ld), 0.0f);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint8_t* side = planes + g.scales_of(r);
    const std::uint8_t* leader = planes + g.scales_of(r / 128 * 128);  // the band's first row
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::uint8_t* first = leader + b / 2 * 2 * static_cast<std::int64_t>(sizeof(float));
      if (std::memcmp(side + b * static_cast<std::int64_t>(sizeof(float)), first, sizeof(float)) != 0) {
        return std::nullopt;
      }
    }
  }
  for (std::int64_t band = 0; band * 128 < rows; ++band) {
    const std::uint8_t* side = planes + g.scales_of(band * 128);
    for (std::int64_t c = 0; c < cols / 128; ++c) {
      std::memcpy(&grid[static_cast<std::size_t>(band * ld + c)],
                  side + 2 * c * static_cast<std::int64_t>(sizeof(float)), sizeof(float));
    }
  }
  return grid;
}

}  // namespace sitsrt::cuda
