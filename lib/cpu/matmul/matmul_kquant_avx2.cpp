// AVX2 + FMA + F16C kernels of the K-quant super-block formats and IQ4_NL (float activations;
// int8-activation decode for all of them but Q8_K at the end). Decode unpacks each 32-element sub-block to 8-lane float vectors in
// registers, dots it with x and scales the partial sum by the sub-block scale once; the formats
// with a min add fl(dmin * m) * sum(x) per sub-block separately (as the reference formula
// d sc q - dmin m splits). Dequant (prefill tiles, get_rows) reproduces dequantize_row bit for
// bit: multiply, then subtract, each rounded (no FMA). Listed by the AVX2 and AVX-512 tables.
#include "core/kquant_blocks.hpp"
#include "cpu/matmul/kquant_kernels.hpp"
#include "cpu/qdot/qdot_blocks_avx2.hpp"  // prefetch_ahead, hsum, the int8 GEMM's tiling
#include "cpu/qdot/qdot_kernels.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

inline float half_at(const std::uint16_t& h) {
  std::uint16_t v;
  std::memcpy(&v, &h, 2);
  return _cvtsh_ss(v);
}

// 32 levels (bytes) -> four 8-lane float vectors; kSigned picks sign or zero extension.
template <bool kSigned>
inline void widen32(__m256i bytes, __m256 (&q)[4]) {
  const __m128i lo = _mm256_castsi256_si128(bytes), hi = _mm256_extracti128_si256(bytes, 1);
  const auto widen = [](__m128i v) {
    return _mm256_cvtepi32_ps(kSigned ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v));
  };
  q[0] = widen(lo);
  q[1] = widen(_mm_srli_si128(lo, 8));
  q[2] = widen(hi);
  q[3] = widen(_mm_srli_si128(hi, 8));
}

inline __m256i load32(const std::uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// ---- Per-format unpacking: scales(b, dl, ml) writes the per-sub-block fl(d sc) and fl(dmin m)
// (kSub-element sub-blocks), levels(b, k, q) the 32 levels of 32-element group k. ----

// Q4_K / Q5_K 6-bit scales and mins (layout: docs/quantization.md), all 8 pairs at once on
// 32-bit words: word 0 holds scales 0-3 (+ top bits of scales 4-7), word 1 mins 0-3 (+ top bits
// of mins 4-7), word 2 the low nibbles of scales / mins 4-7. Shifting a whole word moves bits
// across bytes, but each mask keeps only bits that came from the intended byte. Writes
// dl[s] = fl(d * scale_s) and ml[s] = fl(dmin * min_s) (32-byte aligned arrays).
inline void scales_k4(const std::uint8_t* packed, float d, float dmin, float* dl, float* ml) {
  std::uint32_t word[3];
  std::memcpy(word, packed, 12);
  const std::uint32_t scales_lo = word[0] & 0x3F3F3F3Fu, mins_lo = word[1] & 0x3F3F3F3Fu;
  const std::uint32_t scales_hi = (word[2] & 0x0F0F0F0Fu) | (((word[0] >> 6) & 0x03030303u) << 4);
  const std::uint32_t mins_hi = ((word[2] >> 4) & 0x0F0F0F0Fu) | (((word[1] >> 6) & 0x03030303u) << 4);
  const __m128i sc = _mm_setr_epi32(static_cast<int>(scales_lo), static_cast<int>(scales_hi), 0, 0);
  const __m128i mn = _mm_setr_epi32(static_cast<int>(mins_lo), static_cast<int>(mins_hi), 0, 0);
  _mm256_store_ps(dl, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc))));
  _mm256_store_ps(ml, _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn))));
}

// Q2_K / Q3_K: group k (elements 32 k .. 32 k + 31) = half n = k / 4, bit pair j = k % 4 of
// qs[32 n + l].
inline __m256i low2_bits(const std::uint8_t* qs, int k) {
  const __m256i v = load32(qs + 32 * (k / 4));
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * (k % 4))), _mm256_set1_epi8(3));
}

