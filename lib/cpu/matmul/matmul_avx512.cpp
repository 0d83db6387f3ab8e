// AVX-512 (F/BW/VL/DQ + F16C/FMA) matmul kernels: 16 float lanes.
// Decode dequantizes each block in registers and FMAs it against x (memory-bound: the aim is
// to keep enough loads in flight to stream weights at DRAM speed). Prefill dequantizes a tile
// of up to 32 weight rows with the dequant kernels here, and gemm_tile_avx512.cpp transposes it
// into panels and runs a 12 x 32 outer-product micro-kernel (24 zmm accumulators) over them.
#include "core/quant_blocks.hpp"
#include "cpu/decode_prefetch.hpp"
#include "cpu/matmul/kquant_kernels.hpp"
#include "cpu/matmul/matmul_kernels.hpp"
#include "cpu/repacked_blocks.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <cpuid.h>

#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

// Decode streams each row once from DRAM; the hardware prefetcher alone leaves the core waiting
// on part of the loads (measured: q8_0 7 -> 10 GB/s per core with software prefetch). How far
// ahead, and into which level: decode_prefetch.hpp (prefetch_ahead); past a thread's last row
// it touches harmless addresses.

inline __mmask16 tail_mask(std::int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}

// ---- Float formats: load 16 elements (or a masked tail) as floats. ----

struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m512 load(const std::byte* p) { return _mm512_loadu_ps(p); }
  static __m512 load_tail(const std::byte* p, __mmask16 k) { return _mm512_maskz_loadu_ps(k, p); }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static __m512 load(const std::byte* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 load_tail(const std::byte* p, __mmask16 k) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p)); }
};
struct LoadBF16 {
  static constexpr int kBytes = 2;
  static __m512 widen(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }
  static __m512 load(const std::byte* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static __m512 load_tail(const std::byte* p, __mmask16 k) { return widen(_mm256_maskz_loadu_epi16(k, p)); }
};

// y[r] = W[r, :] . x for float formats, any cols: 2 independent accumulators per row (64
// elements per iteration), with 8 rows per pass 16 chains, so the FMA latency never limits the
// stream (4 accumulators per row allowed only 4 rows in registers; 8 rows with 2 each measured
// faster, F16 at 2 threads: 5 of 5 and 5 of 6 alternating runs, +3-4%). R rows per pass
// share each load of x (x is read at twice (F16/BF16) the weights' bytes, so alone it would
// crowd the load ports), and every row's arithmetic is that of R = 1: results do not depend on
// the grouping. Past its row's end a row's prefetch continues in the next group (qdot_rows).
template <typename L, int R>
inline void matvec_float_rows(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x,
                              float* y) {
  __m512 acc[R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    for (auto& a : acc[r]) a = _mm512_setzero_ps();
  }
  std::int64_t c = 0;
  for (; c + 64 <= cols; c += 64) {
    const DecodePrefetch& policy = prefetch_policy();
    const std::size_t ahead = static_cast<std::size_t>(c) * L::kBytes + policy.row_ahead;
    const std::size_t wrap = ahead >= row_stride ? static_cast<std::size_t>(R - 1) * row_stride : 0;
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const auto* next = reinterpret_cast<const char*>(w + static_cast<std::size_t>(r) * row_stride + ahead + wrap);
#pragma GCC unroll 4
      for (int line = 0; line < L::kBytes; ++line) prefetch_line(next + 64 * line, policy.to_l2);  // 64 elements
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m512 xv = _mm512_loadu_ps(x + c + 16 * q);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::byte* row = w + static_cast<std::size_t>(r) * row_stride;
        acc[r][q % 2] = _mm512_fmadd_ps(L::load(row + (c + 16 * q) * L::kBytes), xv, acc[r][q % 2]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const std::byte* row = w + static_cast<std::size_t>(r) * row_stride;
    std::int64_t t = c;
    for (; t + 16 <= cols; t += 16) acc[r][0] = _mm512_fmadd_ps(L::load(row + t * L::kBytes), _mm512_loadu_ps(x + t), acc[r][0]);
    if (t < cols) {
      const __mmask16 k = tail_mask(cols - t);
      acc[r][1] = _mm512_fmadd_ps(L::load_tail(row + t * L::kBytes, k), _mm512_maskz_loadu_ps(k, x + t), acc[r][1]);
    }
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
  }
}

template <typename L>
void matvec_float_avx512(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                         std::int64_t n_rows) {
  constexpr int kRows = 8;
  std::int64_t r = 0;
  for (; r + kRows <= n_rows; r += kRows) {
    matvec_float_rows<L, kRows>(w + static_cast<std::size_t>(r) * row_stride, row_stride, cols, x, y + r);
  }
  for (; r < n_rows; ++r) matvec_float_rows<L, 1>(w + static_cast<std::size_t>(r) * row_stride, row_stride, cols, x, y + r);
}

template <typename L>
void dequant_float_avx512(const std::byte* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (i % 32 == 0) prefetch_ahead(src + i * L::kBytes);
    _mm512_storeu_ps(dst + i, L::load(src + i * L::kBytes));
  }
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, k, L::load_tail(src + i * L::kBytes, k));
  }
}

