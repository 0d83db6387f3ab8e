// AVX-512 logit passes (see logit_kernels.hpp). The exp is the C library's expf algorithm (glibc
// 2.28+, from ARM's optimized-routines: x N/ln2 = k + r, 2^(k/N) from a 32-entry table, a cubic
// in r, all in double) with the operation order and fused multiply-adds of its FMA build, so it
// rounds to the same float for every input; logit_kernels.cpp checks that against expf itself
// before the level is used.
#include "cpu/logits/logit_kernels.hpp"

#include "cpu/logits/draw_exp_constants.hpp"
#include "cpu/logits/expf_constants.hpp"
#include "cpu/simd_intrinsics.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace sitsrt::cpu::detail {
namespace {

using namespace expf_constants;

inline __m512i table_part(int part) {
  return _mm512_loadu_si512(kExp2Table.data() + 8 * part);
}

// exp of 8 floats, in double as the library computes it.
inline __m256 exp8(__m256 x) {
  const __m512d xd = _mm512_cvtps_pd(x);
  const __m512d inv_ln2_n = _mm512_set1_pd(kInvLn2N);
  const __m512d shift = _mm512_set1_pd(kShift);
  __m512d kd = _mm512_fmadd_pd(inv_ln2_n, xd, shift);
  const __m512i ki = _mm512_castpd_si512(kd);
  kd = _mm512_sub_pd(kd, shift);
  const __m512d r = _mm512_fmsub_pd(inv_ln2_n, xd, kd);
  // Table slot ki % 32: two 16-entry permutes (index bits 0-3), bit 4 picks between them.
  const __m512i low = _mm512_permutex2var_epi64(table_part(0), ki, table_part(1));
  const __m512i high = _mm512_permutex2var_epi64(table_part(2), ki, table_part(3));
  __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), low, high);
  t = _mm512_add_epi64(t, _mm512_slli_epi64(ki, 47));
  const __m512d z = _mm512_fmadd_pd(_mm512_set1_pd(kC0), r, _mm512_set1_pd(kC1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(kC2), r, _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(z, r2, y);
  return _mm512_cvtpd_ps(_mm512_mul_pd(y, _mm512_castsi512_pd(t)));
}

inline __m512 exp16(__m512 x) {
  const __m256 lo = exp8(_mm512_castps512_ps256(x));
  const __m256 hi = exp8(_mm512_extractf32x8_ps(x, 1));
  __m512 e = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  const __m512i abs_bits = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
  const __mmask16 special = _mm512_cmpge_epu32_mask(abs_bits, _mm512_set1_epi32(static_cast<int>(kSpecialBits)));
  if (special == 0) [[likely]] {
    return e;
  }
  const auto square = [](float v) { return _mm512_mul_ps(_mm512_set1_ps(v), _mm512_set1_ps(v)); };
  e = _mm512_mask_mov_ps(e, _mm512_mask_cmp_ps_mask(special, x, _mm512_set1_ps(kMayUnderflow), _CMP_LT_OQ),
                         square(0x1.4p-75f));
  e = _mm512_mask_mov_ps(e, _mm512_mask_cmp_ps_mask(special, x, _mm512_set1_ps(kUnderflow), _CMP_LT_OQ),
                         square(0x1p-95f));
  e = _mm512_mask_mov_ps(e, _mm512_mask_cmp_ps_mask(special, x, _mm512_set1_ps(kOverflow), _CMP_GT_OQ),
                         square(0x1p97f));
  // NaN and +inf give x + x; -inf took the underflow value (0) above, as in the library.
  const __mmask16 nan_or_inf =
      _mm512_mask_cmpge_epu32_mask(special, abs_bits, _mm512_set1_epi32(0x7f800000)) &
      ~_mm512_cmp_ps_mask(x, _mm512_set1_ps(-std::numeric_limits<float>::infinity()), _CMP_EQ_OQ);
  return _mm512_mask_add_ps(e, nan_or_inf, x, x);
}

inline __mmask16 lanes_below(std::int64_t i, std::int64_t n) {
  const std::int64_t left = n - i;
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

LogitMax max_logit_avx512(const float* logits, std::int64_t n) {
  // Pass 1: the maximum (vmaxps keeps its second operand when the first is NaN, so NaN lanes
  // never win). Pass 2: the first index holding it, whose value is returned so that a signed
  // zero comes out as the scalar loop sees it.
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  __m512 m0 = _mm512_set1_ps(kNegInf);
  __m512 m1 = m0;
  __m512 m2 = m0;
  __m512 m3 = m0;
  std::int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm512_max_ps(_mm512_loadu_ps(logits + i), m0);
    m1 = _mm512_max_ps(_mm512_loadu_ps(logits + i + 16), m1);
    m2 = _mm512_max_ps(_mm512_loadu_ps(logits + i + 32), m2);
    m3 = _mm512_max_ps(_mm512_loadu_ps(logits + i + 48), m3);
  }
  for (; i < n; i += 16) {
    const __mmask16 lanes = lanes_below(i, n);
    m0 = _mm512_mask_max_ps(m0, lanes, _mm512_maskz_loadu_ps(lanes, logits + i), m0);
  }
  const float max = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
  const __m512 target = _mm512_set1_ps(max);
  for (i = 0; i < n; i += 16) {
    const __mmask16 lanes = lanes_below(i, n);
    const __mmask16 hit = _mm512_mask_cmp_ps_mask(lanes, _mm512_maskz_loadu_ps(lanes, logits + i), target, _CMP_EQ_OQ);
    if (hit != 0) {
      const std::int64_t index = i + std::countr_zero(static_cast<unsigned>(hit));
      return {logits[index], index};
    }
  }
  return {kNegInf, -1};  // no number at all
}

ExpSums exp_sums_avx512(const float* logits, std::int64_t n, float max) {
  // The exps are vector work; the two sums stay one add at a time in index order (a chain of
  // dependent double adds, ~4 cycles a logit), as the scalar definition rounds them.
  alignas(64) double terms[16];
  alignas(64) double products[16];
  double sum = 0.0;
  double weighted = 0.0;
  const __m512 shift = _mm512_set1_ps(max);
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = lanes_below(i, n);
    const __m512 shifted = _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, logits + i), shift);
    const __m512 e = exp16(shifted);
    // Left-out terms become +0, which leaves both sums unchanged (neither is ever -0).
    const __mmask16 kept = _mm512_mask_cmp_ps_mask(lanes, e, _mm512_setzero_ps(), _CMP_GT_OQ);
    const auto kept_lo = static_cast<__mmask8>(kept);
    const auto kept_hi = static_cast<__mmask8>(kept >> 8);
    const __m512d e_lo = _mm512_maskz_cvtps_pd(kept_lo, _mm512_castps512_ps256(e));
    const __m512d e_hi = _mm512_maskz_cvtps_pd(kept_hi, _mm512_extractf32x8_ps(e, 1));
    // float x float is exact in double, so the product rounds nowhere.
    _mm512_store_pd(terms, e_lo);
    _mm512_store_pd(terms + 8, e_hi);
    _mm512_store_pd(products, _mm512_maskz_mul_pd(kept_lo, e_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(shifted))));
    _mm512_store_pd(products + 8,
                    _mm512_maskz_mul_pd(kept_hi, e_hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(shifted, 1))));
    for (int j = 0; j < 16; ++j) {
      sum += terms[j];
      weighted += products[j];
    }
  }
  return {sum, weighted};
}

