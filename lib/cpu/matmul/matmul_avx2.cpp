// AVX2 + FMA + F16C matmul kernels: 8 float lanes, 16 ymm registers.
// Same structure as matmul_avx512.cpp; the prefill micro-kernel is 4x3 (12 accumulators +
// 3 weight vectors + 1 x vector = all 16 registers), so tiles are 30 weight rows. (The
// AVX-512 file uses an outer-product kernel instead; with 16 registers the dot form is kept.)
#include "core/quant_blocks.hpp"
#include "cpu/matmul/kquant_kernels.hpp"
#include "cpu/matmul/matmul_kernels.hpp"

#include "cpu/hsum_avx2.hpp"
#include "cpu/simd_intrinsics.hpp"

#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

inline __m256 broadcast_half(std::uint16_t h) {
  return _mm256_set1_ps(_cvtsh_ss(h));
}

// Decode streams rows from DRAM; see matmul_avx512.cpp for why software prefetch pays.
constexpr int kPrefetchBytes = 1536;
inline void prefetch_ahead(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

// Lane mask for the first n (< 8) floats: a sliding window over -1,..,-1,0,..,0.
inline __m256i tail_mask(std::int64_t n) {
  alignas(32) static constexpr std::int32_t kWindow[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kWindow + 8 - n));
}

inline std::uint16_t load_u16(const std::byte* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// ---- Float formats: 8 elements at a time; tails (< 8) element by element. ----

struct LoadF32 {
  static constexpr int kBytes = 4;
  static __m256 load(const std::byte* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static float element(const std::byte* p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
};
struct LoadF16 {
  static constexpr int kBytes = 2;
  static __m256 load(const std::byte* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float element(const std::byte* p) { return _cvtsh_ss(load_u16(p)); }
};
struct LoadBF16 {
  static constexpr int kBytes = 2;
  static __m256 load(const std::byte* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float element(const std::byte* p) {
    const std::uint32_t bits = static_cast<std::uint32_t>(load_u16(p)) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
};

template <typename L>
void matvec_float_avx2(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                       std::int64_t n_rows) {
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const std::byte* row = w + static_cast<std::size_t>(r) * row_stride;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    std::int64_t c = 0;
    for (; c + 32 <= cols; c += 32) {
      prefetch_ahead(row + c * L::kBytes);
      if constexpr (L::kBytes == 4) prefetch_ahead(row + c * L::kBytes + 64);
      acc0 = _mm256_fmadd_ps(L::load(row + c * L::kBytes), _mm256_loadu_ps(x + c), acc0);
      acc1 = _mm256_fmadd_ps(L::load(row + (c + 8) * L::kBytes), _mm256_loadu_ps(x + c + 8), acc1);
      acc2 = _mm256_fmadd_ps(L::load(row + (c + 16) * L::kBytes), _mm256_loadu_ps(x + c + 16), acc2);
      acc3 = _mm256_fmadd_ps(L::load(row + (c + 24) * L::kBytes), _mm256_loadu_ps(x + c + 24), acc3);
    }
    for (; c + 8 <= cols; c += 8) acc0 = _mm256_fmadd_ps(L::load(row + c * L::kBytes), _mm256_loadu_ps(x + c), acc0);
    float tail = 0.0f;
    for (; c < cols; ++c) tail += L::element(row + c * L::kBytes) * x[c];
    y[r] = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3))) + tail;
  }
}

template <typename L>
void dequant_float_avx2(const std::byte* src, float* dst, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, L::load(src + i * L::kBytes));
  for (; i < n; ++i) dst[i] = L::element(src + i * L::kBytes);
}

// ---- Quantized formats: q(block, out) gives the 32 integer levels as floats in four
// 8-lane vectors (elements 0-7, 8-15, 16-23, 24-31). ----

inline __m128i load_qs16(const std::uint8_t* qs) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
}
inline std::uint32_t load_qh(const std::uint8_t* qh) {
  std::uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}
// 16 bits -> 16 bytes: 0x10 where the bit is set (the 5th bit of the Q5 formats, in place).
inline __m128i bits_to_bit4_bytes(std::uint32_t bits16) {
  const __m128i spread = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(bits16)),
                                          _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
  const __m128i bit = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(spread, bit), bit), _mm_set1_epi8(0x10));
}