// ---- Quantized formats: q(block) gives the block's levels as floats, elements 0..15 in lo
// and 16..31 in hi; the scale (and min) are applied by the callers. ----
// 4- and 5-bit levels are looked up rather than converted: the 16 qs bytes are widened to 32-bit
// lanes once, and vpermps reads only index bits 3:0, so lane j of the widened bytes indexes the
// table with its low nibble directly and, shifted right by 4, with its high nibble. That is 4
// vector ops for 32 levels where mask / widen / subtract / convert took 9, and these kernels
// must out-run DRAM to stay memory-bound.

// The scale at p (fp16) broadcast to 16 lanes: vcvtph2ps takes it straight from memory
// (reading the 6 bytes after it, always inside the block).
inline __m512 broadcast_half_at(const std::uint16_t* p) {
  return _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m512i widen_qs16(const std::uint8_t* qs) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
}
inline std::uint32_t load_qh(const std::uint8_t* qh) {
  std::uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}
// Table index for a Q5 level: the nibble in bits 3:0 plus the 5th bit (bit j of `bits` for lane j).
inline __m512i q5_index(__m512i nibble, std::uint32_t bits) {
  return _mm512_mask_or_epi32(nibble, static_cast<__mmask16>(bits & 0xFFFFu), nibble, _mm512_set1_epi32(16));
}
// Level tables: 16 consecutive values starting at `first`.
inline __m512 levels_from(float first) {
  return _mm512_add_ps(_mm512_set1_ps(first), _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}
// d * level [+ m] for each level: rounded exactly as dequantize_row rounds each element
// (multiply, then add), so the lookups below return bit-identical dequantized weights.
template <bool kMin, typename B>
inline __m512 scaled_levels(const B& b, __m512 levels) {
  const __m512 t = _mm512_mul_ps(levels, broadcast_half_at(&b.d));
  if constexpr (kMin) return _mm512_add_ps(t, broadcast_half_at(&b.m));
  return t;
}

// Each decoder gives values(block) = the 32 dequantized weights (elements 0..15 in lo, 16..31
// in hi), and dot(block, x, acc0, acc1) adding the block's products to two accumulators.

// Q8_0 levels are converted (sign-extend, int -> float); its dot scales the block's partial
// sum once instead of scaling each level (one multiply per block rather than two).
struct DecodeQ8_0 {
  using Block = BlockQ8_0;
  static constexpr int kSize = kQBlock;
  static void levels(const Block& b, __m512& lo, __m512& hi) {
    lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs))));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16))));
  }
  static void values(const Block& b, __m512& lo, __m512& hi) {
    levels(b, lo, hi);
    const __m512 d = broadcast_half_at(&b.d);
    lo = _mm512_mul_ps(lo, d);
    hi = _mm512_mul_ps(hi, d);
  }
  static void dot(const Block& b, const float* x, __m512& acc0, __m512&) {
    __m512 lo, hi;
    levels(b, lo, hi);
    const __m512 p = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(x)));
    acc0 = _mm512_fmadd_ps(p, broadcast_half_at(&b.d), acc0);
  }
};

// 4-bit levels: one table of the block's 16 possible weights, looked up by nibble.
template <typename B, bool kMin>
struct DecodeQ4 {
  using Block = B;
  static constexpr int kSize = kQBlock;
  static void values(const Block& b, __m512& lo, __m512& hi) {
    const __m512 table = scaled_levels<kMin>(b, levels_from(kMin ? 0.0f : -8.0f));
    const __m512i v = widen_qs16(b.qs);
    lo = _mm512_permutexvar_ps(v, table);
    hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
  }
  static void dot(const Block& b, const float* x, __m512& acc0, __m512& acc1) {
    __m512 lo, hi;
    values(b, lo, hi);
    acc0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x), acc0);
    acc1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 16), acc1);
  }
};

// 5-bit levels: two tables (5th bit clear / set) and a two-table permute.
template <typename B, bool kMin>
struct DecodeQ5 {
  using Block = B;
  static constexpr int kSize = kQBlock;
  static void values(const Block& b, __m512& lo, __m512& hi) {
    const __m512 low_half = scaled_levels<kMin>(b, levels_from(kMin ? 0.0f : -16.0f));
    const __m512 high_half = scaled_levels<kMin>(b, levels_from(kMin ? 16.0f : 0.0f));
    const __m512i v = widen_qs16(b.qs);
    const std::uint32_t qh = load_qh(b.qh);
    const __m512i lo_idx = q5_index(_mm512_and_si512(v, _mm512_set1_epi32(0x0F)), qh);
    const __m512i hi_idx = q5_index(_mm512_srli_epi32(v, 4), qh >> 16);
    lo = _mm512_permutex2var_ps(low_half, lo_idx, high_half);
    hi = _mm512_permutex2var_ps(low_half, hi_idx, high_half);
  }
  static void dot(const Block& b, const float* x, __m512& acc0, __m512& acc1) {
    __m512 lo, hi;
    values(b, lo, hi);
    acc0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x), acc0);
    acc1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 16), acc1);
  }
};
using DecodeQ4_0 = DecodeQ4<BlockQ4_0, false>;
using DecodeQ4_1 = DecodeQ4<BlockQ4_1, true>;
using DecodeQ5_0 = DecodeQ5<BlockQ5_0, false>;
using DecodeQ5_1 = DecodeQ5<BlockQ5_1, true>;

