// Internal: the per-ISA matmul building blocks that matmul.cpp dispatches to.
// Each ISA file (matmul_generic.cpp, matmul_avx2.cpp, matmul_avx512.cpp) defines one
// MatmulKernels table (the AVX-512 one lists the tile kernel of gemm_tile_avx512.cpp);
// matmul.cpp owns threading, tiling and scratch.
//
// ODR note: the ISA files are compiled with different -m flags, so everything in them except the
// table accessor lives in an anonymous namespace and they call no inline function shared with
// other files (a shared inline could be emitted with AVX-512 instructions and picked by the linker
// for a generic caller).
#pragma once

#include "cpu/cpu_context.hpp"
#include "cpu/weight_layout.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {

// Decode: y[r] = sum_c W[r, c] * x[c] for r < n_rows; row r at w + r * row_stride bytes,
// `cols` elements (whole blocks) per row. Dequantizes in registers, never to memory.
using MatvecFn = void (*)(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                          std::int64_t n_rows);

// dst[0, n) = the n elements (whole blocks) stored at src, as floats. Same values as
// dequantize_row (scale * q [+ min] rounded once per product; no FMA contraction).
using DequantFn = void (*)(const std::byte* src, float* dst, std::int64_t n);

// Prefill tile: y[i, j] (+)= sum_{c < k} x[i, c] * w[j, c] for i < m, j < n (n <= tile_rows).
// x: m rows, stride ldx floats (any alignment). w: n rows of dequantized weights, stride ldw
// floats, 64-byte aligned, ldw a multiple of 16 and rows readable up to ldw (zero padded).
// work: kGemmTileRows * ldw floats, 64-byte aligned, for a kernel's repacked copy of w.
// accumulate = false stores, true adds to y (K-blocked callers add later blocks).
using GemmTileFn = void (*)(const float* x, std::int64_t ldx, std::int64_t m, const float* w, std::int64_t ldw,
                            std::int64_t n, std::int64_t k, float* y, std::int64_t ldy, bool accumulate, float* work);

struct FormatKernels {
  WeightLayout layout;  // must equal the entry's index in MatmulKernels::formats (checked at compile time)
  MatvecFn matvec;
  DequantFn dequant;
};

struct MatmulKernels {
  FormatKernels formats[kWeightLayoutCount];  // every stored format, then the repacked layouts
  GemmTileFn gemm_tile;
  std::int64_t tile_rows;  // weight rows dequantized per tile: a multiple of gemm_tile's
                           // micro-kernel width, at most kGemmTileRows (the scratch sizing)
};

// True when entry i of `formats` describes WeightLayout i: lets each ISA file list its layouts
// declaratively while matmul.cpp indexes the table by WeightLayout.
constexpr bool formats_in_layout_order(const FormatKernels (&formats)[kWeightLayoutCount]) {
  for (int i = 0; i < kWeightLayoutCount; ++i) {
    if (static_cast<int>(formats[i].layout) != i) return false;
  }
  return true;
}

// The table for a (supported) ISA level; see kernel_dispatch.cpp.
const MatmulKernels& matmul_kernels_for(Isa isa) noexcept;

const MatmulKernels& matmul_kernels_generic() noexcept;
#if defined(SITSRT_X86_KERNELS)
const MatmulKernels& matmul_kernels_avx2() noexcept;
const MatmulKernels& matmul_kernels_avx512() noexcept;
// The AVX-512 table's gemm_tile (gemm_tile_avx512.cpp): a GemmTileFn; needs AVX-512 F.
void gemm_tile_avx512(const float* x, std::int64_t ldx, std::int64_t m, const float* w, std::int64_t ldw,
                      std::int64_t n, std::int64_t k, float* y, std::int64_t ldy, bool accumulate, float* work);
#endif