// The 32 levels of a 4/5-bit block as floats minus `offset`. Nibbles, 5th bit and offset are
// applied on bytes (16 lanes per op) before widening to 8-lane int32 vectors.
template <bool kFifthBit>
inline void unpack_4or5(const std::uint8_t* qs, std::uint32_t qh, int offset, __m256 (&q)[4]) {
  const __m128i v = load_qs16(qs);
  const __m128i mask = _mm_set1_epi8(0x0F);
  __m128i lo = _mm_and_si128(v, mask);                     // elements 0-15
  __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);  // elements 16-31
  if constexpr (kFifthBit) {
    lo = _mm_or_si128(lo, bits_to_bit4_bytes(qh & 0xFFFFu));
    hi = _mm_or_si128(hi, bits_to_bit4_bytes(qh >> 16));
  }
  if (offset != 0) {
    lo = _mm_sub_epi8(lo, _mm_set1_epi8(static_cast<char>(offset)));
    hi = _mm_sub_epi8(hi, _mm_set1_epi8(static_cast<char>(offset)));
  }
  q[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
  q[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
  q[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
  q[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
}

struct DecodeQ8_0 {
  using Block = BlockQ8_0;
  static constexpr bool kHasMin = false;
  static void q(const Block& b, __m256 (&q)[4]) {
    for (int i = 0; i < 4; ++i) {
      const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * i));
      q[i] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    }
  }
};
struct DecodeQ4_0 {
  using Block = BlockQ4_0;
  static constexpr bool kHasMin = false;
  static void q(const Block& b, __m256 (&q)[4]) { unpack_4or5<false>(b.qs, 0, 8, q); }
};
struct DecodeQ4_1 {
  using Block = BlockQ4_1;
  static constexpr bool kHasMin = true;
  static void q(const Block& b, __m256 (&q)[4]) { unpack_4or5<false>(b.qs, 0, 0, q); }
};
struct DecodeQ5_0 {
  using Block = BlockQ5_0;
  static constexpr bool kHasMin = false;
  static void q(const Block& b, __m256 (&q)[4]) { unpack_4or5<true>(b.qs, load_qh(b.qh), 16, q); }
};
struct DecodeQ5_1 {
  using Block = BlockQ5_1;
  static constexpr bool kHasMin = true;
  static void q(const Block& b, __m256 (&q)[4]) { unpack_4or5<true>(b.qs, load_qh(b.qh), 0, q); }
};

// acc += d * (q . x) for one block; min formats also accm += m * sum(x).
template <typename D>
inline void dot_block_avx2(const typename D::Block& b, const float* x, __m256& acc, __m256& accm) {
  __m256 q[4];
  D::q(b, q);
  const __m256 x0 = _mm256_loadu_ps(x), x1 = _mm256_loadu_ps(x + 8);
  const __m256 x2 = _mm256_loadu_ps(x + 16), x3 = _mm256_loadu_ps(x + 24);
  const __m256 p01 = _mm256_fmadd_ps(q[1], x1, _mm256_mul_ps(q[0], x0));
  const __m256 p23 = _mm256_fmadd_ps(q[3], x3, _mm256_mul_ps(q[2], x2));
  acc = _mm256_fmadd_ps(_mm256_add_ps(p01, p23), broadcast_half(b.d), acc);
  if constexpr (D::kHasMin) {
    const __m256 xs = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
    accm = _mm256_fmadd_ps(xs, broadcast_half(b.m), accm);
  }
}

template <typename D>
void matvec_blocks_avx2(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                        std::int64_t n_rows) {
  const std::int64_t nb = cols / kQBlock;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename D::Block*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 accm0 = _mm256_setzero_ps(), accm1 = _mm256_setzero_ps();
    std::int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      prefetch_ahead(blocks + b);
      dot_block_avx2<D>(blocks[b], x + b * kQBlock, acc0, accm0);
      dot_block_avx2<D>(blocks[b + 1], x + (b + 1) * kQBlock, acc1, accm1);
    }
    if (b < nb) dot_block_avx2<D>(blocks[b], x + b * kQBlock, acc0, accm0);
    __m256 sum = _mm256_add_ps(acc0, acc1);
    if constexpr (D::kHasMin) sum = _mm256_add_ps(sum, _mm256_add_ps(accm0, accm1));
    y[r] = hsum(sum);
  }
}