// FP8 (64-element blocks) and INT4 g128: dot(block, x, acc0, acc1) adds the block's products (scale applied
// once to the partial sums); values(block, dst) writes its weights as dequantize_row does.

// 32 FP8 E4M3 codes -> their values / 256, exactly: the code in the high byte of a 16-bit lane,
// shifted right arithmetically by one, has E4M3's exponent and mantissa in fp16's fields (bias 7
// vs 15: a factor 2^-8, subnormals included); the mask clears the copied sign. NaN codes become
// +-480 / 256 (never written by the encoder).
inline void fp8x32_over256(const std::uint8_t* codes, __m512& lo, __m512& hi) {
  const __m512i w = _mm512_slli_epi16(_mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes))), 8);
  const __m512i h = _mm512_and_si512(_mm512_srai_epi16(w, 1), _mm512_set1_epi16(static_cast<short>(0xBF80)));
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

struct DecodeFP8_E4M3 {
  using Block = BlockFP8_E4M3;
  static constexpr int kSize = kFp8Block;
  static void dot(const Block& b, const float* x, __m512& acc0, __m512& acc1) {
    __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
    for (int s = 0; s < kFp8Block; s += 32) {
      __m512 lo, hi;
      fp8x32_over256(b.qs + s, lo, hi);
      p0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + s), p0);
      p1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + s + 16), p1);
    }
    const __m512 scale = _mm512_set1_ps(b.d * 256.0f);  // exact: a power of 2
    acc0 = _mm512_fmadd_ps(p0, scale, acc0);
    acc1 = _mm512_fmadd_ps(p1, scale, acc1);
  }
  static void values(const Block& b, float* dst) {
    const __m512 scale = _mm512_set1_ps(b.d * 256.0f);
    for (int s = 0; s < kFp8Block; s += 32) {
      __m512 lo, hi;
      fp8x32_over256(b.qs + s, lo, hi);
      _mm512_storeu_ps(dst + s, _mm512_mul_ps(lo, scale));
      _mm512_storeu_ps(dst + s + 16, _mm512_mul_ps(hi, scale));
    }
  }
};

// ---- FP8 E4M3 decode with AVX512-BF16 (vdpbf16ps), when the CPU has it. ----
// E4M3 -> bf16 needs no conversion instruction: with the code in the high byte of a 16-bit
// lane, an arithmetic shift right by 4 puts E4M3's exponent and mantissa in bf16's fields (bits
// 10..7 and 6..4) and the sign in bit 15 (its copies in 14..11 are masked off); OR-ing exponent
// bits 0x3800 (112, disjoint from the 4-bit exponent) rebiases 7 -> 127 - 8, so the word is
// exactly e4m3(c) / 256 for every code with exponent > 0 (NaN codes: +-480 / 256, as the F16C
// decoder). Exponent-0 codes (zero, subnormals) would come out as (1 + m/8) 2^-15, and
// vdpbf16ps reads bf16 denormals as zero anyway: a block holding any takes the exact F16C path
// with float activations (rare: |w| < 2^-6 d, about 1e-4 of a Gaussian block's weights).
// Per 64 weights: 2 unpacks, 2 shifts, 2 ternary logic ops and 2 vdpbf16ps, against 2
// widenings, 6 shift/mask ops, 4 two-uop vcvtph2ps and 4 FMAs on the F16C path.
// The activations are rounded to bf16 once per call (relative error <= 2^-8 each: small
// against E4M3's 2^-4 of the weights) and stored in the order the unpacks leave the codes in.

bool cpu_has_avx512_bf16() noexcept {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;  // CPUID leaf 7 subleaf 1, EAX bit 5: AVX512_BF16
  return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
}

// x (cols floats, whole 64-blocks) -> bf16, per block the 32 words of unpacklo's order (elements
// 16 L + 0..7 of each 128-bit lane L) and then the 32 of unpackhi's (16 L + 8..15).
__attribute__((target("avx512bf16"))) void fp8_activations_bf16(const float* x, std::int64_t cols,
                                                                 std::uint16_t* out) {
  for (std::int64_t b = 0; b < cols; b += kFp8Block, x += kFp8Block, out += kFp8Block) {
    for (int lane = 0; lane < 4; ++lane) {
      const __m256i v = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(x + 16 * lane)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 8 * lane), _mm256_castsi256_si128(v));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 32 + 8 * lane), _mm256_extracti128_si256(v, 1));
    }
  }
}

