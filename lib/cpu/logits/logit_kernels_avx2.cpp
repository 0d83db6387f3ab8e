// AVX2 logit passes (see logit_kernels.hpp): the AVX-512 file's algorithms at 8 float (4 double)
// lanes, for CPUs without AVX-512. The exp is the same transcription of the C library's expf,
// with a gather for the table.
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

// exp of 4 floats, in double as the library computes it.
inline __m128 exp4(__m128 x) {
  const __m256d xd = _mm256_cvtps_pd(x);
  const __m256d inv_ln2_n = _mm256_set1_pd(kInvLn2N);
  const __m256d shift = _mm256_set1_pd(kShift);
  __m256d kd = _mm256_fmadd_pd(inv_ln2_n, xd, shift);
  const __m256i ki = _mm256_castpd_si256(kd);
  kd = _mm256_sub_pd(kd, shift);
  const __m256d r = _mm256_fmsub_pd(inv_ln2_n, xd, kd);
  const __m256i slot = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
  __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kExp2Table.data()), slot, 8);
  t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
  const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(kC0), r, _mm256_set1_pd(kC1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(kC2), r, _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(z, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, _mm256_castsi256_pd(t)));
}

inline __m256 exp8(__m256 x) {
  __m256 e = _mm256_set_m128(exp4(_mm256_extractf128_ps(x, 1)), exp4(_mm256_castps256_ps128(x)));
  const __m256i abs_bits = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff));
  const __m256i special = _mm256_cmpgt_epi32(abs_bits, _mm256_set1_epi32(static_cast<int>(kSpecialBits) - 1));
  if (_mm256_testz_si256(special, special) != 0) [[likely]] {
    return e;
  }
  // Each condition below holds only in the special range (|x| >= 88, inf, NaN).
  const auto square = [](float v) { return _mm256_mul_ps(_mm256_set1_ps(v), _mm256_set1_ps(v)); };
  e = _mm256_blendv_ps(e, square(0x1.4p-75f), _mm256_cmp_ps(x, _mm256_set1_ps(kMayUnderflow), _CMP_LT_OQ));
  e = _mm256_blendv_ps(e, square(0x1p-95f), _mm256_cmp_ps(x, _mm256_set1_ps(kUnderflow), _CMP_LT_OQ));
  e = _mm256_blendv_ps(e, square(0x1p97f), _mm256_cmp_ps(x, _mm256_set1_ps(kOverflow), _CMP_GT_OQ));
  // NaN and +inf give x + x; -inf took the underflow value (0) above, as in the library.
  const __m256 nan_or_inf =
      _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-std::numeric_limits<float>::infinity()), _CMP_EQ_OQ),
                       _mm256_castsi256_ps(_mm256_cmpgt_epi32(abs_bits, _mm256_set1_epi32(0x7f7fffff))));
  return _mm256_blendv_ps(e, _mm256_add_ps(x, x), nan_or_inf);
}

// All-ones in lanes [0, n - i) of an 8-lane step at i.
inline __m256i lanes_below(std::int64_t i, std::int64_t n) {
  const std::int64_t left = n - i;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left < 8 ? left : 8)), lane);
}

inline __m256 load_lanes(const float* p, std::int64_t i, std::int64_t n, __m256i lanes) {
  return n - i >= 8 ? _mm256_loadu_ps(p + i) : _mm256_maskload_ps(p + i, lanes);
}

LogitMax max_logit_avx2(const float* logits, std::int64_t n) {
  // As the AVX-512 pass: vmaxps keeps its second operand when the first is NaN; then the first
  // index holding the maximum, whose own value is returned.
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const __m256 none = _mm256_set1_ps(kNegInf);
  __m256 m0 = none;
  __m256 m1 = none;
  __m256 m2 = none;
  __m256 m3 = none;
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm256_max_ps(_mm256_loadu_ps(logits + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(logits + i + 8), m1);
    m2 = _mm256_max_ps(_mm256_loadu_ps(logits + i + 16), m2);
    m3 = _mm256_max_ps(_mm256_loadu_ps(logits + i + 24), m3);
  }
  for (; i < n; i += 8) {
    const __m256i lanes = lanes_below(i, n);
    const __m256 v = _mm256_blendv_ps(none, load_lanes(logits, i, n, lanes), _mm256_castsi256_ps(lanes));
    m0 = _mm256_max_ps(v, m0);
  }
  __m256 m = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
  m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
  m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0x4E));
  m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0xB1));
  const __m256 target = m;  // the maximum in every lane
  for (i = 0; i < n; i += 8) {
    const __m256i lanes = lanes_below(i, n);
    const __m256 hit =
        _mm256_and_ps(_mm256_cmp_ps(load_lanes(logits, i, n, lanes), target, _CMP_EQ_OQ), _mm256_castsi256_ps(lanes));
    if (const int bits = _mm256_movemask_ps(hit); bits != 0) {
      const std::int64_t index = i + std::countr_zero(static_cast<unsigned>(bits));
      return {logits[index], index};
    }
  }
  return {kNegInf, -1};  // no number at all
}

