// The planar device layout of FP8 E4M3, INT4 g128, Q8_0 and Q4_0 weight matrices, made at load
// from the stored blocks (68, 34 and 18 bytes each, so not 16-byte aligned): every row's codes back
// to back in one plane, then every row's block scales in a second plane. A lane of the decode
// kernels then reads 16 byte codes (FP8, Q8_0) or 32 nibbles (INT4, Q4_0: one 32-element block or
// sub-block in the stored nibble order) with one 16-byte load, and the block's scale from the
// small plane. Same bytes in total as the stored rows, so a matrix keeps its place in the weight
// allocation.
//
// Host and device share this header (SITSRT_HD); tests/unit/cuda_formats_test.cpp checks on the
// CPU that planar_element equals decode_element of the stored row, bit for bit.
#pragma once

#include "cuda_backend/device_formats.hpp"

namespace sitsrt::cuda {

// Elements that one 16-byte load of codes covers: 16 byte codes, or 32 nibbles (one 32-element
// block or sub-block, nibble order as stored: byte i holds elements i and i + 16).
template <DType F>
inline constexpr int kPlanarChunkElements = F == DType::kFP8_E4M3 || F == DType::kQ8_0 ? 16 : 32;

// Whether format F with rows of `cols` elements has the planar layout (rows of whole blocks).
SITSRT_HD bool planar_supports(DType format, std::int64_t cols) {
  switch (format) {
    case DType::kFP8_E4M3:
      return cols > 0 && cols % 64 == 0;
    case DType::kQ4_G128:
      return cols > 0 && cols % 128 == 0;
    case DType::kQ8_0:
    case DType::kQ4_0:
      return cols > 0 && cols % 32 == 0;
    default:
      return false;
  }
}

// Plane geometry of an n x cols matrix: codes at data[0, n * code_row_bytes), then the scales,
// scale_row_bytes per row from data + scales_offset: one per block of chunks_per_scale 16-byte
// chunks, of scale_bytes each: FP8 the f32 scale (4 bytes, per 64), INT4 g128 the f16 scale in the
// low half and the zero nibble in bits 16-19 (4 bytes, per 128), Q8_0 / Q4_0 the f16 scale (2
// bytes, per 32). The same bytes in total as the stored blocks.
struct PlanarGeometry {
  std::int64_t code_row_bytes = 0;
  std::int64_t scale_row_bytes = 0;
  std::int64_t scales_offset = 0;
  int chunks_per_scale = 1;
  int scale_bytes = 4;
  [[nodiscard]] SITSRT_HD std::int64_t scales_of(std::int64_t row) const {
    return scales_offset + row * scale_row_bytes;
  }
};

SITSRT_HD PlanarGeometry planar_geometry(DType format, std::int64_t rows, std::int64_t cols) {
  PlanarGeometry g;
  switch (format) {
    case DType::kFP8_E4M3:
      g.code_row_bytes = cols;
      g.chunks_per_scale = 4;
      break;
    case DType::kQ4_G128:
      g.code_row_bytes = cols / 2;
      g.chunks_per_scale = 4;
      break;
    case DType::kQ8_0:
      g.code_row_bytes = cols;
      g.chunks_per_scale = 2;
      g.scale_bytes = 2;
      break;
    default:  // Q4_0
      g.code_row_bytes = cols / 2;
      g.chunks_per_scale = 1;
      g.scale_bytes = 2;
      break;
  }
  g.scale_row_bytes = g.code_row_bytes / 16 / g.chunks_per_scale * g.scale_bytes;
  g.scales_offset = rows * g.code_row_bytes;  // a multiple of 16: the scale plane stays aligned
  return g;
}

// Moves one stored row (row_bytes(format, cols) bytes) into its place in the planes.
inline void planar_pack_row(DType format, const std::uint8_t* stored, std::int64_t cols, std::uint8_t* codes,
                            std::uint8_t* scales) {
  const PlanarGeometry g = planar_geometry(format, 1, cols);
  const std::int64_t blocks = g.code_row_bytes / 16 / g.chunks_per_scale;
  const std::int64_t code_bytes = 16 * g.chunks_per_scale;  // per block
  const std::int64_t stored_bytes = format == DType::kQ8_0 ? 34 : format == DType::kQ4_0 ? 18 : 68;
  const std::int64_t header = format == DType::kQ8_0 || format == DType::kQ4_0 ? 2 : 4;
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* block = stored + b * stored_bytes;
    if (format == DType::kQ4_G128) {
      const std::uint32_t word = static_cast<std::uint32_t>(load_u16(block)) | static_cast<std::uint32_t>(block[2] & 15)
                                                                                   << 16;
      std::memcpy(scales + 4 * b, &word, 4);  // little-endian hosts, as the device
    } else {
      std::memcpy(scales + b * g.scale_bytes, block, static_cast<std::size_t>(g.scale_bytes));
    }
    std::memcpy(codes + b * code_bytes, block + header, static_cast<std::size_t>(code_bytes));
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
  } else {
    static_assert(F == DType::kQ4_G128 || F == DType::kQ4_0, "planar layout: FP8 E4M3, INT4 g128, Q8_0, Q4_0");
    const std::int64_t sub = e / 32;
    const int jj = static_cast<int>(e % 32);
    const std::uint8_t byte = codes[16 * sub + (jj % 16)];
    const int q = jj < 16 ? (byte & 15) : (byte >> 4);
    if constexpr (F == DType::kQ4_0) return half_to_float(load_u16(scales + 2 * sub)) * static_cast<float>(q - 8);
    const std::uint32_t word = load_u32(scales + 4 * (e / 128));
    return half_to_float(static_cast<std::uint16_t>(word & 0xffffu)) *
           static_cast<float>(q - static_cast<int>((word >> 16) & 15u));
  }
}

}  // namespace sitsrt::cuda