// Adds block b's sum of (weight / 256) * x, times d, to acc.
__attribute__((target("avx512bf16"))) inline void fp8_block_bf16(const BlockFP8_E4M3& b, const std::uint16_t* xb,
                                                                 const float* x, __m512& acc) {
  const __m512i codes = _mm512_loadu_si512(b.qs);
  const __m512 d = _mm512_set1_ps(b.d);
  if (_mm512_testn_epi8_mask(codes, _mm512_set1_epi8(0x78)) != 0) {  // an exponent-0 code
    __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
    for (int s = 0; s < kFp8Block; s += 32) {
      __m512 lo, hi;
      fp8x32_over256(b.qs + s, lo, hi);
      p0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + s), p0);
      p1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + s + 16), p1);
    }
    acc = _mm512_fmadd_ps(_mm512_add_ps(p0, p1), d, acc);
    return;
  }
  const __m512i keep = _mm512_set1_epi16(static_cast<short>(0x87F0)), bias = _mm512_set1_epi16(0x3800);
  const __m512i zero = _mm512_setzero_si512();
  // 0xEA: (a & b) | c
  const __m512i lo = _mm512_ternarylogic_epi32(_mm512_srai_epi16(_mm512_unpacklo_epi8(zero, codes), 4), keep, bias, 0xEA);
  const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srai_epi16(_mm512_unpackhi_epi8(zero, codes), 4), keep, bias, 0xEA);
  __m512 p = _mm512_dpbf16_ps(_mm512_setzero_ps(), reinterpret_cast<__m512bh>(lo),
                              reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb)));
  p = _mm512_dpbf16_ps(p, reinterpret_cast<__m512bh>(hi), reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + 32)));
  acc = _mm512_fmadd_ps(p, d, acc);
}

// Widest activation row the BF16 kernel takes (its bf16 copy lives on the stack, 64 KiB: no
// allocation, and no std::vector instantiated with AVX-512 flags, see matmul_kernels.hpp's ODR
// note); wider rows (an FFN wider than 32768) run the F16C kernel.
constexpr std::int64_t kFp8Bf16MaxCols = 32768;

// R rows per pass share the activation loads and stream side by side; every row's arithmetic
// is that of R = 1. Past its row's end a row's prefetch continues in the next group (qdot_rows).
template <int R>
__attribute__((target("avx512bf16"))) inline void fp8_rows_bf16(const std::byte* w, std::size_t row_stride,
                                                                std::int64_t cols, const float* x,
                                                                const std::uint16_t* xb, float* y) {
  const std::int64_t nb = cols / kFp8Block;
  const BlockFP8_E4M3* blocks[R];
  __m512 acc0[R], acc1[R];
  for (int i = 0; i < R; ++i) {
    blocks[i] = reinterpret_cast<const BlockFP8_E4M3*>(w + static_cast<std::size_t>(i) * row_stride);
    acc0[i] = acc1[i] = _mm512_setzero_ps();
  }
  std::int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const DecodePrefetch& policy = prefetch_policy();
    const std::size_t ahead = static_cast<std::size_t>(b) * sizeof(BlockFP8_E4M3) + policy.row_ahead;
    const std::size_t wrap = ahead >= row_stride ? static_cast<std::size_t>(R - 1) * row_stride : 0;
    for (int i = 0; i < R; ++i) {
      const auto* next = reinterpret_cast<const char*>(w + static_cast<std::size_t>(i) * row_stride + ahead + wrap);
      for (int line = 0; line < 3; ++line) prefetch_line(next + 64 * line, policy.to_l2);
      fp8_block_bf16(blocks[i][b], xb + b * kFp8Block, x + b * kFp8Block, acc0[i]);
      fp8_block_bf16(blocks[i][b + 1], xb + (b + 1) * kFp8Block, x + (b + 1) * kFp8Block, acc1[i]);
    }
  }
  for (int i = 0; i < R; ++i) {
    if (b < nb) fp8_block_bf16(blocks[i][b], xb + b * kFp8Block, x + b * kFp8Block, acc0[i]);
    y[i] = 256.0f * _mm512_reduce_add_ps(_mm512_add_ps(acc0[i], acc1[i]));  // exact: a power of 2
  }
}

__attribute__((target("avx512bf16"))) void matvec_fp8_bf16(const std::byte* w, std::size_t row_stride,
                                                            std::int64_t cols, const float* x, float* y,
                                                            std::int64_t n_rows) {
  alignas(64) std::uint16_t xb[kFp8Bf16MaxCols];
  fp8_activations_bf16(x, cols, xb);
  std::int64_t r = 0;
  for (; r + 4 <= n_rows; r += 4) fp8_rows_bf16<4>(w + static_cast<std::size_t>(r) * row_stride, row_stride, cols, x, xb, y + r);
  for (; r < n_rows; ++r) fp8_rows_bf16<1>(w + static_cast<std::size_t>(r) * row_stride, row_stride, cols, x, xb, y + r);
}