// dst = d * q [+ m], multiply and add rounded separately (matches dequantize_row).
template <typename D>
void dequant_blocks_avx2(const std::byte* src, float* dst, std::int64_t n) {
  const auto* blocks = reinterpret_cast<const typename D::Block*>(src);
  for (std::int64_t b = 0; b < n / kQBlock; ++b, dst += kQBlock) {
    __m256 q[4];
    D::q(blocks[b], q);
    const __m256 d = broadcast_half(blocks[b].d);
    for (int i = 0; i < 4; ++i) {
      __m256 v = _mm256_mul_ps(q[i], d);
      if constexpr (D::kHasMin) v = _mm256_add_ps(v, broadcast_half(blocks[b].m));
      _mm256_storeu_ps(dst + 8 * i, v);
    }
  }
}

// ---- FP8 (64-element blocks) and INT4 g128: one scale per block, applied to the block's partial sum
// (decode) or to each level (dequant: the same one multiply per element as dequantize_row). ----

// 16 FP8 E4M3 codes -> 16 floats equal to the codes' values / 256, exactly: with the code in
// the high byte of a 16-bit lane, an arithmetic shift right by one moves exponent and mantissa
// into fp16's fields (E4M3 bias 7 vs fp16's 15: a factor 2^-8, subnormals included) and the
// mask clears the copied sign. F16C then widens exactly. The NaN codes 0x7F / 0xFF become
// +-480 / 256 (the encoder never writes them). Chosen over a 256-entry table, which on AVX2
// needs vpgatherdd (see docs/performance.md).
inline void fp8x16_over256(const std::uint8_t* codes, __m256& lo, __m256& hi) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  const __m128i zero = _mm_setzero_si128(), mask = _mm_set1_epi16(static_cast<short>(0xBF80));
  const __m128i h_lo = _mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(zero, v), 1), mask);
  const __m128i h_hi = _mm_and_si128(_mm_srai_epi16(_mm_unpackhi_epi8(zero, v), 1), mask);
  lo = _mm256_cvtph_ps(h_lo);
  hi = _mm256_cvtph_ps(h_hi);
}

// q(block, s, q): sub-block s (elements 32s .. 32s + 31) as unscaled levels; scale(block) the
// factor that turns them into weights.
struct DecodeFP8_E4M3 {
  using Block = BlockFP8_E4M3;
  static constexpr int kSize = kFp8Block;
  static void q(const Block& b, int s, __m256 (&q)[4]) {
    fp8x16_over256(b.qs + 32 * s, q[0], q[1]);
    fp8x16_over256(b.qs + 32 * s + 16, q[2], q[3]);
  }
  static __m256 scale(const Block& b) { return _mm256_set1_ps(b.d * 256.0f); }  // exact: a power of 2
};
struct DecodeQ4_G128 {
  using Block = BlockQ4_G128;
  static constexpr int kSize = kGroup128;
  static void q(const Block& b, int s, __m256 (&q)[4]) { unpack_4or5<false>(b.qs + 16 * s, 0, b.zero & 0x0F, q); }
  static __m256 scale(const Block& b) { return broadcast_half(b.d); }
};

template <typename D>
void matvec_scaled_blocks_avx2(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                               std::int64_t n_rows) {
  const std::int64_t nb = cols / D::kSize;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename D::Block*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc = _mm256_setzero_ps();
    for (std::int64_t b = 0; b < nb; ++b) {
      prefetch_ahead(blocks + b);
      if constexpr (sizeof(typename D::Block) > 64) prefetch_ahead(reinterpret_cast<const std::byte*>(blocks + b) + 64);
      __m256 p[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      const float* xb = x + b * D::kSize;
      for (int s = 0; s < D::kSize / kQBlock; ++s) {
        __m256 q[4];
        D::q(blocks[b], s, q);
        for (int i = 0; i < 4; ++i) p[i] = _mm256_fmadd_ps(q[i], _mm256_loadu_ps(xb + 32 * s + 8 * i), p[i]);
      }
      acc = _mm256_fmadd_ps(_mm256_add_ps(_mm256_add_ps(p[0], p[1]), _mm256_add_ps(p[2], p[3])), D::scale(blocks[b]),
                            acc);
    }
    y[r] = hsum(acc);
  }
}

