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

// Formats that are not GGUF types (see docs/quantization.md for their bytes).
inline constexpr int kFp8Block = 64;
inline constexpr int kGroup128 = 128;

struct BlockFP8_E4M3 {
  float d;                      // scale (fp32): x[i] = d * e4m3(qs[i])
  std::uint8_t qs[kFp8Block];   // OCP FP8 E4M3FN codes
};
struct BlockQ4_G128 {
  std::uint16_t d;                // scale (fp16)
  std::uint8_t zero;              // bits 3:0: zero point z (bits 7:4 ignored, written 0)
  std::uint8_t reserved;          // written 0, ignored
  std::uint8_t qs[kGroup128 / 2]; // per 32-element sub-block s, as Q4_0: byte 16s + j holds
                                  // element 32s + j (low nibble) and 32s + 16 + j (high nibble);
                                  // x = d * (q - z)
};

static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockFP8_E4M3) == 68);
static_assert(sizeof(BlockQ4_G128) == 68);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);

// OCP FP8 E4M3FN (bias 7, no infinities, 0x7F / 0xFF NaN, largest finite 448).
// Decode is exact; encode rounds to nearest even and saturates to +-448 (NaN -> 0x7F | sign).
float fp8_e4m3_to_fp32(std::uint8_t code) noexcept;
std::uint8_t fp32_to_fp8_e4m3(float value) noexcept;

// Decodes n elements (whole blocks) of `type` from src into dst.
void dequantize_row(DType type, const void* src, float* dst, std::int64_t n);

// Encodes n floats (whole blocks) into `type` with the reference round-to-nearest rules
// (for the 32-element formats the same rules llama.cpp's reference quantizers use, so files
// round-trip identically; the K-quants and IQ4_NL use the simpler rules of kquant_blocks.cpp).
void quantize_row(DType type, const float* src, void* dst, std::int64_t n);

// Encodes n floats (whole blocks of 64) as kFP8_E4M3 blocks that all carry the row's one scale,
// amax / 448 (per-channel FP8, as vLLM and TensorRT-LLM quantize; quantize_row searches a scale
// per block instead). Decodes with dequantize_row like any kFP8_E4M3 row; the CUDA backend runs
// its prefill matmuls FP8 x FP8 on Hopper (cuda/prefill_gemm.hpp).
void quantize_row_fp8_per_channel(const float* src, void* dst, std::int64_t n);

// Encodes `rows` rows of n floats (row-major; whole blocks of 64, rows <= 128: one band of a
// matrix whose bands start at multiples of 128 rows) as kFP8_E4M3 rows whose scales are shared
// per block of 128 rows x 128 columns of the matrix (the last block of a row of 64 mod 128
// columns 64 wide): amax / 448 of the block's finite elements, as DeepSeek-V3 / Qwen3-FP8
// checkpoints scale their weights (weight_scale_inv); the CUDA backend's FP8 x FP8 prefill GEMM
// takes them with cuBLASLt's 128 x 128 block scaling on Hopper.
void quantize_band_fp8_block128(const float* src, void* dst, std::int64_t rows, std::int64_t n);

// How FP8 E4M3 weights are scaled (every way decodes as kFP8_E4M3 blocks of 64).
enum class Fp8Scaling : std::uint8_t {
  kSearchedBlock,  // quantize_row: a scale searched per block of 64 (the lowest weight error)
  kPerChannel,     // quantize_row_fp8_per_channel: one scale per output row
  kBlock128,       // quantize_band_fp8_block128: one scale per 128 x 128 block
};

// Whether rows x n kFP8_E4M3 blocks (row-major) already carry `scaling`'s structure: one scale a
// row (kPerChannel), or one per 128 x 128 block counted from row 0 (kBlock128); kSearchedBlock
// takes any.
bool fp8_rows_scaled_as(Fp8Scaling scaling, const void* blocks, std::int64_t rows, std::int64_t n) noexcept;

// Encodes `rows` rows of n floats into `type` (quantize_row), FP8 E4M3 scaled as `fp8_scaling`
// says; for kBlock128 the rows are one band (at most 128, starting at a multiple of 128).
void quantize_rows(DType type, Fp8Scaling fp8_scaling, const float* src, void* dst, std::int64_t rows, std::int64_t n);

}  // namespace sitsrt