// INT4 g128: the table of the block's 16 weights d * (q - z), looked up by nibble as in DecodeQ4.
struct DecodeQ4_G128 {
  using Block = BlockQ4_G128;
  static constexpr int kSize = kGroup128;
  static __m512 table(const Block& b) {
    return _mm512_mul_ps(levels_from(-static_cast<float>(b.zero & 0x0F)), broadcast_half_at(&b.d));
  }
  static void sub_block(const Block& b, __m512 table, int s, __m512& lo, __m512& hi) {
    const __m512i v = widen_qs16(b.qs + 16 * s);
    lo = _mm512_permutexvar_ps(v, table);
    hi = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
  }
  static void dot(const Block& b, const float* x, __m512& acc0, __m512& acc1) {
    const __m512 t = table(b);
    for (int s = 0; s < kGroup128 / kQBlock; ++s) {
      __m512 lo, hi;
      sub_block(b, t, s, lo, hi);
      acc0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + kQBlock * s), acc0);
      acc1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + kQBlock * s + 16), acc1);
    }
  }
  static void values(const Block& b, float* dst) {
    const __m512 t = table(b);
    for (int s = 0; s < kGroup128 / kQBlock; ++s) {
      __m512 lo, hi;
      sub_block(b, t, s, lo, hi);
      _mm512_storeu_ps(dst + kQBlock * s, lo);
      _mm512_storeu_ps(dst + kQBlock * s + 16, hi);
    }
  }
};

template <typename D>
void dequant_scaled_blocks_avx512(const std::byte* src, float* dst, std::int64_t n) {
  const auto* blocks = reinterpret_cast<const typename D::Block*>(src);
  for (std::int64_t b = 0; b < n / D::kSize; ++b) {
    prefetch_ahead(blocks + b);
    D::values(blocks[b], dst + b * D::kSize);
  }
}

// y[r] = W[r, :] . x for block formats: two blocks per iteration, four accumulators, so no
// FMA latency chain limits the stream.
template <typename D>
void matvec_blocks_avx512(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                          std::int64_t n_rows) {
  const std::int64_t nb = cols / D::kSize;
  // Cache lines to prefetch per two blocks: the 32-element formats leave the second line of
  // a pair to the hardware prefetcher; FP8 / INT4 g128 pairs span three lines.
  constexpr int kLines = D::kSize > kQBlock ? 3 : 1;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename D::Block*>(w + static_cast<std::size_t>(r) * row_stride);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    __m512 acc2 = _mm512_setzero_ps(), acc3 = _mm512_setzero_ps();
    std::int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      for (int line = 0; line < kLines; ++line) prefetch_ahead(reinterpret_cast<const std::byte*>(blocks + b) + 64 * line);
      D::dot(blocks[b], x + b * D::kSize, acc0, acc1);
      D::dot(blocks[b + 1], x + (b + 1) * D::kSize, acc2, acc3);
    }
    if (b < nb) D::dot(blocks[b], x + b * D::kSize, acc0, acc1);
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(acc2, acc3)));
  }
}

// Repacked Q8_0/Q4_0 (cpu/repacked_blocks.hpp): each block's values computed as the stored
// format's decoder computes them (d * q, d * (q - 8) by table), so bit-identical to
// dequantize_row. Q4_0R: block i's GGUF qs from its four words (q4_0r_word_offset).
template <WeightLayout kLayout>
void dequant_repacked_avx512(const std::byte* src, float* dst, std::int64_t n) {
  constexpr bool kQ8 = kLayout == WeightLayout::kQ8_0R;
  constexpr std::size_t kBlockBytes = kQ8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  constexpr int kLevelBytes = kQ8 ? kQBlock : kQBlock / 2;
  const std::int64_t nb = n / kQBlock;
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const RepackGroup group = repack_group(g, nb, kBlockBytes);
    const std::byte* levels = src + group.offset;
    const auto* scales = reinterpret_cast<const std::uint16_t*>(levels + group.blocks * kLevelBytes);
    float* out = dst + g * kRepackGroupElements;
    for (int i = 0; i < group.blocks; ++i) {
      if (i % 2 == 0) prefetch_ahead(levels + static_cast<std::size_t>(i) * kBlockBytes);  // as the stored dequant
      const __m512 d = _mm512_set1_ps(_cvtsh_ss(scales[i]));  // 2-byte load: the last scale may end the buffer
      __m512 lo, hi;
      if constexpr (kQ8) {
        const __m128i flip = _mm_set1_epi8(-128);
        const auto* q = reinterpret_cast<const __m128i*>(levels + kQBlock * i);
        lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_xor_si128(_mm_loadu_si128(q), flip)));
        hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_xor_si128(_mm_loadu_si128(q + 1), flip)));
        lo = _mm512_mul_ps(lo, d);
        hi = _mm512_mul_ps(hi, d);
      } else {
        const __m512 table = _mm512_mul_ps(levels_from(-8.0f), d);
        // The block's GGUF qs from its four words; vpermps reads the low 4 bits of each index.
        std::int32_t words[4];
        for (int j = 0; j < 4; ++j) std::memcpy(&words[j], levels + q4_0r_word_offset(group.blocks, i, j), 4);
        const __m512i lo_index = _mm512_cvtepu8_epi32(_mm_setr_epi32(words[0], words[1], words[2], words[3]));
        const __m512i hi_index = _mm512_srli_epi32(lo_index, 4);
        lo = _mm512_permutexvar_ps(lo_index, table);
        hi = _mm512_permutexvar_ps(hi_index, table);
      }
      _mm512_storeu_ps(out + kQBlock * i, lo);
      _mm512_storeu_ps(out + kQBlock * i + 16, hi);
    }
  }
}