std::int64_t first_above_avx512(const float* logits, std::int64_t from, std::int64_t n, float threshold) {
  const __m512 bound = _mm512_set1_ps(threshold);
  std::int64_t i = from;
  for (; i + 32 <= n; i += 32) {  // two vectors a step: most rows have nothing above
    const __mmask16 a = _mm512_cmp_ps_mask(_mm512_loadu_ps(logits + i), bound, _CMP_GT_OQ);
    const __mmask16 b = _mm512_cmp_ps_mask(_mm512_loadu_ps(logits + i + 16), bound, _CMP_GT_OQ);
    if ((a | b) != 0) {
      const auto both = static_cast<std::uint32_t>(a) | (static_cast<std::uint32_t>(b) << 16);
      return i + std::countr_zero(both);
    }
  }
  for (; i < n; i += 16) {
    const __mmask16 lanes = lanes_below(i, n);
    const __mmask16 hit = _mm512_mask_cmp_ps_mask(lanes, _mm512_maskz_loadu_ps(lanes, logits + i), bound, _CMP_GT_OQ);
    if (hit != 0) return i + std::countr_zero(static_cast<unsigned>(hit));
  }
  return n;
}

void exp_row_avx512(const float* x, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = lanes_below(i, n);
    _mm512_mask_storeu_ps(out + i, lanes, exp16(_mm512_maskz_loadu_ps(lanes, x + i)));
  }
}

