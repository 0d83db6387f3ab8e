// Quantized Hugging Face checkpoints: reading and validating the packed tensors of FP8 (E4M3
// weights with per-tensor, per-channel or 128x128 block scales), AWQ (GEMM packing) and GPTQ
// (incl. act-order g_idx) linear layers, and unpacking them exactly into integer levels,
// scales and zero points, and repacking them into the internal block formats that hold them
// exactly (INT4 g128, FP8 E4M3; lib/core/quant_blocks.hpp). No float weights are produced.
//
// Conventions: a linear layer maps `cols` input features to `rows` output features; unpacked
// arrays are row-major with one row per output feature (the GGUF/graph weight layout, where
// an output row's input columns are contiguous).
#pragma once

#include "formats/safetensors.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace sitsrt::hf {

// One tensor as a checkpoint stores it (shape outermost first).
struct RawTensor {
  std::string_view name;
  safetensors::ElementType type = safetensors::ElementType::kF32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> data;
};

// 4-bit weights with per-group scales and zero points: w[r][c] = scale * (level - zero), where
// the group of column c is c / group_size, or group_of_column[c] (GPTQ act-order).
struct Int4GroupWeights {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t group_size = 0;
  std::int64_t groups = 0;
  std::vector<std::uint8_t> levels;           // rows x cols, each 0..15
  std::vector<std::uint8_t> zeros;            // rows x groups, each 0..16 (GPTQ v1 stores zero - 1)
  std::vector<float> scales;                  // rows x groups (exact widenings of the stored fp16)
  std::vector<std::int32_t> group_of_column;  // empty unless act-order reorders groups

  [[nodiscard]] std::int64_t group(std::int64_t col) const noexcept {
    return group_of_column.empty() ? col / group_size : group_of_column[static_cast<std::size_t>(col)];
  }
  [[nodiscard]] float value(std::int64_t row, std::int64_t col) const noexcept;
};

// AutoAWQ GEMM packing: qweight int32 [cols, rows/8] (8 output features per word, nibble k
// holding feature 8j + kAwqOrder[k]), qzeros int32 [groups, rows/8] packed the same way,
// scales f16 [groups, rows]. group_size -1: one group. Throws kInvalidModel naming the tensor.
inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
Int4GroupWeights unpack_awq(const RawTensor& qweight, const RawTensor& qzeros, const RawTensor& scales,
                            std::int64_t group_size);

// GPTQ packing: qweight int32 [cols/8, rows] (8 input features per word, nibble k holding
// input 8i + k), qzeros int32 [groups, rows/8] (nibble k: output feature 8j + k), scales f16
// [groups, rows], g_idx int32 [cols] (may be absent: `g_idx.data` empty). `zeros_minus_one`:
// checkpoint_format "gptq" stores zero - 1 (the unpacked zero adds the 1 back).
Int4GroupWeights unpack_gptq(const RawTensor& qweight, const RawTensor& qzeros, const RawTensor& scales,
                             const RawTensor& g_idx, std::int64_t group_size, bool zeros_minus_one);

// FP8 E4M3 ("e4m3fn": bias 7, no infinities, 0x7f/0xff NaN) -> float, exact.
float e4m3_to_float(std::uint8_t code) noexcept;

// FP8 weights: w[r][c] = e4m3(codes[r * cols + c]) * scale, the scale per tensor, per output
// row, or per block of block_rows x block_cols (DeepSeek-V3 / Qwen3-FP8 weight_scale_inv).
struct Fp8Weights {
  enum class Scales : std::uint8_t { kPerTensor, kPerRow, kBlock };
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  Scales layout = Scales::kPerTensor;
  std::int64_t block_rows = 0;
  std::int64_t block_cols = 0;
  std::span<const std::uint8_t> codes;  // view into the checkpoint
  std::vector<float> scales;

  [[nodiscard]] float scale(std::int64_t row, std::int64_t col) const noexcept;
  [[nodiscard]] float value(std::int64_t row, std::int64_t col) const noexcept {
    return e4m3_to_float(codes[static_cast<std::size_t>(row * cols + col)]) * scale(row, col);
  }
};

// `scale` is weight_scale (per tensor: shape [] or [1]; per row: [rows] or [rows, 1]) or, when
// `block` is {block_rows, block_cols}, weight_scale_inv [ceil(rows/br), ceil(cols/bc)].
// Scales may be F32, BF16 or F16. Throws kInvalidModel naming the tensor.
Fp8Weights read_fp8(const RawTensor& weight, const RawTensor& scale, std::span<const std::int64_t> block);

// The weights as kQ4_G128 blocks, one row of cols / 128 blocks per output feature (the GGUF
// [in, out] layout): levels, zero points and fp16 scales copied, nibbles repacked; decoding
// gives value(r, c) bit for bit. kUnsupported (naming `name`) for a group size other than 128,
// input features that are not whole groups, an act-order g_idx that mixes groups inside a
// 128-column block (serving it would need the columns and the input activations reordered), and
// a GPTQ v1 zero point of 16 in a group that also holds level 0 (16 with levels 1..15 is served
// exactly as zero 15 with every level minus 1).
std::vector<std::byte> pack_q4_g128(const Int4GroupWeights& w, std::string_view name);

// The weights as kFP8_E4M3 blocks of 64 (codes copied, each block's fp32 scale the scale of its
// row or of its weight_block_size block); decoding gives value(r, c) bit for bit. kUnsupported for
// input features that are not whole blocks of 64 or block columns that are not a multiple of 64;
// kInvalidModel for a NaN code (0x7f / 0xff), which the decode kernels do not reproduce.
std::vector<std::byte> pack_fp8_e4m3(const Fp8Weights& w, std::string_view name);

}  // namespace sitsrt::hf