// dst = the dequantized weights, bit-identical to dequantize_row.
template <typename D>
void dequant_blocks_avx512(const std::byte* src, float* dst, std::int64_t n) {
  const auto* blocks = reinterpret_cast<const typename D::Block*>(src);
  for (std::int64_t b = 0; b < n / kQBlock; ++b, dst += kQBlock) {
    if (b % 2 == 0) prefetch_ahead(blocks + b);
    __m512 lo, hi;
    D::values(blocks[b], lo, hi);
    _mm512_storeu_ps(dst, lo);
    _mm512_storeu_ps(dst + 16, hi);
  }
}

// FP8R (cpu/repacked_blocks.hpp): decode by the AVX512-FP16 kernel where the CPU has it (the
// only case in which weights are repacked to it, weight_layout.cpp), else the portable one.
void matvec_fp8r_avx512(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                        std::int64_t n_rows) {
  static const bool fp16 = avx512_fp16_supported();
  if (fp16) {
    matvec_fp8r_avx512fp16(w, row_stride, cols, x, y, n_rows);
  } else {
    matvec_fp8r_portable(w, row_stride, cols, x, y, n_rows);
  }
}

// 32 FP8R codes (s m0 e3 e2 e1 e0 m2 m1, repacked_blocks.hpp) -> the E4M3 values / 256 as
// fp32, exactly: fp16 s 0 e3 e2 e1 e0 m2 m1 m0 0000000 takes the code's bits 7 and 5..0 one byte
// up (bit 6 of that byte masked) and m0 from bit 6 to bit 7, as fp8x32_over256 from E4M3.
inline void fp8r_x32_over256(const std::uint8_t* codes, __m512& lo, __m512& hi) {
  const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)));
  const __m512i m0 = _mm512_slli_epi16(_mm512_srli_epi16(b, 6), 7);  // bit 7 = m0 (bit 8 = s, not taken)
  const __m512i h = _mm512_ternarylogic_epi32(_mm512_slli_epi16(b, 8), m0, _mm512_set1_epi16(static_cast<short>(0xBF00)), 0xE4);
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

// Prefill dequant of FP8R: block i's scale d_i = s * r_i (fp32, as unpack_row_fp8r), then the
// values exactly as DecodeFP8_E4M3::values (so as dequantize_row of the stored FP8).
void dequant_fp8r_avx512(const std::byte* src, float* dst, std::int64_t n) {
  const std::int64_t nb = n / kFp8Block;
  for (std::int64_t g = 0; g * kFp8RepackGroupBlocks < nb; ++g) {
    const RepackGroup group = fp8_repack_group(g, nb);
    const std::byte* at = src + group.offset;
    const std::size_t codes = static_cast<std::size_t>(group.blocks) * kFp8Block;
    float s;
    std::memcpy(&s, at + codes, 4);
    for (int i = 0; i < group.blocks; ++i, dst += kFp8Block) {
      float d = s;
      if (group.blocks > 1) {
        std::uint16_t r;
        std::memcpy(&r, at + codes + 4 + 2 * static_cast<std::size_t>(i), 2);
        d = s * _cvtsh_ss(r);
      }
      const __m512 scale = _mm512_set1_ps(d * 256.0f);
      const auto* q = reinterpret_cast<const std::uint8_t*>(at) + static_cast<std::size_t>(i) * kFp8Block;
      for (int h = 0; h < kFp8Block; h += 32) {
        __m512 lo, hi;
        fp8r_x32_over256(q + h, lo, hi);
        _mm512_storeu_ps(dst + h, _mm512_mul_ps(lo, scale));
        _mm512_storeu_ps(dst + h + 16, _mm512_mul_ps(hi, scale));
      }
    }
  }
}