// FP8 E4M3 decode at the AVX-512 levels (matmul_avx512.cpp): the table's entry runs the
// AVX512-BF16 kernel (activations rounded to bf16) when the CPU has AVX512_BF16 and the row is
// at most 32768 wide, else the F16C kernel (float activations, bit-identical weights). Both are
// named here for the tests, which see no SITSRT_X86_KERNELS: defined on x86-64 only.
bool avx512_bf16_supported() noexcept;
void matvec_fp8_avx512_bf16(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                            std::int64_t n_rows);  // only where avx512_bf16_supported()
void matvec_fp8_avx512_f16c(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                            std::int64_t n_rows);

// FP8R decode with AVX512-FP16 (matvec_fp8r_avx512fp16.cpp). Products and per-group sums in
// fp16 with the activations scaled by a power of two and rounded to fp16 once per product (a
// HalfRow in the context's shared scratch, like the int8 path's QuantizedRow); numerics in that
// file. Decode reaches it through DecodeKernel (decode_kernel.hpp) where fp8r_decode_native; the
// AVX-512 table's FP8R entry prepares its own row on the stack (rows up to 32768 wide, else the
// portable kernel).
struct HalfRow {
  const std::uint16_t* x16 = nullptr;  // x * 2^k as fp16, per 64-element block in the kernel's order
  int k = 0;
  bool valid = false;  // false: x holds inf / NaN or is far outside any activation's range
};
inline constexpr std::size_t half_row_bytes(std::int64_t cols) noexcept {
  return (static_cast<std::size_t>(cols) * 2 + 63) / 64 * 64;
}
using HalfMatvecFn = void (*)(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x,
                              const HalfRow& h, float* y, std::int64_t n_rows);
// AVX512_FP16 and AVX512_VBMI (vpmultishiftqb), what the FP8R kernel below uses; CPUID asked once.
bool avx512_fp16_supported() noexcept;
// Only where avx512_fp16_supported(); buffer: half_row_bytes(cols), 64-byte aligned.
HalfRow prepare_half_row_avx512fp16(const float* x, std::int64_t cols, std::byte* buffer) noexcept;
void matvec_fp8r_half_avx512fp16(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x,
                                 const HalfRow& h, float* y, std::int64_t n_rows);
void matvec_fp8r_avx512fp16(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                            std::int64_t n_rows);
// True when the FP8R decode at `isa` is that kernel: only then does FP8 repack (weight_layout.cpp).
bool fp8r_decode_native(Isa isa) noexcept;

// Repacked Q8_0/Q4_0/FP8/Q4_K (cpu/repacked_blocks.hpp) through dequantize_row, one 1024-element
// group at a time (matvec_repacked.cpp, baseline target): every table lists these unless it has
// its own.
void matvec_q8_0r_portable(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                           std::int64_t n_rows);
void matvec_q4_0r_portable(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                           std::int64_t n_rows);
void matvec_fp8r_portable(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                          std::int64_t n_rows);
void dequant_q8_0r_portable(const std::byte* src, float* dst, std::int64_t n);
void dequant_q4_0r_portable(const std::byte* src, float* dst, std::int64_t n);
void dequant_fp8r_portable(const std::byte* src, float* dst, std::int64_t n);
void matvec_q4_kr_portable(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                           std::int64_t n_rows);
void dequant_q4_kr_portable(const std::byte* src, float* dst, std::int64_t n);

// Prefill blocking shared by every ISA (the tile kernels accept any sizes; these keep the
// working set in cache). The weight tile is at most kGemmTileRows x kGemmBlockK floats in
// scratch (128 KiB, L2-resident), plus as much again for the kernel's work copy.
inline constexpr std::int64_t kGemmTileRows = 32;
inline constexpr std::int64_t kGemmBlockK = 1024;  // multiple of 32 (quant block) and of 16 (lanes)
inline constexpr std::int64_t kGemmBlockM = 192;   // most x rows per pass: 192 x 4 KiB stays in L2

}  // namespace sitsrt::cpu::detail
