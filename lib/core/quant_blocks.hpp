// Byte layouts of the block-quantized weight formats (GGUF-compatible) and their scalar
// reference encode/decode. Kernels read these structs directly; tests compare against
// dequantize_row. All multi-byte fields are little-endian, scales are IEEE fp16.
#pragma once

#include "core/dtype.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt {

inline constexpr int kQBlock = 32;

struct BlockQ8_0 {
  std::uint16_t d;          // scale
  std::int8_t qs[kQBlock];  // x[i] = d * qs[i]
};
struct BlockQ4_0 {
  std::uint16_t d;                 // scale
  std::uint8_t qs[kQBlock / 2];    // x[i] = d * ((qs[i] & 15) - 8), x[i+16] = d * ((qs[i] >> 4) - 8)
};
struct BlockQ4_1 {
  std::uint16_t d;                 // scale
  std::uint16_t m;                 // min
  std::uint8_t qs[kQBlock / 2];    // x[i] = d * (qs[i] & 15) + m, x[i+16] = d * (qs[i] >> 4) + m
};
struct BlockQ5_0 {
  std::uint16_t d;                 // scale
  std::uint8_t qh[4];              // bit j = 5th bit of element j (little-endian uint32)
  std::uint8_t qs[kQBlock / 2];    // low 4 bits, packed as in Q4_0; x = d * (q - 16)
};
struct BlockQ5_1 {
  std::uint16_t d;
  std::uint16_t m;
  std::uint8_t qh[4];
  std::uint8_t qs[kQBlock / 2];    // x = d * q + m
};

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);

// Decodes n elements (whole blocks) of `type` from src into dst.
void dequantize_row(DType type, const void* src, float* dst, std::int64_t n);

// Encodes n floats (whole blocks) into `type` with the reference round-to-nearest rules
// (for the 32-element formats the same rules llama.cpp's reference quantizers use, so files
// round-trip identically; the K-quants and IQ4_NL use the simpler rules of kquant_blocks.cpp).
void quantize_row(DType type, const float* src, void* dst, std::int64_t n);

}  // namespace sitsrt