struct Q2K {
  using Block = BlockQ2_K;
  static constexpr int kElements = kSuperBlock;
  static constexpr int kSub = 16;
  static constexpr bool kHasMin = true;
  static void scales(const Block& b, float* dl, float* ml) {
    const float d = half_at(b.d), dmin = half_at(b.dmin);
    for (int s = 0; s < 16; ++s) {
      dl[s] = d * static_cast<float>(b.scales[s] & 15);
      ml[s] = dmin * static_cast<float>(b.scales[s] >> 4);
    }
  }
  static void levels(const Block& b, int k, __m256 (&q)[4]) { widen32<false>(low2_bits(b.qs, k), q); }
};
struct Q3K {
  using Block = BlockQ3_K;
  static constexpr int kElements = kSuperBlock;
  static constexpr int kSub = 16;
  static constexpr bool kHasMin = false;
  // 6-bit scales stored + 32 (same arithmetic as unpack_scale_q3_k, see scales_k4).
  static void scales(const Block& b, float* dl, float* /*ml*/) {
    const float d = half_at(b.d);
    for (int s = 0; s < 16; ++s) {
      const int low = s < 8 ? b.scales[s] & 15 : b.scales[s - 8] >> 4;
      const int high = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
      dl[s] = d * static_cast<float>((low | (high << 4)) - 32);
    }
  }
  // level = low 2 bits + 4 * (hmask bit k of byte l) - 4.
  static void levels(const Block& b, int k, __m256 (&q)[4]) {
    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << k));
    const __m256i has = _mm256_cmpeq_epi8(_mm256_and_si256(load32(b.hmask), bit), bit);
    const __m256i u = _mm256_or_si256(low2_bits(b.qs, k), _mm256_and_si256(has, _mm256_set1_epi8(4)));
    widen32<true>(_mm256_sub_epi8(u, _mm256_set1_epi8(4)), q);
  }
};
// IQ4_NL: a 32-element block; the 16 levels are looked up with vpshufb (both 128-bit lanes hold
// the table; lane 0 indexes with the low nibbles = elements 0-15, lane 1 with the high ones).
struct IQ4NL {
  using Block = BlockIQ4_NL;
  static constexpr int kElements = 32;
  static constexpr int kSub = 32;
  static constexpr bool kHasMin = false;
  static void scales(const Block& b, float* dl, float* /*ml*/) { dl[0] = half_at(b.d); }
  static __m256i signed_levels(const Block& b) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m256i index = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1), _mm256_set1_epi8(0x0F));
    const __m256i table = _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
                                           -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    return _mm256_shuffle_epi8(table, index);
  }
  static void levels(const Block& b, int /*k*/, __m256 (&q)[4]) { widen32<true>(signed_levels(b), q); }
};
struct Q4K {
  using Block = BlockQ4_K;
  static constexpr int kElements = kSuperBlock;
  static constexpr int kSub = 32;
  static constexpr bool kHasMin = true;
  static void scales(const Block& b, float* dl, float* ml) { scales_k4(b.scales, half_at(b.d), half_at(b.dmin), dl, ml); }
  static void levels(const Block& b, int k, __m256 (&q)[4]) {
    const __m256i v = load32(b.qs + 32 * (k / 2));
    widen32<false>(_mm256_and_si256(k % 2 == 0 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F)), q);
  }
};
struct Q5K {
  using Block = BlockQ5_K;
  static constexpr int kElements = kSuperBlock;
  static constexpr int kSub = 32;
  static constexpr bool kHasMin = true;
  static void scales(const Block& b, float* dl, float* ml) { scales_k4(b.scales, half_at(b.d), half_at(b.dmin), dl, ml); }
  static void levels(const Block& b, int k, __m256 (&q)[4]) {
    const __m256i v = load32(b.qs + 32 * (k / 2));
    const __m256i nibble = _mm256_and_si256(k % 2 == 0 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << k));
    const __m256i has = _mm256_cmpeq_epi8(_mm256_and_si256(load32(b.qh), bit), bit);
    widen32<false>(_mm256_or_si256(nibble, _mm256_and_si256(has, _mm256_set1_epi8(16))), q);
  }
};
struct Q6K {
  using Block = BlockQ6_K;
  static constexpr int kElements = kSuperBlock;
  static constexpr int kSub = 16;
  static constexpr bool kHasMin = false;
  static void scales(const Block& b, float* dl, float* /*ml*/) {
    const float d = half_at(b.d);
    for (int s = 0; s < 16; ++s) dl[s] = d * static_cast<float>(b.scales[s]);
  }
  // Group k = 4 h + j: low nibble (j >> 1) of ql[64 h + 32 (j & 1) + l], bits 2 j of qh[32 h + l].
  static void levels(const Block& b, int k, __m256 (&q)[4]) {
    const int h = k / 4, j = k % 4;
    const __m256i low_src = load32(b.ql + 64 * h + 32 * (j & 1));
    const __m256i low = _mm256_and_si256(j < 2 ? low_src : _mm256_srli_epi16(low_src, 4), _mm256_set1_epi8(0x0F));
    const __m256i high_src = load32(b.qh + 32 * h);
    const __m256i high = _mm256_and_si256(_mm256_srl_epi16(high_src, _mm_cvtsi32_si128(2 * j)), _mm256_set1_epi8(3));
    const __m256i u = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));  // 0..63, no carry across bytes
    widen32<true>(_mm256_sub_epi8(u, _mm256_set1_epi8(32)), q);
  }
};
struct Q8K {
  using Block = BlockQ8_K;
  static constexpr int kElements = kSuperBlock;
  static constexpr int kSub = 256;  // one scale for the whole block
  static constexpr bool kHasMin = false;
  static void scales(const Block& b, float* dl, float* /*ml*/) { std::memcpy(dl, &b.d, 4); }
  static void levels(const Block& b, int k, __m256 (&q)[4]) {
    widen32<true>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * k)), q);
  }
};