// (float) exp(x) for the sampler's draw weights (logit_kernels.hpp): x = (l - max) * inv_temperature <= 0, 8 lanes in
// double: x = n ln2
// + r (|r| <= ln2 / 2), a degree-13 Taylor polynomial in r (truncation below 2^-57, Horner
// rounding a few ulp), scaled by 2^n. A lane whose result lies within 2^-46 (relative) of a
// float rounding boundary is left to the C library: `unsure` marks it. Elsewhere every value
// within that band, the C library's exp among them, rounds to the same float, so the result is
// (float) std::exp(x) without transcribing the library's algorithm. x < -200 gives 0 (exp(x) is
// below 2^-288, far under the smallest float).
inline __m256 draw_exp8(__m512d x, __mmask8& unsure) {
  using namespace draw_exp_constants;
  const __m512d n =
      _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(kInvLn2)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kLn2Hi), x);
  r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kLn2Lo), r);
  __m512d p = _mm512_set1_pd(kTaylor[13]);
  for (int k = 12; k >= 0; --k) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kTaylor[static_cast<std::size_t>(k)]));
  p = _mm512_scalef_pd(p, n);
  const __mmask8 tiny = _mm512_cmp_pd_mask(x, _mm512_set1_pd(kZeroBelow), _CMP_LT_OQ);
  const __m256 lo = _mm512_cvtpd_ps(_mm512_mul_pd(p, _mm512_set1_pd(1.0 - kBand)));
  const __m256 hi = _mm512_cvtpd_ps(_mm512_mul_pd(p, _mm512_set1_pd(1.0 + kBand)));
  unsure = static_cast<__mmask8>(_mm256_cmp_ps_mask(lo, hi, _CMP_NEQ_UQ) & ~tiny);
  return _mm256_maskz_mov_ps(static_cast<__mmask8>(~tiny), lo);
}

void draw_weights_avx512(const float* logits, std::int64_t n, float max, double inv_temperature, float* out) {
  const __m512 m = _mm512_set1_ps(max);
  const __m512d inv_t = _mm512_set1_pd(inv_temperature);
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 lanes = lanes_below(i, n);
    const __m512 l = _mm512_maskz_loadu_ps(lanes, logits + i);
    const __mmask16 numbers = _mm512_mask_cmp_ps_mask(lanes, l, l, _CMP_ORD_Q);
    const __m512 d = _mm512_sub_ps(l, m);  // the scalar form's float subtraction
    __mmask8 unsure_lo = 0, unsure_hi = 0;
    const __m256 w_lo = draw_exp8(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(d)), inv_t), unsure_lo);
    const __m256 w_hi = draw_exp8(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(d, 1)), inv_t), unsure_hi);
    const __m512 w = _mm512_insertf32x8(_mm512_castps256_ps512(w_lo), w_hi, 1);
    _mm512_mask_storeu_ps(out + i, lanes, _mm512_maskz_mov_ps(numbers, w));
    const auto unsure = static_cast<__mmask16>((unsure_lo | (static_cast<unsigned>(unsure_hi) << 8)) & numbers);
    for (unsigned bits = unsure; bits != 0; bits &= bits - 1) {
      const std::int64_t j = i + std::countr_zero(bits);
      out[j] = static_cast<float>(std::exp(static_cast<double>(logits[j] - max) * inv_temperature));
    }
  }
}

constexpr LogitKernels kAvx512{max_logit_avx512, exp_sums_avx512, first_above_avx512, exp_row_avx512,
                               draw_weights_avx512};

}  // namespace

const LogitKernels& logit_kernels_avx512() noexcept {
  return kAvx512;
}

}  // namespace sitsrt::cpu::detail