template <typename D>
void dequant_scaled_blocks_avx2(const std::byte* src, float* dst, std::int64_t n) {
  const auto* blocks = reinterpret_cast<const typename D::Block*>(src);
  for (std::int64_t b = 0; b < n / D::kSize; ++b) {
    const __m256 scale = D::scale(blocks[b]);
    for (int s = 0; s < D::kSize / kQBlock; ++s, dst += kQBlock) {
      __m256 q[4];
      D::q(blocks[b], s, q);
      for (int i = 0; i < 4; ++i) _mm256_storeu_ps(dst + 8 * i, _mm256_mul_ps(q[i], scale));
    }
  }
}

// ---- Prefill micro-kernel: y[i, j] (+)= x[i, :k] . w[j, :k], MR x NR register block. ----

constexpr int kMr = 4;
constexpr int kNr = 3;

// [sum(a), sum(b), sum(c), sum(d)].
inline __m128 reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

template <int MR, int NR>
void gemm_micro_avx2(const float* x, std::int64_t ldx, const float* w, std::int64_t ldw, std::int64_t k, float* y,
                     std::int64_t ldy, bool accumulate) {
  __m256 acc[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  std::int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    __m256 wv[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) wv[j] = _mm256_load_ps(w + j * ldw + c);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + c);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  if (c < k) {  // weights are zero padded; x is read only inside the row
    const __m256i mask = tail_mask(k - c);
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = _mm256_load_ps(w + j * ldw + c);
      for (int i = 0; i < MR; ++i)
        acc[i][j] = _mm256_fmadd_ps(_mm256_maskload_ps(x + i * ldx + c, mask), wv, acc[i][j]);
    }
  }
  const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    const __m128 s = reduce4(acc[i][0], NR > 1 ? acc[i][1 % NR] : zero, NR > 2 ? acc[i][2 % NR] : zero, zero);
    alignas(16) float sums[4];
    _mm_store_ps(sums, s);
    float* out = y + i * ldy;
    for (int j = 0; j < NR; ++j) out[j] = accumulate ? out[j] + sums[j] : sums[j];
  }
}

template <int MR>
void gemm_rows_avx2(const float* x, std::int64_t ldx, const float* w, std::int64_t ldw, std::int64_t n, std::int64_t k,
                    float* y, std::int64_t ldy, bool accumulate) {
  std::int64_t j = 0;
  for (; j + kNr <= n; j += kNr) gemm_micro_avx2<MR, kNr>(x, ldx, w + j * ldw, ldw, k, y + j, ldy, accumulate);
  switch (n - j) {
    case 2:
      gemm_micro_avx2<MR, 2>(x, ldx, w + j * ldw, ldw, k, y + j, ldy, accumulate);
      break;
    case 1:
      gemm_micro_avx2<MR, 1>(x, ldx, w + j * ldw, ldw, k, y + j, ldy, accumulate);
      break;
    default:
      break;
  }
}

void gemm_tile_avx2(const float* x, std::int64_t ldx, std::int64_t m, const float* w, std::int64_t ldw, std::int64_t n,
                    std::int64_t k, float* y, std::int64_t ldy, bool accumulate, float* /*work*/) {
  std::int64_t i = 0;
  for (; i + kMr <= m; i += kMr) gemm_rows_avx2<kMr>(x + i * ldx, ldx, w, ldw, n, k, y + i * ldy, ldy, accumulate);
  const float* xr = x + i * ldx;
  float* yr = y + i * ldy;
  switch (m - i) {
    case 3:
      gemm_rows_avx2<3>(xr, ldx, w, ldw, n, k, yr, ldy, accumulate);
      break;
    case 2:
      gemm_rows_avx2<2>(xr, ldx, w, ldw, n, k, yr, ldy, accumulate);
      break;
    case 1:
      gemm_rows_avx2<1>(xr, ldx, w, ldw, n, k, yr, ldy, accumulate);
      break;
    default:
      break;
  }
}