template <typename F>
void matvec_k_avx2(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                   std::int64_t n_rows) {
  const std::int64_t nb = cols / F::kElements;
  constexpr int kScales = F::kElements / F::kSub > 0 ? F::kElements / F::kSub : 1;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename F::Block*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (std::int64_t b = 0; b < nb; ++b) {
      prefetch_ahead(blocks + b);
      alignas(32) float dl[kScales], ml[kScales > 8 ? kScales : 8];
      F::scales(blocks[b], dl, ml);
      const float* xb = x + b * F::kElements;
      __m256 block_sum = _mm256_setzero_ps();  // Q8_K: one scale per block
#pragma GCC unroll 8
      for (int k = 0; k < F::kElements / 32; ++k) {  // unrolled: per-group shifts become immediates
        __m256 q[4];
        F::levels(blocks[b], k, q);
        const float* xk = xb + 32 * k;
        const __m256 x0 = _mm256_loadu_ps(xk), x1 = _mm256_loadu_ps(xk + 8);
        const __m256 x2 = _mm256_loadu_ps(xk + 16), x3 = _mm256_loadu_ps(xk + 24);
        const __m256 p01 = _mm256_fmadd_ps(q[1], x1, _mm256_mul_ps(q[0], x0));
        const __m256 p23 = _mm256_fmadd_ps(q[3], x3, _mm256_mul_ps(q[2], x2));
        if constexpr (F::kSub == 32) {
          acc = _mm256_fmadd_ps(_mm256_add_ps(p01, p23), _mm256_broadcast_ss(dl + k), acc);
          if constexpr (F::kHasMin) {
            const __m256 xs = _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3));
            accm = _mm256_fmadd_ps(xs, _mm256_broadcast_ss(ml + k), accm);
          }
        } else if constexpr (F::kSub == 16) {
          acc = _mm256_fmadd_ps(p01, _mm256_broadcast_ss(dl + 2 * k), acc);
          acc = _mm256_fmadd_ps(p23, _mm256_broadcast_ss(dl + 2 * k + 1), acc);
          if constexpr (F::kHasMin) {
            accm = _mm256_fmadd_ps(_mm256_add_ps(x0, x1), _mm256_broadcast_ss(ml + 2 * k), accm);
            accm = _mm256_fmadd_ps(_mm256_add_ps(x2, x3), _mm256_broadcast_ss(ml + 2 * k + 1), accm);
          }
        } else {
          block_sum = _mm256_add_ps(block_sum, _mm256_add_ps(p01, p23));
        }
      }
      if constexpr (F::kSub == kSuperBlock) acc = _mm256_fmadd_ps(block_sum, _mm256_broadcast_ss(dl), acc);
    }
    y[r] = F::kHasMin ? hsum(acc) - hsum(accm) : hsum(acc);
  }
}

