// AVX-512 row primitives (see vec_kernels.hpp): 16 float lanes, F16C conversions, a vector exp.
#include "cpu/vec_kernels.hpp"

// GCC 12's avx512fintrin.h makes its "undefined" vectors by self-initialisation, which
// -Wmaybe-uninitialized reports at every inlined intrinsic (GCC bug 105593): silenced here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

namespace sitsrt::cpu::detail {
namespace {

constexpr std::int64_t pad16(std::int64_t v) {
  return (v + 15) / 16 * 16;
}

// Lanes [0, n) of a 16-lane step that starts at `c` in a row of `d` elements.
inline __mmask16 lanes_below(std::int64_t c, std::int64_t d) {
  const std::int64_t left = d - c;
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1u);
}

// exp(x) for x in float range: Cephes-style 2^n * P(r) with r = x - n ln2 (split ln2), about
// 1-2 ulp. x is clamped to [-87.33, 88.3] so 2^n stays a normal float: results below 1.2e-38
// read as ~1.2e-38 and above 2e38 as ~2e38 (never inf/NaN), which is what softmax and silu want.
inline __m512 exp_avx512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// [sum(a), sum(b), sum(c), sum(d)].
inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const auto fold = [](__m512 v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); };
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(fold(a), fold(b)), _mm256_hadd_ps(fold(c), fold(d)));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// A kv head's rows are n_kv_heads * head_dim elements apart (2 KiB for 8 x 128 f16), so
// consecutive positions often sit on different 4 KiB pages, where hardware prefetchers stop:
// decode at long context waited on every row. Rows kPrefetchRows ahead are requested here.
constexpr std::int64_t kPrefetchRows = 8;
inline void prefetch_row(const std::byte* row, std::int64_t bytes) {
  for (std::int64_t b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(row + b), _MM_HINT_T0);
}

// Cache rows -> d floats zero padded to pad16(d).
struct RowF32 {
  static constexpr std::int64_t kBytes = 4;
  static void widen(const std::byte* src, std::int64_t d, float* dst) {
    for (std::int64_t c = 0; c < pad16(d); c += 16) {
      _mm512_store_ps(dst + c, _mm512_maskz_loadu_ps(lanes_below(c, d), src + 4 * c));
    }
  }
};
struct RowF16 {
  static constexpr std::int64_t kBytes = 2;
  static void widen(const std::byte* src, std::int64_t d, float* dst) {
    for (std::int64_t c = 0; c < pad16(d); c += 16) {
      _mm512_store_ps(dst + c, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lanes_below(c, d), src + 2 * c)));
    }
  }
};

// s[h, p..p+3] = qp[h] . kv[0..3] for every head: the four key rows are shared by all heads.
inline void scores4(const float* qp, std::int64_t g, std::int64_t dp, const float* kv, float* s, std::int64_t ns) {
  for (std::int64_t h = 0; h < g; ++h) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    const float* qh = qp + h * dp;
    for (std::int64_t c = 0; c < dp; c += 16) {
      const __m512 qv = _mm512_load_ps(qh + c);
      a0 = _mm512_fmadd_ps(qv, _mm512_load_ps(kv + c), a0);
      a1 = _mm512_fmadd_ps(qv, _mm512_load_ps(kv + dp + c), a1);
      a2 = _mm512_fmadd_ps(qv, _mm512_load_ps(kv + 2 * dp + c), a2);
      a3 = _mm512_fmadd_ps(qv, _mm512_load_ps(kv + 3 * dp + c), a3);
    }
    _mm_storeu_ps(s + h * ns, reduce4(a0, a1, a2, a3));
  }
}

// o[h] += sum_i s[h, p+i] * kv[i] for i < rows (<= 4): one read-modify-write of o per block.
inline void values_block(const float* s, std::int64_t ns, std::int64_t g, std::int64_t dp, const float* kv, int rows,
                         float* o) {
  for (std::int64_t h = 0; h < g; ++h) {
    __m512 w[4];
    for (int i = 0; i < rows; ++i) w[i] = _mm512_set1_ps(s[h * ns + i]);
    float* oh = o + h * dp;
    for (std::int64_t c = 0; c < dp; c += 16) {
      __m512 acc = _mm512_load_ps(oh + c);
      for (int i = 0; i < rows; ++i) acc = _mm512_fmadd_ps(w[i], _mm512_load_ps(kv + i * dp + c), acc);
      _mm512_store_ps(oh + c, acc);
    }
  }
}

