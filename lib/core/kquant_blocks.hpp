// Byte layouts of the GGUF K-quant super-block formats (256 elements) and IQ4_NL (32), with
// their scalar reference decode/encode. docs/quantization.md describes every byte; kernels read
// these structs in place and are tested against decode_block_* / dequantize_row.
//
// Sub-block numbering used throughout: element e of a super-block lies in sub-block e / 32
// (Q4_K, Q5_K: 8 sub-blocks with a 6-bit scale and 6-bit min each) or e / 16 (Q2_K, Q3_K, Q6_K:
// 16 sub-blocks). All multi-byte fields are little-endian; d / dmin are fp16 except Q8_K's fp32.
#pragma once

#include "core/dtype.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt {

inline constexpr int kSuperBlock = 256;
inline constexpr int kPackedScaleBytes = 12;  // 8 x (6-bit scale, 6-bit min) or 16 x 6-bit scale

struct BlockQ2_K {
  std::uint8_t scales[16];  // sub-block s (16 elements): scale = low nibble, min = high nibble
  std::uint8_t qs[64];      // 2-bit levels, four per byte (see docs)
  std::uint16_t d;          // super-scale of the scales
  std::uint16_t dmin;       // super-scale of the mins
};
struct BlockQ3_K {
  std::uint8_t hmask[32];   // bit 2 of each level (set = level >= 0)
  std::uint8_t qs[64];      // low 2 bits of each level
  std::uint8_t scales[kPackedScaleBytes];  // 16 x 6-bit scale, stored + 32
  std::uint16_t d;
};
struct BlockQ4_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[kPackedScaleBytes];  // 8 x (6-bit scale, 6-bit min)
  std::uint8_t qs[128];                    // 4-bit levels: byte 32p + l = sub-blocks 2p (low), 2p+1 (high)
};
struct BlockQ5_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[kPackedScaleBytes];
  std::uint8_t qh[32];   // bit s of byte l: 5th bit of element 32 s + l
  std::uint8_t qs[128];  // low 4 bits, as Q4_K
};
struct BlockQ6_K {
  std::uint8_t ql[128];     // low 4 bits
  std::uint8_t qh[64];      // high 2 bits
  std::int8_t scales[16];   // signed 8-bit scale per 16-element sub-block
  std::uint16_t d;
};
struct BlockQ8_K {
  float d;
  std::int8_t qs[kSuperBlock];
  std::int16_t bsums[16];  // sum of qs over each 16-element group
};
struct BlockIQ4_NL {
  std::uint16_t d;
  std::uint8_t qs[16];  // table indices, nibbles packed as Q4_0 (low: 0..15, high: 16..31)
};

static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18);

// IQ4_NL's 16 non-linear levels (index -> level; the decoded value is d * level).
inline constexpr std::int8_t kIq4nlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                 1,    13,   25,  38,  53,  69,  89,  113};

// Q4_K / Q5_K: the 6-bit scale and min of sub-block s (0..7) from the 12 packed bytes.
struct ScaleMin {
  int scale, min;
};
constexpr ScaleMin unpack_scale_min_k4(const std::uint8_t* packed, int s) noexcept {
  if (s < 4) return {packed[s] & 63, packed[s + 4] & 63};
  return {(packed[s + 4] & 0x0F) | ((packed[s - 4] >> 6) << 4), (packed[s + 4] >> 4) | ((packed[s] >> 6) << 4)};
}
// Packs 8 (scale, min) pairs of 6 bits into those 12 bytes (the inverse).
void pack_scale_min_k4(const int* sc, const int* m, std::uint8_t* packed) noexcept;
// Q3_K: the signed scale (-32..31) of sub-block s (0..15) from the 12 packed bytes.
constexpr int unpack_scale_q3_k(const std::uint8_t* packed, int s) noexcept {
  const int low = s < 8 ? packed[s] & 0x0F : packed[s - 8] >> 4;
  const int high = (packed[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// One super-block (or IQ4_NL block) to floats; the values dequantize_row produces.
// Formula per element (each product and difference rounded once, no FMA):
//   Q2_K/Q4_K/Q5_K: fl(fl(d * scale) * q) - fl(dmin * min);  Q3_K/Q6_K: fl(fl(d * scale) * q);
//   Q8_K: d * q;  IQ4_NL: d * level.
void decode_block_q2_k(const BlockQ2_K& b, float* out) noexcept;
void decode_block_q3_k(const BlockQ3_K& b, float* out) noexcept;
void decode_block_q4_k(const BlockQ4_K& b, float* out) noexcept;
void decode_block_q5_k(const BlockQ5_K& b, float* out) noexcept;
void decode_block_q6_k(const BlockQ6_K& b, float* out) noexcept;
void decode_block_q8_k(const BlockQ8_K& b, float* out) noexcept;
void decode_block_iq4_nl(const BlockIQ4_NL& b, float* out) noexcept;

void encode_block_q2_k(const float* x, BlockQ2_K& b) noexcept;
void encode_block_q3_k(const float* x, BlockQ3_K& b) noexcept;
void encode_block_q4_k(const float* x, BlockQ4_K& b) noexcept;
void encode_block_q5_k(const float* x, BlockQ5_K& b) noexcept;
void encode_block_q6_k(const float* x, BlockQ6_K& b) noexcept;
void encode_block_q8_k(const float* x, BlockQ8_K& b) noexcept;
void encode_block_iq4_nl(const float* x, BlockIQ4_NL& b) noexcept;

// Compile-time facts per format for kernel templates: block struct, elements per block and the
// reference block decoder.
template <DType kType>
struct KquantFormat;
template <typename B, int kN, void (*kDecode)(const B&, float*) noexcept>
struct KquantFormatOf {
  using Block = B;
  static constexpr int kElements = kN;
  static constexpr void (*decode)(const B&, float*) noexcept = kDecode;
};
template <>
struct KquantFormat<DType::kQ2_K> : KquantFormatOf<BlockQ2_K, kSuperBlock, decode_block_q2_k> {};
template <>
struct KquantFormat<DType::kQ3_K> : KquantFormatOf<BlockQ3_K, kSuperBlock, decode_block_q3_k> {};
template <>
struct KquantFormat<DType::kQ4_K> : KquantFormatOf<BlockQ4_K, kSuperBlock, decode_block_q4_k> {};
template <>
struct KquantFormat<DType::kQ5_K> : KquantFormatOf<BlockQ5_K, kSuperBlock, decode_block_q5_k> {};
template <>
struct KquantFormat<DType::kQ6_K> : KquantFormatOf<BlockQ6_K, kSuperBlock, decode_block_q6_k> {};
template <>
struct KquantFormat<DType::kQ8_K> : KquantFormatOf<BlockQ8_K, kSuperBlock, decode_block_q8_k> {};
template <>
struct KquantFormat<DType::kIQ4_NL> : KquantFormatOf<BlockIQ4_NL, 32, decode_block_iq4_nl> {};

}  // namespace sitsrt