template <typename F>
void dequant_k_avx2(const std::byte* src, float* dst, std::int64_t n) {
  const auto* blocks = reinterpret_cast<const typename F::Block*>(src);
  constexpr int kScales = F::kElements / F::kSub > 0 ? F::kElements / F::kSub : 1;
  for (std::int64_t b = 0; b < n / F::kElements; ++b) {
    alignas(32) float dl[kScales], ml[kScales > 8 ? kScales : 8];
    F::scales(blocks[b], dl, ml);
#pragma GCC unroll 8
    for (int k = 0; k < F::kElements / 32; ++k) {
      __m256 q[4];
      F::levels(blocks[b], k, q);
      float* out = dst + b * F::kElements + 32 * k;
      for (int i = 0; i < 4; ++i) {
        const int s = (32 * k + 8 * i) / F::kSub;
        __m256 v = _mm256_mul_ps(q[i], _mm256_broadcast_ss(dl + s));
        if constexpr (F::kHasMin) v = _mm256_sub_ps(v, _mm256_broadcast_ss(ml + s));
        _mm256_storeu_ps(out + 8 * i, v);
      }
    }
  }
}

// ---- Int8 activations (qdot_kernels.hpp): a super-block spans 8 activation blocks. ----

inline __m256i dot_lanes_unsigned(__m256i u, const std::int8_t* q) {  // u <= 15: pair sums fit int16
  const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
}

// Q4_K / Q5_K levels of sub-blocks 2 p (u0) and 2 p + 1 (u1); qh: the Q5_K block's high bits.
template <bool kFifthBit, typename Block>
inline void k4_levels(const Block& blk, __m256i qh, int p, __m256i& u0, __m256i& u1) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i v = load32(blk.qs + 32 * p);
  u0 = _mm256_and_si256(v, low4);
  u1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
  if constexpr (kFifthBit) {  // bit 2p / 2p + 1 of qh[l] -> 16
    const __m256i bit0 = _mm256_set1_epi8(static_cast<char>(1 << (2 * p)));
    const __m256i bit1 = _mm256_set1_epi8(static_cast<char>(2 << (2 * p)));
    const __m256i sixteen = _mm256_set1_epi8(16);
    u0 = _mm256_or_si256(u0, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit0), bit0), sixteen));
    u1 = _mm256_or_si256(u1, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit1), bit1), sixteen));
  }
}

