// Internal, for the K-quant AVX2 files only (matmul/matmul_kquant_avx2.cpp, and through
// qdot/qdot_kquant_avx2.hpp qdot/qdot_kquant_avxvnni.cpp): loads, widening and the per-format
// scale unpacking that the float and the int8-activation kernels share. Internal linkage
// (anonymous namespace): each including file compiles its own copy under its own flags (ODR note
// in matmul_kernels.hpp).
#pragma once

#include "core/kquant_blocks.hpp"
#include "cpu/qdot/qdot_blocks_avx2.hpp"  // prefetch_ahead, hsum, byte_dot, the int8 GEMM's tiling
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
    const __m256i index = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
                                           _mm256_set1_epi8(0x0F));
    const __m256i table = _mm256_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
                                           -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    return _mm256_shuffle_epi8(table, index);
  }
  static void levels(const Block& b, int /*k*/, __m256 (&q)[4]) { widen32<true>(signed_levels(b), q); }
};
// Q4_K and Q5_K: the same 6-bit scales and mins; Q5_K adds a fifth bit per level from qh.
template <typename B, bool kFifthBit>
struct K4Format {
  using Block = B;
  static constexpr int kElements = kSuperBlock;
  static constexpr int kSub = 32;
  static constexpr bool kHasMin = true;
  static void scales(const Block& b, float* dl, float* ml) {
    scales_k4(b.scales, half_at(b.d), half_at(b.dmin), dl, ml);
  }
  static void levels(const Block& b, int k, __m256 (&q)[4]) {
    const __m256i v = load32(b.qs + 32 * (k / 2));
    __m256i u = _mm256_and_si256(k % 2 == 0 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
    if constexpr (kFifthBit) {
      const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << k));
      const __m256i has = _mm256_cmpeq_epi8(_mm256_and_si256(load32(b.qh), bit), bit);
      u = _mm256_or_si256(u, _mm256_and_si256(has, _mm256_set1_epi8(16)));
    }
    widen32<false>(u, q);
  }
};
using Q4K = K4Format<BlockQ4_K, false>;
using Q5K = K4Format<BlockQ5_K, true>;
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

}  // namespace
}  // namespace sitsrt::cpu::detail