// Replaces sh[0, n) by exp(sh - max(sh)) and returns 1 / their sum (16 float partial sums).
inline float softmax_numerators(float* sh, std::int64_t n) {
  __m512 mv = _mm512_set1_ps(-__builtin_inff());
  for (std::int64_t p = 0; p < n; p += 16) {
    mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(_mm512_set1_ps(-__builtin_inff()), lanes_below(p, n), sh + p));
  }
  const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(mv));
  __m512 sum = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < n; p += 16) {
    const __mmask16 k = lanes_below(p, n);
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sh + p), max));
    _mm512_mask_storeu_ps(sh + p, k, e);
    sum = _mm512_mask_add_ps(sum, k, sum, e);
  }
  return 1.0f / _mm512_reduce_add_ps(sum);
}

// One (query row, kv head) pair; see attend_generic for the algorithm. Keys and values are
// converted four rows at a time into L1-resident floats and shared by all heads of the group.
template <typename Row>
void attend_avx512(const AttendArgs& a) {
  const std::int64_t d = a.head_dim, dp = pad16(d), g = a.group, n = a.n, ns = pad16(n);
  float* qp = a.scratch;
  float* s = qp + g * dp;
  float* kv = s + g * ns;
  float* o = kv + 4 * dp;
  float* zinv = o + g * dp;
  const __m512 scale = _mm512_set1_ps(a.scale);
  for (std::int64_t h = 0; h < g; ++h) {
    for (std::int64_t c = 0; c < dp; c += 16) {
      _mm512_store_ps(qp + h * dp + c, _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes_below(c, d), a.q + h * d + c), scale));
    }
  }
  const std::int64_t row_bytes = d * Row::kBytes;
  const auto prefetch_rows = [&](const std::byte* base, std::int64_t p0, std::int64_t count) {
    for (std::int64_t p = p0; p < p0 + count && p < n; ++p)
      prefetch_row(base + static_cast<std::size_t>(p) * a.row_stride, row_bytes);
  };
  prefetch_rows(a.k, 0, kPrefetchRows);
  std::int64_t p = 0;
  for (; p + 4 <= n; p += 4) {
    prefetch_rows(a.k, p + kPrefetchRows, 4);
    for (int i = 0; i < 4; ++i) Row::widen(a.k + static_cast<std::size_t>(p + i) * a.row_stride, d, kv + i * dp);
    scores4(qp, g, dp, kv, s + p, ns);
  }
  for (; p < n; ++p) {
    Row::widen(a.k + static_cast<std::size_t>(p) * a.row_stride, d, kv);
    for (std::int64_t h = 0; h < g; ++h) {
      __m512 acc = _mm512_setzero_ps();
      for (std::int64_t c = 0; c < dp; c += 16) {
        acc = _mm512_fmadd_ps(_mm512_load_ps(qp + h * dp + c), _mm512_load_ps(kv + c), acc);
      }
      s[h * ns + p] = _mm512_reduce_add_ps(acc);
    }
  }
  for (std::int64_t h = 0; h < g; ++h) zinv[h] = softmax_numerators(s + h * ns, n);
  for (std::int64_t i = 0; i < g * dp; i += 16) _mm512_store_ps(o + i, _mm512_setzero_ps());
  prefetch_rows(a.v, 0, kPrefetchRows);
  for (p = 0; p < n; p += 4) {
    prefetch_rows(a.v, p + kPrefetchRows, 4);
    const int rows = n - p >= 4 ? 4 : static_cast<int>(n - p);
    for (int i = 0; i < rows; ++i) Row::widen(a.v + static_cast<std::size_t>(p + i) * a.row_stride, d, kv + i * dp);
    values_block(s + p, ns, g, dp, kv, rows, o);
  }
  for (std::int64_t h = 0; h < g; ++h) {
    const __m512 z = _mm512_set1_ps(zinv[h]);
    for (std::int64_t c = 0; c < dp; c += 16) {
      _mm512_mask_storeu_ps(a.out + h * d + c, lanes_below(c, d), _mm512_mul_ps(_mm512_load_ps(o + h * dp + c), z));
    }
  }
}

// silu(g) * u = g * u / (1 + exp(-g)).
void swiglu_row_avx512(const float* gate, const float* up, float* out, std::int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = lanes_below(i, n);
    const __m512 g = _mm512_maskz_loadu_ps(k, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(k, up + i);
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_mask_storeu_ps(out + i, k, _mm512_div_ps(_mm512_mul_ps(g, u), _mm512_add_ps(one, e)));
  }
}

void f32_to_f16_row_avx512(const float* src, std::uint16_t* dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = lanes_below(i, n);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(dst + i, k, h);
  }
}

constexpr AttendFn attend_f32_avx512 = attend_avx512<RowF32>;
constexpr AttendFn attend_f16_avx512 = attend_avx512<RowF16>;

constexpr VecKernels kAvx512Vec = {
    attend_f32_avx512,
    attend_f16_avx512,
    swiglu_row_avx512,
    f32_to_f16_row_avx512,
};

}  // namespace

const VecKernels& vec_kernels_avx512() noexcept {
  return kAvx512Vec;
}

}  // namespace sitsrt::cpu::detail