// Q4_K / Q5_K: sub-block s is activation block 8 B + s; mins use ds of the 8 blocks as one
// vector. Q5_K levels (<= 31) still keep vpmaddubsw's int16 pair sums below 2 * 31 * 127.
template <bool kFifthBit, typename Block>
void qdot_k4(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  const std::int64_t nb = x.blocks / 8;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const Block*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (std::int64_t B = 0; B < nb; ++B) {
      prefetch_ahead(blocks + B);
      const Block& blk = blocks[B];
      alignas(32) float dl[8], ml[8];
      scales_k4(blk.scales, half_at(blk.d), half_at(blk.dmin), dl, ml);
      __m256i qh = _mm256_setzero_si256();
      if constexpr (kFifthBit) qh = load32(blk.qh);
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        __m256i u0, u1;
        k4_levels<kFifthBit>(blk, qh, p, u0, u1);
        const std::int64_t b0 = 8 * B + 2 * p;
        const __m256i lanes0 = dot_lanes_unsigned(u0, x.qs + 32 * b0);
        const __m256i lanes1 = dot_lanes_unsigned(u1, x.qs + 32 * b0 + 32);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes0),
                               _mm256_mul_ps(_mm256_broadcast_ss(dl + 2 * p), _mm256_load_ps(x.d8 + 8 * b0)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes1),
                               _mm256_mul_ps(_mm256_broadcast_ss(dl + 2 * p + 1), _mm256_load_ps(x.d8 + 8 * b0 + 8)),
                               acc1);
      }
      accm = _mm256_fmadd_ps(_mm256_load_ps(ml), _mm256_loadu_ps(x.ds + 8 * B), accm);
    }
    y[r] = hsum(_mm256_add_ps(acc0, acc1)) - hsum(accm);
  }
}

// |w| against sign(w) q for signed 8-bit levels with |w| <= 127 (pair sums <= 2 * 127 * 127).
inline __m256i dot_lanes_signed(__m256i wv, const std::int8_t* q) {
  const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xq, wv)),
                           _mm256_set1_epi16(1));
}

// Q2_K / Q3_K: group k is activation block 8 B + k; lanes 0-3 / 4-7 are its sub-blocks 2 k and
// 2 k + 1. Q3_K's signed levels (-4..3) use the sign trick; Q2_K's unsigned levels (0..3) go
// straight into vpmaddubsw and its mins take the half sums of q from a second vpmaddubsw of ones.
template <typename F>
void qdot_k2(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  constexpr bool kQ2 = F::kHasMin;
  const std::int64_t nb = x.blocks / 8;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename F::Block*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (std::int64_t B = 0; B < nb; ++B) {
      prefetch_ahead(blocks + B);
      const auto& blk = blocks[B];
      alignas(32) float dl[16], ml[16];
      F::scales(blk, dl, ml);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const std::int64_t b = 8 * B + k;
        const __m256 d8 = _mm256_load_ps(x.d8 + 8 * b);
        const __m256 scales = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(dl[2 * k])),
                                                   _mm_set1_ps(dl[2 * k + 1]), 1);
        __m256i lanes;
        __m256& acc = k % 2 == 0 ? acc0 : acc1;
        if constexpr (kQ2) {
          const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * b));
          lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(low2_bits(blk.qs, k), xq), _mm256_set1_epi16(1));
          const __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), xq), _mm256_set1_epi16(1));
          const __m256 mins = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(ml[2 * k])),
                                                   _mm_set1_ps(ml[2 * k + 1]), 1);
          acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(mins, d8), acc);
        } else {
          const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << k));
          const __m256i has = _mm256_cmpeq_epi8(_mm256_and_si256(load32(blk.hmask), bit), bit);
          const __m256i u = _mm256_or_si256(low2_bits(blk.qs, k), _mm256_and_si256(has, _mm256_set1_epi8(4)));
          lanes = dot_lanes_signed(_mm256_sub_epi8(u, _mm256_set1_epi8(4)), x.qs + 32 * b);
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(scales, d8), acc);
      }
    }
    y[r] = hsum(_mm256_add_ps(acc0, acc1));
  }
}

