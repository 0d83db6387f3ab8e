// Internal: the AMX (bf16 tile) prefill GEMM reached at Isa::kAmx.
//
// y = x W^T for m > 1 with both operands rounded to bf16 and products accumulated in fp32 by
// TDPBF16PS. The driver (amx_prefill.cpp, ordinary flags) converts x to bf16 once per matmul into
// the context's shared buffer and splits the output rows over the pool; gemm_amx.cpp, the only
// file compiled with -mamx-*, holds the tile code and is entered only after detect_isa() saw the
// CPU features and Linux granted the tile state (amx_permitted in cpu_context.cpp).
//
// Numerics: each product x_c w_c carries the bf16 rounding of both factors (8 significant bits,
// round to nearest even: relative 2^-8 each; the product of two bf16 is exact in fp32), so
// |y - exact| <= (2^-7 + 2^-16) sum|x w| + the fp32 accumulation bound; TDPBF16PS treats bf16
// subnormals as zero.
#pragma once

#include "cpu/cpu_context.hpp"
#include "cpu/matmul.hpp"
#include "cpu/matmul_kernels.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {

// K columns dequantized and packed per weight block: a multiple of every block size (256 for
// the K-quants) and of the 32 bf16 of a tile row. 32 rows x 512 bf16 (32 KiB) stay in L1.
inline constexpr std::int64_t kAmxBlockK = 512;
inline constexpr std::int64_t kAmxTile = 16;   // rows (and fp32 columns) of a tile
inline constexpr std::int64_t kAmxBlockN = 32;  // weight rows per packed block (two B tiles)
// Per-thread scratch of amx_gemm_rows: fp32 dequant tile (16 x kAmxBlockK), packed bf16 block
// (kAmxBlockN x kAmxBlockK) and a kAmxBlockN^2 fp32 staging area for partial output blocks.
inline constexpr std::int64_t kAmxScratchFloats =
    kAmxTile * kAmxBlockK + kAmxBlockN * kAmxBlockK / 2 + kAmxBlockN * kAmxBlockN;

// Shared bytes the bf16 copy of x needs: m rows (padded to whole tiles) of cols padded to 32.
std::size_t amx_activation_bytes(std::int64_t m, std::int64_t cols) noexcept;

// y = x W^T for m > 1 (ctx.isa() == Isa::kAmx; shared and scratch reserved as above).
void gemm_amx(CpuContext& ctx, DequantFn dequant, const WeightMatrix& w, const float* x, std::int64_t ldx,
              std::int64_t m, float* y, std::int64_t ldy);

// ---- Tile code (gemm_amx.cpp). Plain functions: nothing inline is shared with other files. ----

// a[i, c] = bf16(x[i, c]) for rows [row_begin, row_end), c < cols; columns [cols, lda) and rows
// at or past m (up to row_end) are written as zeros.
void amx_convert_rows(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t cols, std::uint16_t* a,
                      std::int64_t lda, std::int64_t row_begin, std::int64_t row_end);

struct AmxGemmArgs {
  DType type;
  DequantFn dequant;          // the format's fp32 dequant (formats without a direct bf16 source)
  const std::byte* w;         // weight row 0
  std::size_t w_row_stride;   // bytes
  std::int64_t block_size;    // elements per quant block (1 for float formats)
  std::int64_t block_bytes;   // bytes per quant block
  std::int64_t cols;          // K
  const std::uint16_t* a;     // bf16 activations from amx_convert_rows, m rounded up to 16 rows
  std::int64_t lda;           // elements, a multiple of 32
  std::int64_t m;
  float* y;
  std::int64_t ldy;
};

// Output columns (weight rows) [row_begin, row_end) of y for all m rows. Configures the tile
// registers of the calling thread and releases them on return. scratch: kAmxScratchFloats
// floats, 64-byte aligned.
void amx_gemm_rows(const AmxGemmArgs& args, std::int64_t row_begin, std::int64_t row_end, float* scratch);

}  // namespace sitsrt::cpu::detail