// Prefill dequant of Q4_KR (cpu/repacked_blocks.hpp): per super-block, its 8 scales and mins
// from their 6-bit fields (fl(d sc_s), fl(dmin m_s)), the four 32-byte loads of its sub-blocks'
// words transposed (4 x 4 dwords per 128-bit lane) into each sub-block's 16 level bytes, and the
// values d sc q - dmin m as dequantize_row computes them (multiply, then subtract: no FMA).
void dequant_q4_kr_avx512(const std::byte* src, float* dst, std::int64_t n) {
  const std::int64_t nb = n / kSuperBlock;
  const __m128i low = _mm_set1_epi8(0x0F);
  // Field s of a 48-bit little-endian value at bits 6 s: one variable shift per lane.
  const __m512i field_shifts = _mm512_setr_epi64(0, 6, 12, 18, 24, 30, 36, 42);
  for (std::int64_t u = 0; kQ4KRepackUnitBlocks * u < nb; ++u) {
    const Q4KUnit unit = q4_k_unit(u, nb);
    prefetch_ahead(src + unit.levels);
    prefetch_ahead(src + unit.levels + 64);
    for (int k = 0; k < unit.blocks; ++k) {  // super-block k: sub-blocks 8 k .. 8 k + 7 of the unit
      // 8-byte loads (the unit's mins, d and dmin follow the fields, so they stay inside it): a
      // 6-byte copy is two stores that one 8-byte read cannot forward from.
      std::uint64_t sc_bits = 0, m_bits = 0;
      std::memcpy(&sc_bits, src + unit.scales + 6 * static_cast<std::size_t>(k), 8);
      std::memcpy(&m_bits, src + unit.mins + 6 * static_cast<std::size_t>(k), 8);
      std::uint16_t d, dmin;
      std::memcpy(&d, src + unit.d + 2 * static_cast<std::size_t>(k), 2);
      std::memcpy(&dmin, src + unit.dmin + 2 * static_cast<std::size_t>(k), 2);
      const auto fields = [&](std::uint64_t bits) {
        const __m512i v = _mm512_and_si512(_mm512_srlv_epi64(_mm512_set1_epi64(static_cast<long long>(bits)), field_shifts),
                                           _mm512_set1_epi64(63));
        return _mm256_cvtepi32_ps(_mm512_cvtepi64_epi32(v));
      };
      alignas(32) float dl[8], ml[8];  // fl(d sc_s), fl(dmin m_s)
      _mm256_store_ps(dl, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(d)), fields(sc_bits)));
      _mm256_store_ps(ml, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(dmin)), fields(m_bits)));
      __m256i w[4];  // word j of the 8 sub-blocks, sub-block s in dword s
      for (int j = 0; j < 4; ++j) {
        w[j] = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(src + unit.levels + 32 * static_cast<std::size_t>(unit.blocks * j + k)));
      }
      const __m256i t0 = _mm256_unpacklo_epi32(w[0], w[1]), t1 = _mm256_unpackhi_epi32(w[0], w[1]);
      const __m256i t2 = _mm256_unpacklo_epi32(w[2], w[3]), t3 = _mm256_unpackhi_epi32(w[2], w[3]);
      // r[c]: 128-bit lane h = the 16 level bytes of sub-block 4 h + c.
      const __m256i r[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2), _mm256_unpacklo_epi64(t1, t3),
                            _mm256_unpackhi_epi64(t1, t3)};
      float* out = dst + (kQ4KRepackUnitBlocks * u + k) * kSuperBlock;
      for (int c = 0; c < 4; ++c) {
        for (int h = 0; h < 2; ++h) {
          const int s = 4 * h + c;
          const __m128i bytes = h == 0 ? _mm256_castsi256_si128(r[c]) : _mm256_extracti128_si256(r[c], 1);
          const __m512 scale = _mm512_set1_ps(dl[s]), min = _mm512_set1_ps(ml[s]);
          const __m512 first = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(bytes, low)));  // elements 0..15
          const __m512 second = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(bytes, 4), low)));
          _mm512_storeu_ps(out + 32 * s, _mm512_sub_ps(_mm512_mul_ps(first, scale), min));
          _mm512_storeu_ps(out + 32 * s + 16, _mm512_sub_ps(_mm512_mul_ps(second, scale), min));
        }
      }
    }
  }
}

// Named instances (the table below lists them by format).
constexpr MatvecFn matvec_f32_avx512 = matvec_float_avx512<LoadF32>;
constexpr MatvecFn matvec_f16_avx512 = matvec_float_avx512<LoadF16>;
constexpr MatvecFn matvec_bf16_avx512 = matvec_float_avx512<LoadBF16>;
constexpr MatvecFn matvec_q8_0_avx512 = matvec_blocks_avx512<DecodeQ8_0>;
constexpr MatvecFn matvec_q4_0_avx512 = matvec_blocks_avx512<DecodeQ4_0>;
constexpr MatvecFn matvec_q4_1_avx512 = matvec_blocks_avx512<DecodeQ4_1>;
constexpr MatvecFn matvec_q5_0_avx512 = matvec_blocks_avx512<DecodeQ5_0>;
constexpr MatvecFn matvec_q5_1_avx512 = matvec_blocks_avx512<DecodeQ5_1>;