// IQ4_NL: one activation block per weight block, levels from the vpshufb table.
void qdot_iq4_nl(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const BlockIQ4_NL*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const auto block = [&](std::int64_t b, __m256& acc) {
      const __m256i lanes = dot_lanes_signed(IQ4NL::signed_levels(blocks[b]), x.qs + 32 * b);
      const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(half_at(blocks[b].d)), _mm256_load_ps(x.d8 + 8 * b));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), scale, acc);
    };
    std::int64_t b = 0;
    for (; b + 2 <= x.blocks; b += 2) {
      prefetch_ahead(blocks + b);
      block(b, acc0);
      block(b + 1, acc1);
    }
    if (b < x.blocks) block(b, acc0);
    y[r] = hsum(_mm256_add_ps(acc0, acc1));
  }
}

// fl(d * scale) of Q6_K sub-blocks 8 h .. 8 h + 7, one vector per half h.
inline void q6_k_scales(const BlockQ6_K& blk, __m256 (&dl)[2]) {
  const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
  const __m256 d = _mm256_set1_ps(half_at(blk.d));
  dl[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
  dl[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))));
}
// The signed levels of activation block 4 h + j of the super-block.
inline __m256i q6_k_levels(const BlockQ6_K& blk, int h, int j) {
  const __m256i ql = load32(blk.ql + 64 * h + 32 * (j & 1)), qh = load32(blk.qh + 32 * h);
  const __m256i low = _mm256_and_si256(j < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0F));
  const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), _mm256_set1_epi8(3));
  return _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32));
}
// Lanes 0-3: the scale of sub-block 2 j of half dl, lanes 4-7: of 2 j + 1.
inline __m256 q6_k_pair_scales(__m256 dl, int j) {
  return _mm256_permutevar8x32_ps(
      dl, _mm256_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1));
}

// Q6_K: signed levels u - 32 in [-32, 31]; as Q8_0 in qdot_avx2.cpp, |w| against sign(w) q keeps
// the int16 pair sums within 2 * 32 * 127. Lanes 0-3 of a block are its first 16 elements
// (scale 2 k), lanes 4-7 the second 16 (scale 2 k + 1).
void qdot_q6_k(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  const std::int64_t nb = x.blocks / 8;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const BlockQ6_K*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (std::int64_t B = 0; B < nb; ++B) {
      prefetch_ahead(blocks + B);
      const BlockQ6_K& blk = blocks[B];
      __m256 dl[2];
      q6_k_scales(blk, dl);
      for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const __m256i wv = q6_k_levels(blk, h, j);
          const std::int64_t b = 8 * B + 4 * h + j;
          const __m256i lanes = dot_lanes_signed(wv, x.qs + 32 * b);
          const __m256 scales = q6_k_pair_scales(dl[h], j);
          __m256& acc = j % 2 == 0 ? acc0 : acc1;
          acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(scales, _mm256_load_ps(x.d8 + 8 * b)), acc);
        }
      }
    }
    y[r] = hsum(_mm256_add_ps(acc0, acc1));
  }
}

template <DType kType>
struct Avx2Format;
template <>
struct Avx2Format<DType::kQ2_K> : Q2K {};
template <>
struct Avx2Format<DType::kQ3_K> : Q3K {};
template <>
struct Avx2Format<DType::kIQ4_NL> : IQ4NL {};
template <>
struct Avx2Format<DType::kQ4_K> : Q4K {};
template <>
struct Avx2Format<DType::kQ5_K> : Q5K {};
template <>
struct Avx2Format<DType::kQ6_K> : Q6K {};
template <>
struct Avx2Format<DType::kQ8_K> : Q8K {};