ExpSums exp_sums_avx2(const float* logits, std::int64_t n, float max) {
  // Vector exps; the two sums one add at a time in index order (see the AVX-512 pass).
  alignas(32) double terms[8];
  alignas(32) double products[8];
  double sum = 0.0;
  double weighted = 0.0;
  const __m256 shift = _mm256_set1_ps(max);
  for (std::int64_t i = 0; i < n; i += 8) {
    const __m256i lanes = lanes_below(i, n);
    const __m256 shifted = _mm256_sub_ps(load_lanes(logits, i, n, lanes), shift);
    const __m256 e = exp8(shifted);
    // Left-out terms become +0, which leaves both sums unchanged (neither is ever -0).
    const __m256 kept = _mm256_and_ps(_mm256_cmp_ps(e, _mm256_setzero_ps(), _CMP_GT_OQ), _mm256_castsi256_ps(lanes));
    const __m256 e_kept = _mm256_and_ps(e, kept);
    const __m256i kept_bits = _mm256_castps_si256(kept);
    for (int half = 0; half < 2; ++half) {
      const __m128 e4 = half == 0 ? _mm256_castps256_ps128(e_kept) : _mm256_extractf128_ps(e_kept, 1);
      const __m128 s4 = half == 0 ? _mm256_castps256_ps128(shifted) : _mm256_extractf128_ps(shifted, 1);
      const __m128i k4 = half == 0 ? _mm256_castsi256_si128(kept_bits) : _mm256_extracti128_si256(kept_bits, 1);
      const __m256d ed = _mm256_cvtps_pd(e4);
      // float x float is exact in double; the mask keeps 0 * inf (NaN) out.
      const __m256d pd =
          _mm256_and_pd(_mm256_mul_pd(ed, _mm256_cvtps_pd(s4)), _mm256_castsi256_pd(_mm256_cvtepi32_epi64(k4)));
      _mm256_store_pd(terms + 4 * half, ed);
      _mm256_store_pd(products + 4 * half, pd);
    }
    for (int j = 0; j < 8; ++j) {
      sum += terms[j];
      weighted += products[j];
    }
  }
  return {sum, weighted};
}

std::int64_t first_above_avx2(const float* logits, std::int64_t from, std::int64_t n, float threshold) {
  const __m256 bound = _mm256_set1_ps(threshold);
  std::int64_t i = from;
  for (; i + 16 <= n; i += 16) {  // two vectors a step: most rows have nothing above
    const int a = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(logits + i), bound, _CMP_GT_OQ));
    const int b = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(logits + i + 8), bound, _CMP_GT_OQ));
    if ((a | b) != 0) return i + std::countr_zero(static_cast<unsigned>(a | (b << 8)));
  }
  for (; i < n; i += 8) {
    const __m256i lanes = lanes_below(i, n);
    const __m256 hit =
        _mm256_and_ps(_mm256_cmp_ps(load_lanes(logits, i, n, lanes), bound, _CMP_GT_OQ), _mm256_castsi256_ps(lanes));
    if (const int bits = _mm256_movemask_ps(hit); bits != 0) return i + std::countr_zero(static_cast<unsigned>(bits));
  }
  return n;
}

void exp_row_avx2(const float* x, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += 8) {
    const __m256i lanes = lanes_below(i, n);
    const __m256 e = exp8(load_lanes(x, i, n, lanes));
    if (n - i >= 8) {
      _mm256_storeu_ps(out + i, e);
    } else {
      _mm256_maskstore_ps(out + i, lanes, e);
    }
  }
}