// FP8 decode: the AVX512-BF16 kernel where the CPU has it (checked once), else F16C.
void matvec_fp8_avx512(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                       std::int64_t n_rows) {
  static const bool bf16 = cpu_has_avx512_bf16();
  if (bf16 && cols <= kFp8Bf16MaxCols) {
    matvec_fp8_bf16(w, row_stride, cols, x, y, n_rows);
  } else {
    matvec_blocks_avx512<DecodeFP8_E4M3>(w, row_stride, cols, x, y, n_rows);
  }
}

constexpr MatmulKernels kAvx512Kernels = {
    {
        {WeightLayout::kF32, matvec_f32_avx512, dequant_float_avx512<LoadF32>},
        {WeightLayout::kF16, matvec_f16_avx512, dequant_float_avx512<LoadF16>},
        {WeightLayout::kBF16, matvec_bf16_avx512, dequant_float_avx512<LoadBF16>},
        {WeightLayout::kQ8_0, matvec_q8_0_avx512, dequant_blocks_avx512<DecodeQ8_0>},
        {WeightLayout::kQ4_0, matvec_q4_0_avx512, dequant_blocks_avx512<DecodeQ4_0>},
        {WeightLayout::kQ4_1, matvec_q4_1_avx512, dequant_blocks_avx512<DecodeQ4_1>},
        {WeightLayout::kQ5_0, matvec_q5_0_avx512, dequant_blocks_avx512<DecodeQ5_0>},
        {WeightLayout::kQ5_1, matvec_q5_1_avx512, dequant_blocks_avx512<DecodeQ5_1>},
        {WeightLayout::kFP8_E4M3, matvec_fp8_avx512, dequant_scaled_blocks_avx512<DecodeFP8_E4M3>},
        {WeightLayout::kQ4_G128, matvec_blocks_avx512<DecodeQ4_G128>, dequant_scaled_blocks_avx512<DecodeQ4_G128>},
        // K-quant section: the AVX2 kernels of matmul_kquant_avx2.cpp
        {WeightLayout::kQ2_K, matvec_kquant_avx2<DType::kQ2_K>, dequant_kquant_avx2<DType::kQ2_K>},
        {WeightLayout::kQ3_K, matvec_kquant_avx2<DType::kQ3_K>, dequant_kquant_avx2<DType::kQ3_K>},
        {WeightLayout::kQ4_K, matvec_kquant_avx2<DType::kQ4_K>, dequant_kquant_avx2<DType::kQ4_K>},
        {WeightLayout::kQ5_K, matvec_kquant_avx2<DType::kQ5_K>, dequant_kquant_avx2<DType::kQ5_K>},
        {WeightLayout::kQ6_K, matvec_kquant_avx2<DType::kQ6_K>, dequant_kquant_avx2<DType::kQ6_K>},
        {WeightLayout::kQ8_K, matvec_kquant_avx2<DType::kQ8_K>, dequant_kquant_avx2<DType::kQ8_K>},
        {WeightLayout::kIQ4_NL, matvec_kquant_avx2<DType::kIQ4_NL>, dequant_kquant_avx2<DType::kIQ4_NL>},
        // repacked section: float decode through dequantize_row (resident weights decode with
        // the integer kernels), prefill dequant vectorized
        {WeightLayout::kQ8_0R, matvec_q8_0r_portable, dequant_repacked_avx512<WeightLayout::kQ8_0R>},
        {WeightLayout::kQ4_0R, matvec_q4_0r_portable, dequant_repacked_avx512<WeightLayout::kQ4_0R>},
        {WeightLayout::kFP8_E4M3R, matvec_fp8r_avx512, dequant_fp8r_avx512},
        {WeightLayout::kQ4_KR, matvec_q4_kr_portable, dequant_q4_kr_avx512},
        {WeightLayout::kQ8_0P, nullptr, nullptr},  // tiled: int8 kernels only (matmul.cpp checks)
    },
    gemm_tile_avx512,
    32,
};
static_assert(formats_in_layout_order(kAvx512Kernels.formats));

}  // namespace

const MatmulKernels& matmul_kernels_avx512() noexcept {
  return kAvx512Kernels;
}

bool avx512_bf16_supported() noexcept {
  return cpu_has_avx512_bf16();
}

void matvec_fp8_avx512_bf16(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                            std::int64_t n_rows) {
  matvec_fp8_avx512(w, row_stride, cols, x, y, n_rows);  // the table's entry, where BF16 exists
}

void matvec_fp8_avx512_f16c(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                            std::int64_t n_rows) {
  matvec_blocks_avx512<DecodeFP8_E4M3>(w, row_stride, cols, x, y, n_rows);
}

}  // namespace sitsrt::cpu::detail