// ---- Int8 GEMM (m > 1 activation rows, QgemmFn of qdot_kernels.hpp) ----
// R weight rows x C activation rows. Per (row, activation) pair exactly the float operations of
// qdot_k4 / qdot_q6_k (the same scale products from the same dl / ml, the FMA sequence into the
// same accumulators, the same reduction), so each output is bit-identical to the decode kernel's;
// the levels and scales are unpacked once per weight row for the C activation rows.
template <bool kFifthBit, typename Block>
struct K4Tile {
  template <int R, int C>
  struct Of {
    static void run(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, float* y, std::int64_t ldy) {
      const std::int64_t nb = x[0].blocks / 8;
      const Block* rows[R];
      __m256 acc0[R][C], acc1[R][C], accm[R][C];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        rows[r] = reinterpret_cast<const Block*>(w + static_cast<std::size_t>(r) * row_stride);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) acc0[r][c] = acc1[r][c] = accm[r][c] = _mm256_setzero_ps();
      }
      for (std::int64_t B = 0; B < nb; ++B) {
        alignas(32) float dl[R][8], ml[R][8];
        __m256i qh[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          prefetch_ahead(rows[r] + B);
          const Block& blk = rows[r][B];
          scales_k4(blk.scales, half_at(blk.d), half_at(blk.dmin), dl[r], ml[r]);
          qh[r] = _mm256_setzero_si256();
          if constexpr (kFifthBit) qh[r] = load32(blk.qh);
        }
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
          __m256i u0[R], u1[R];
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) k4_levels<kFifthBit>(rows[r][B], qh[r], p, u0[r], u1[r]);
          const std::int64_t b0 = 8 * B + 2 * p;
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            const __m256 d0 = _mm256_load_ps(x[c].d8 + 8 * b0), d1 = _mm256_load_ps(x[c].d8 + 8 * b0 + 8);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
              const __m256i lanes0 = dot_lanes_unsigned(u0[r], x[c].qs + 32 * b0);
              const __m256i lanes1 = dot_lanes_unsigned(u1[r], x[c].qs + 32 * b0 + 32);
              acc0[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes0),
                                           _mm256_mul_ps(_mm256_broadcast_ss(dl[r] + 2 * p), d0), acc0[r][c]);
              acc1[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes1),
                                           _mm256_mul_ps(_mm256_broadcast_ss(dl[r] + 2 * p + 1), d1), acc1[r][c]);
            }
          }
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256 ds = _mm256_loadu_ps(x[c].ds + 8 * B);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) accm[r][c] = _mm256_fmadd_ps(_mm256_load_ps(ml[r]), ds, accm[r][c]);
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) y[c * ldy + r] = hsum(_mm256_add_ps(acc0[r][c], acc1[r][c])) - hsum(accm[r][c]);
      }
    }
  };
};

template <int R, int C>
struct Q6KTile {
  static void run(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, float* y, std::int64_t ldy) {
    const std::int64_t nb = x[0].blocks / 8;
    const BlockQ6_K* rows[R];
    __m256 acc[2][R][C];  // qdot_q6_k's acc0 (even j) and acc1 (odd j)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      rows[r] = reinterpret_cast<const BlockQ6_K*>(w + static_cast<std::size_t>(r) * row_stride);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[0][r][c] = acc[1][r][c] = _mm256_setzero_ps();
    }
    for (std::int64_t B = 0; B < nb; ++B) {
      __m256 dl[R][2];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        prefetch_ahead(rows[r] + B);
        q6_k_scales(rows[r][B], dl[r]);
      }
      for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const std::int64_t b = 8 * B + 4 * h + j;
          __m256i wv[R], abs_w[R];
          __m256 scales[R];
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            wv[r] = q6_k_levels(rows[r][B], h, j);
            abs_w[r] = _mm256_sign_epi8(wv[r], wv[r]);
            scales[r] = q6_k_pair_scales(dl[r][h], j);
          }
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(x[c].qs + 32 * b));
            const __m256 d8 = _mm256_load_ps(x[c].d8 + 8 * b);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {  // dot_lanes_signed with |w| hoisted
              const __m256i lanes =
                  _mm256_madd_epi16(_mm256_maddubs_epi16(abs_w[r], _mm256_sign_epi8(xq, wv[r])), _mm256_set1_epi16(1));
              acc[j % 2][r][c] =
                  _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(scales[r], d8), acc[j % 2][r][c]);
            }
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) y[c * ldy + r] = hsum(_mm256_add_ps(acc[0][r][c], acc[1][r][c]));
    }
  }
};

}  // namespace

