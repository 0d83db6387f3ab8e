// The planar device layout of FP8 E4M3 and INT4 g128 weight matrices, made at load from the
// stored blocks (68 bytes each, so never 16-byte aligned): every row's codes back to back in one
// plane, then every row's block scales in a second plane. A lane of the decode kernels then
// reads 16 codes (FP8) or 32 nibbles (INT4, one 32-element sub-block in the stored nibble order)
// with one 16-byte load, and the block's scale from the small plane. Same bytes in total as the
// stored rows, so a matrix keeps its place in the weight allocation.
//
// Host and device share this header (SITSRT_HD); tests/unit/cuda_formats_test.cpp checks on the
// CPU that planar_element equals decode_element of the stored row, bit for bit.
#pragma once

#include "cuda_backend/device_formats.hpp"

namespace sitsrt::cuda {

// Elements that one 16-byte load of codes covers.
template <DType F>
inline constexpr int kPlanarChunkElements = F == DType::kFP8_E4M3 ? 16 : 32;

// Whether format F with rows of `cols` elements has the planar layout (rows of whole 16-byte
// chunks: always true for a valid FP8 / INT4 g128 row, whose blocks are 64 / 128 elements).
SITSRT_HD bool planar_supports(DType format, std::int64_t cols) {
  if (format == DType::kFP8_E4M3) return cols > 0 && cols % 64 == 0;
  if (format == DType::kQ4_G128) return cols > 0 && cols % 128 == 0;
  return false;
}

// Plane geometry of an n x cols matrix: codes at data[0, n * code_row_bytes), scales (one 32-bit
// word per block: FP8 the f32 scale, INT4 the f16 scale in the low half and the zero nibble in
// bits 16-19) at data + scales_offset, scale_row_words per row.
struct PlanarGeometry {
  std::int64_t code_row_bytes = 0;
  std::int64_t scale_row_words = 0;
  std::int64_t scales_offset = 0;
};

SITSRT_HD PlanarGeometry planar_geometry(DType format, std::int64_t rows, std::int64_t cols) {
  PlanarGeometry g;
  if (format == DType::kFP8_E4M3) {
    g.code_row_bytes = cols;
    g.scale_row_words = cols / 64;
  } else {
    g.code_row_bytes = cols / 2;
    g.scale_row_words = cols / 128;
  }
  g.scales_offset = rows * g.code_row_bytes;  // a multiple of 64: the scale plane stays aligned
  return g;
}

// Moves one stored row (row_bytes(format, cols) bytes) into its place in the planes.
inline void planar_pack_row(DType format, const std::uint8_t* stored, std::int64_t cols, std::uint8_t* codes,
                            std::uint8_t* scales) {
  const std::int64_t blocks = format == DType::kFP8_E4M3 ? cols / 64 : cols / 128;
  const int code_bytes = 64;  // FP8: 64 codes; INT4: 4 sub-blocks of 16 nibble bytes
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* block = stored + b * 68;
    std::uint32_t word = 0;
    if (format == DType::kFP8_E4M3) {
      word = load_u32(block);
    } else {
      word = static_cast<std::uint32_t>(load_u16(block)) | static_cast<std::uint32_t>(block[2] & 15) << 16;
    }
    std::memcpy(scales + 4 * b, &word, 4);  // little-endian hosts, as the device
    std::memcpy(codes + b * code_bytes, block + 4, code_bytes);
  }
}

// The value of element e of planar row (codes, scales): the float decode_element gives for the
// stored row, bit for bit.
template <DType F>
SITSRT_HD float planar_element(const std::uint8_t* codes, const std::uint8_t* scales, std::int64_t e) {
  if constexpr (F == DType::kFP8_E4M3) {
    return bits_float(load_u32(scales + 4 * (e / 64))) * fp8_e4m3_to_float(codes[e]);
  } else {
    static_assert(F == DType::kQ4_G128, "planar layout: FP8 E4M3 and INT4 g128 only");
    const std::uint32_t word = load_u32(scales + 4 * (e / 128));
    const std::int64_t sub = e / 32;
    const int jj = static_cast<int>(e % 32);
    const std::uint8_t byte = codes[16 * sub + (jj % 16)];
    const int q = jj < 16 ? (byte & 15) : (byte >> 4);
    return half_to_float(static_cast<std::uint16_t>(word & 0xffffu)) *
           static_cast<float>(q - static_cast<int>((word >> 16) & 15u));
  }
}

}  // namespace sitsrt::cuda