// Named instances (the table below lists them by format).
constexpr MatvecFn matvec_f32_avx2 = matvec_float_avx2<LoadF32>;
constexpr MatvecFn matvec_f16_avx2 = matvec_float_avx2<LoadF16>;
constexpr MatvecFn matvec_bf16_avx2 = matvec_float_avx2<LoadBF16>;
constexpr MatvecFn matvec_q8_0_avx2 = matvec_blocks_avx2<DecodeQ8_0>;
constexpr MatvecFn matvec_q4_0_avx2 = matvec_blocks_avx2<DecodeQ4_0>;
constexpr MatvecFn matvec_q4_1_avx2 = matvec_blocks_avx2<DecodeQ4_1>;
constexpr MatvecFn matvec_q5_0_avx2 = matvec_blocks_avx2<DecodeQ5_0>;
constexpr MatvecFn matvec_q5_1_avx2 = matvec_blocks_avx2<DecodeQ5_1>;

constexpr MatmulKernels kAvx2Kernels = {
    {
        {WeightLayout::kF32, matvec_f32_avx2, dequant_float_avx2<LoadF32>},
        {WeightLayout::kF16, matvec_f16_avx2, dequant_float_avx2<LoadF16>},
        {WeightLayout::kBF16, matvec_bf16_avx2, dequant_float_avx2<LoadBF16>},
        {WeightLayout::kQ8_0, matvec_q8_0_avx2, dequant_blocks_avx2<DecodeQ8_0>},
        {WeightLayout::kQ4_0, matvec_q4_0_avx2, dequant_blocks_avx2<DecodeQ4_0>},
        {WeightLayout::kQ4_1, matvec_q4_1_avx2, dequant_blocks_avx2<DecodeQ4_1>},
        {WeightLayout::kQ5_0, matvec_q5_0_avx2, dequant_blocks_avx2<DecodeQ5_0>},
        {WeightLayout::kQ5_1, matvec_q5_1_avx2, dequant_blocks_avx2<DecodeQ5_1>},
        {WeightLayout::kFP8_E4M3, matvec_scaled_blocks_avx2<DecodeFP8_E4M3>,
         dequant_scaled_blocks_avx2<DecodeFP8_E4M3>},
        {WeightLayout::kQ4_G128, matvec_scaled_blocks_avx2<DecodeQ4_G128>, dequant_scaled_blocks_avx2<DecodeQ4_G128>},
        // K-quant section: the AVX2 kernels of matmul_kquant_avx2.cpp
        {WeightLayout::kQ2_K, matvec_kquant_avx2<DType::kQ2_K>, dequant_kquant_avx2<DType::kQ2_K>},
        {WeightLayout::kQ3_K, matvec_kquant_avx2<DType::kQ3_K>, dequant_kquant_avx2<DType::kQ3_K>},
        {WeightLayout::kQ4_K, matvec_kquant_avx2<DType::kQ4_K>, dequant_kquant_avx2<DType::kQ4_K>},
        {WeightLayout::kQ5_K, matvec_kquant_avx2<DType::kQ5_K>, dequant_kquant_avx2<DType::kQ5_K>},
        {WeightLayout::kQ6_K, matvec_kquant_avx2<DType::kQ6_K>, dequant_kquant_avx2<DType::kQ6_K>},
        {WeightLayout::kQ8_K, matvec_kquant_avx2<DType::kQ8_K>, dequant_kquant_avx2<DType::kQ8_K>},
        {WeightLayout::kIQ4_NL, matvec_kquant_avx2<DType::kIQ4_NL>, dequant_kquant_avx2<DType::kIQ4_NL>},
        // repacked section
        {WeightLayout::kQ8_0R, matvec_q8_0r_portable, dequant_q8_0r_portable},
        {WeightLayout::kQ4_0R, matvec_q4_0r_portable, dequant_q4_0r_portable},
        {WeightLayout::kFP8_E4M3R, matvec_fp8r_portable, dequant_fp8r_portable},
        {WeightLayout::kQ4_KR, matvec_q4_kr_portable, dequant_q4_kr_portable},
        {WeightLayout::kQ8_0P, nullptr, nullptr},  // tiled: int8 kernels only (matmul.cpp checks)
    },
    gemm_tile_avx2,
    30,
};
static_assert(formats_in_layout_order(kAvx2Kernels.formats));

}  // namespace

const MatmulKernels& matmul_kernels_avx2() noexcept {
  return kAvx2Kernels;
}

}  // namespace sitsrt::cpu::detail