template <DType kType>
void matvec_kquant_avx2(const std::byte* w, std::size_t row_stride, std::int64_t cols, const float* x, float* y,
                        std::int64_t n_rows) {
  matvec_k_avx2<Avx2Format<kType>>(w, row_stride, cols, x, y, n_rows);
}
template <DType kType>
void dequant_kquant_avx2(const std::byte* src, float* dst, std::int64_t n) {
  dequant_k_avx2<Avx2Format<kType>>(src, dst, n);
}

template <DType kType>
void qdot_kquant_avx2(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                      std::int64_t n_rows) {
  if constexpr (kType == DType::kQ2_K) {
    qdot_k2<Q2K>(w, row_stride, x, y, n_rows);
  } else if constexpr (kType == DType::kQ3_K) {
    qdot_k2<Q3K>(w, row_stride, x, y, n_rows);
  } else if constexpr (kType == DType::kQ4_K) {
    qdot_k4<false, BlockQ4_K>(w, row_stride, x, y, n_rows);
  } else if constexpr (kType == DType::kQ5_K) {
    qdot_k4<true, BlockQ5_K>(w, row_stride, x, y, n_rows);
  } else if constexpr (kType == DType::kQ6_K) {
    qdot_q6_k(w, row_stride, x, y, n_rows);
  } else {
    static_assert(kType == DType::kIQ4_NL);
    qdot_iq4_nl(w, row_stride, x, y, n_rows);
  }
}

template void qdot_kquant_avx2<DType::kQ2_K>(const std::byte*, std::size_t, const QuantizedRow&, float*, std::int64_t);
template void qdot_kquant_avx2<DType::kQ3_K>(const std::byte*, std::size_t, const QuantizedRow&, float*, std::int64_t);
template void qdot_kquant_avx2<DType::kQ4_K>(const std::byte*, std::size_t, const QuantizedRow&, float*, std::int64_t);
template void qdot_kquant_avx2<DType::kQ5_K>(const std::byte*, std::size_t, const QuantizedRow&, float*, std::int64_t);
template void qdot_kquant_avx2<DType::kQ6_K>(const std::byte*, std::size_t, const QuantizedRow&, float*, std::int64_t);
template void qdot_kquant_avx2<DType::kIQ4_NL>(const std::byte*, std::size_t, const QuantizedRow&, float*,
                                               std::int64_t);

#define SITSRT_INSTANTIATE_KQUANT_AVX2(type)                                                                  \
  template void matvec_kquant_avx2<type>(const std::byte*, std::size_t, std::int64_t, const float*, float*, \
                                         std::int64_t);                                                   \
  template void dequant_kquant_avx2<type>(const std::byte*, float*, std::int64_t)
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kQ2_K);
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kQ3_K);
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kQ4_K);
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kQ5_K);
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kQ6_K);
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kQ8_K);
SITSRT_INSTANTIATE_KQUANT_AVX2(DType::kIQ4_NL);
#undef SITSRT_INSTANTIATE_KQUANT_AVX2

QgemmFn qgemm_kquant_avx2(DType type) noexcept {
  // 2 weight rows x 2 activation rows (Q4_K / Q5_K: 12 accumulators) and 2 x 3 (Q6_K: 12).
  switch (type) {
    case DType::kQ4_K:
      return qgemm_tiles<K4Tile<false, BlockQ4_K>::Of, 2, 2>;
    case DType::kQ5_K:
      return qgemm_tiles<K4Tile<true, BlockQ5_K>::Of, 2, 2>;
    case DType::kQ6_K:
      return qgemm_tiles<Q6KTile, 2, 3>;
    default:
      return nullptr;
  }
}

}  // namespace sitsrt::cpu::detail
