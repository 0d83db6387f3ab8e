// Internal: the AMX (bf16 tile) prefill GEMM reached at Isa::kAmx.
//
// y = x W^T for m > 1 with both operands rounded to bf16 and products accumulated in fp32 by
// TDPBF16PS. The driver (amx_prefill.cpp, ordinary flags) converts x to bf16 tiles once per
// matmul into the context's shared buffer and hands blocks of 32 output columns (weight rows) to
// the pool's threads; gemm_amx.cpp, the only file compiled with -mamx-*, holds the tile code and
// is entered only after detect_isa() saw the CPU features and Linux granted the tile state
// (amx_usable in cpu_context.cpp).
//
// Numerics: each product x_c w_c carries the bf16 rounding of both factors (8 significant bits,
// round to nearest even: relative 2^-8 each; the product of two bf16 is exact in fp32), so
// |y - exact| <= (2^-7 + 2^-16) sum|x w| + the fp32 accumulation bound; TDPBF16PS treats bf16
// subnormals as zero.
#pragma once

#include "cpu/cpu_context.hpp"
#include "cpu/matmul/matmul.hpp"
#include "cpu/matmul/matmul_kernels.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {

// K columns dequantized and packed per weight block: a multiple of every block size (256 for
// the K-quants) and of the 32 bf16 of a tile row. The packed 32 x 1024 bf16 block (64 KiB) is
// read from L2 no slower than a 512-wide one from L1, and a 1024-wide layer then never reloads
// its y^T stage: measured 2-5% faster than 512 on the 0.35B shapes, 256 ~10% slower.
inline constexpr std::int64_t kAmxBlockK = 1024;
inline constexpr std::int64_t kAmxTile = 16;   // rows (and fp32 columns) of a tile
inline constexpr std::int64_t kAmxBlockN = 32;  // weight rows per packed block (two A tiles)
inline constexpr std::int64_t kAmxPassM = 256;  // x rows per pass over a block (the stage width)
// Per-thread scratch of amx_gemm_rows: one fp32 dequant row (kAmxBlockK), the packed bf16 block
// (kAmxBlockN x kAmxBlockK) and the fp32 y^T stage (kAmxBlockN x kAmxPassM): 100 KiB.
inline constexpr std::int64_t kAmxScratchFloats =
    kAmxBlockK + kAmxBlockN * kAmxBlockK / 2 + kAmxBlockN * kAmxPassM;

// Shared bytes the bf16 copy of x needs: m rows padded to whole 16-row groups, cols to 32.
std::size_t amx_activation_bytes(std::int64_t m, std::int64_t cols) noexcept;

// y = x W^T for m > 1 (ctx.isa() == Isa::kAmx; shared and scratch reserved as above).
void gemm_amx(CpuContext& ctx, DequantFn dequant, const WeightMatrix& w, const float* x, std::int64_t ldx,
              std::int64_t m, float* y, std::int64_t ldy);

// ---- Tile code (gemm_amx.cpp). Plain functions: nothing inline is shared with other files. ----

// The 16-row groups [group_begin, group_end) of x as bf16 B tiles: for group G and 32-column
// step s, the 1 KiB tile at b + (G * steps + s) * 512 (steps = ceil(cols / 32)) whose row p
// holds x[16 G + i][32 s + 2 p + {0, 1}] for i < 16. Rows at or past m and columns at or past
// cols are zeros.
void amx_convert_rows(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t cols, std::uint16_t* b,
                      std::int64_t group_begin, std::int64_t group_end);

struct AmxGemmArgs {
  WeightLayout layout;
  DequantFn dequant;          // the format's fp32 dequant (formats without a direct bf16 source)
  const std::byte* w;         // weight row 0
  std::size_t w_row_stride;   // bytes
  std::int64_t block_size;    // elements per quant block (1 for float formats)
  std::int64_t block_bytes;   // bytes per quant block
  std::int64_t cols;          // K
  const std::uint16_t* b;     // x as bf16 B tiles (amx_convert_rows), all of its 16-row groups
  std::int64_t m;
  float* y;
  std::int64_t ldy;
};

// Output columns (weight rows) [row_begin, row_end) of y for all m rows. Configures the tile
// registers of the calling thread and releases them on return. scratch: kAmxScratchFloats
// floats, 64-byte aligned.
void amx_gemm_rows(const AmxGemmArgs& args, std::int64_t row_begin, std::int64_t row_end, float* scratch);

}  // namespace sitsrt::cpu::detail