// The sampler's draw weights (logit_kernels.hpp), 4 lanes in double: as draw_exp8 in the AVX-512
// file, with 2^n put together from its exponent bits (n >= -289 wherever the result is kept).
inline __m128 draw_exp4(__m256d x, int& unsure) {
  using namespace draw_exp_constants;
  const __m256d n =
      _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(kInvLn2)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(kLn2Hi), x);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(kLn2Lo), r);
  __m256d p = _mm256_set1_pd(kTaylor[13]);
  for (int k = 12; k >= 0; --k) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kTaylor[static_cast<std::size_t>(k)]));
  // vmaxpd takes its second operand when the first is NaN (x = -inf): those lanes are zeroed below.
  const __m128i ni = _mm256_cvtpd_epi32(_mm256_max_pd(n, _mm256_set1_pd(-1000.0)));
  const __m256i bits = _mm256_slli_epi64(_mm256_add_epi64(_mm256_cvtepi32_epi64(ni), _mm256_set1_epi64x(1023)), 52);
  const __m256d tiny = _mm256_cmp_pd(x, _mm256_set1_pd(kZeroBelow), _CMP_LT_OQ);
  // Lanes below kZeroBelow would build a bad exponent: they take 1 and are zeroed below.
  p = _mm256_mul_pd(p, _mm256_blendv_pd(_mm256_castsi256_pd(bits), _mm256_set1_pd(1.0), tiny));
  const __m128 lo = _mm256_cvtpd_ps(_mm256_mul_pd(p, _mm256_set1_pd(1.0 - kBand)));
  const __m128 hi = _mm256_cvtpd_ps(_mm256_mul_pd(p, _mm256_set1_pd(1.0 + kBand)));
  const int tiny_bits = _mm256_movemask_pd(tiny);
  unsure = _mm_movemask_ps(_mm_cmp_ps(lo, hi, _CMP_NEQ_UQ)) & ~tiny_bits;
  // The double lanes' masks (64 set bits each) packed to 4 float lanes.
  const __m128 tiny_ps = _mm256_castps256_ps128(
      _mm256_permutevar8x32_ps(_mm256_castpd_ps(tiny), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
  return _mm_andnot_ps(tiny_ps, lo);
}

void draw_weights_avx2(const float* logits, std::int64_t n, float max, double inv_temperature, float* out) {
  const __m256 m = _mm256_set1_ps(max);
  const __m256d inv_t = _mm256_set1_pd(inv_temperature);
  for (std::int64_t i = 0; i < n; i += 8) {
    const __m256i lanes = lanes_below(i, n);
    const __m256 l = load_lanes(logits, i, n, lanes);
    const __m256 numbers = _mm256_and_ps(_mm256_cmp_ps(l, l, _CMP_ORD_Q), _mm256_castsi256_ps(lanes));
    const __m256 d = _mm256_sub_ps(l, m);  // the scalar form's float subtraction
    int unsure_lo = 0, unsure_hi = 0;
    const __m128 w_lo = draw_exp4(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(d)), inv_t), unsure_lo);
    const __m128 w_hi = draw_exp4(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(d, 1)), inv_t), unsure_hi);
    const __m256 w = _mm256_and_ps(_mm256_insertf128_ps(_mm256_castps128_ps256(w_lo), w_hi, 1), numbers);
    if (n - i >= 8) {
      _mm256_storeu_ps(out + i, w);
    } else {
      _mm256_maskstore_ps(out + i, lanes, w);
    }
    const unsigned unsure =
        static_cast<unsigned>(unsure_lo | (unsure_hi << 4)) & static_cast<unsigned>(_mm256_movemask_ps(numbers));
    for (unsigned b = unsure; b != 0; b &= b - 1) {
      const std::int64_t j = i + std::countr_zero(b);
      out[j] = static_cast<float>(std::exp(static_cast<double>(logits[j] - max) * inv_temperature));
    }
  }
}

constexpr LogitKernels kAvx2{max_logit_avx2, exp_sums_avx2, first_above_avx2, exp_row_avx2, draw_weights_avx2};

}  // namespace

const LogitKernels& logit_kernels_avx2() noexcept {
  return kAvx2;
}

}  // namespace sitsrt::cpu::detail
