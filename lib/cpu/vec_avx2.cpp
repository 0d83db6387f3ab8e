// AVX2 + FMA + F16C row primitives (see vec_kernels.hpp): 8 float lanes, a vector exp.
// Rows are padded to 16 floats (the layout shared with the other levels), so steps of 8
// never need a tail inside the padded buffers; only reads from caller memory are masked.
#include "cpu/vec_kernels.hpp"

#include <immintrin.h>

#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

constexpr std::int64_t pad16(std::int64_t v) {
  return (v + 15) / 16 * 16;
}

// Lane mask for elements [c, d) of an 8-lane step starting at c.
inline __m256i lanes_below(std::int64_t c, std::int64_t d) {
  alignas(32) static constexpr std::int32_t kWindow[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t left = d - c;
  left = left < 0 ? 0 : left > 8 ? 8 : left;
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kWindow + 8 - left));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// [sum(a), sum(b), sum(c), sum(d)].
inline __m128 reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// exp(x), same construction and clamping as exp_avx512 (see vec_avx512.cpp).
inline __m256 exp_avx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
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
    const auto* f = reinterpret_cast<const float*>(src);
    for (std::int64_t c = 0; c < pad16(d); c += 8) {
      _mm256_store_ps(dst + c, c + 8 <= d ? _mm256_loadu_ps(f + c) : _mm256_maskload_ps(f + c, lanes_below(c, d)));
    }
  }
};
struct RowF16 {
  static constexpr std::int64_t kBytes = 2;
  static void widen(const std::byte* src, std::int64_t d, float* dst) {
    std::int64_t c = 0;
    for (; c + 8 <= d; c += 8) {
      _mm256_store_ps(dst + c, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * c))));
    }
    if (c < d) {  // tail: copy the remaining halves into a zeroed block
      alignas(16) std::uint16_t tail[8] = {};
      std::memcpy(tail, src + 2 * c, static_cast<std::size_t>(d - c) * 2);
      _mm256_store_ps(dst + c, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tail))));
      c += 8;
    }
    for (; c < pad16(d); c += 8) _mm256_store_ps(dst + c, _mm256_setzero_ps());
  }
};

inline void scores4(const float* qp, std::int64_t g, std::int64_t dp, const float* kv, float* s, std::int64_t ns) {
  for (std::int64_t h = 0; h < g; ++h) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    const float* qh = qp + h * dp;
    for (std::int64_t c = 0; c < dp; c += 8) {
      const __m256 qv = _mm256_load_ps(qh + c);
      a0 = _mm256_fmadd_ps(qv, _mm256_load_ps(kv + c), a0);
      a1 = _mm256_fmadd_ps(qv, _mm256_load_ps(kv + dp + c), a1);
      a2 = _mm256_fmadd_ps(qv, _mm256_load_ps(kv + 2 * dp + c), a2);
      a3 = _mm256_fmadd_ps(qv, _mm256_load_ps(kv + 3 * dp + c), a3);
    }
    _mm_storeu_ps(s + h * ns, reduce4(a0, a1, a2, a3));
  }
}

inline void values_block(const float* s, std::int64_t ns, std::int64_t g, std::int64_t dp, const float* kv, int rows,
                         float* o) {
  for (std::int64_t h = 0; h < g; ++h) {
    __m256 w[4];
    for (int i = 0; i < rows; ++i) w[i] = _mm256_set1_ps(s[h * ns + i]);
    float* oh = o + h * dp;
    for (std::int64_t c = 0; c < dp; c += 8) {
      __m256 acc = _mm256_load_ps(oh + c);
      for (int i = 0; i < rows; ++i) acc = _mm256_fmadd_ps(w[i], _mm256_load_ps(kv + i * dp + c), acc);
      _mm256_store_ps(oh + c, acc);
    }
  }
}

// Replaces sh[0, n) by exp(sh - max(sh)) and returns 1 / their sum (8 float partial sums).
// The scores buffer is padded to 16, so full 8-lane steps stay inside it; lanes >= n are masked.
inline float softmax_numerators(float* sh, std::int64_t n) {
  const __m256 minus_inf = _mm256_set1_ps(-__builtin_inff());
  __m256 mv = minus_inf;
  for (std::int64_t p = 0; p < n; p += 8) {
    mv = _mm256_max_ps(mv, _mm256_blendv_ps(minus_inf, _mm256_load_ps(sh + p), _mm256_castsi256_ps(lanes_below(p, n))));
  }
  const __m256 max = _mm256_set1_ps(hmax(mv));
  __m256 sum = _mm256_setzero_ps();
  for (std::int64_t p = 0; p < n; p += 8) {
    const __m256 keep = _mm256_castsi256_ps(lanes_below(p, n));
    const __m256 e = _mm256_and_ps(exp_avx2(_mm256_sub_ps(_mm256_load_ps(sh + p), max)), keep);
    _mm256_store_ps(sh + p, e);
    sum = _mm256_add_ps(sum, e);
  }
  return 1.0f / hsum(sum);
}

template <typename Row>
void attend_avx2(const AttendArgs& a) {
  const std::int64_t d = a.head_dim, dp = pad16(d), g = a.group, n = a.n, ns = pad16(n);
  float* qp = a.scratch;
  float* s = qp + g * dp;
  float* kv = s + g * ns;
  float* o = kv + 4 * dp;
  float* zinv = o + g * dp;
  const __m256 scale = _mm256_set1_ps(a.scale);
  for (std::int64_t h = 0; h < g; ++h) {
    for (std::int64_t c = 0; c < dp; c += 8) {
      const float* src = a.q + h * d + c;
      const __m256 qv = c + 8 <= d ? _mm256_loadu_ps(src) : _mm256_maskload_ps(src, lanes_below(c, d));
      _mm256_store_ps(qp + h * dp + c, _mm256_mul_ps(qv, scale));
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
      __m256 acc = _mm256_setzero_ps();
      for (std::int64_t c = 0; c < dp; c += 8) {
        acc = _mm256_fmadd_ps(_mm256_load_ps(qp + h * dp + c), _mm256_load_ps(kv + c), acc);
      }
      s[h * ns + p] = hsum(acc);
    }
  }
  for (std::int64_t h = 0; h < g; ++h) zinv[h] = softmax_numerators(s + h * ns, n);
  for (std::int64_t i = 0; i < g * dp; i += 8) _mm256_store_ps(o + i, _mm256_setzero_ps());
  prefetch_rows(a.v, 0, kPrefetchRows);
  for (p = 0; p < n; p += 4) {
    prefetch_rows(a.v, p + kPrefetchRows, 4);
    const int rows = n - p >= 4 ? 4 : static_cast<int>(n - p);
    for (int i = 0; i < rows; ++i) Row::widen(a.v + static_cast<std::size_t>(p + i) * a.row_stride, d, kv + i * dp);
    values_block(s + p, ns, g, dp, kv, rows, o);
  }
  for (std::int64_t h = 0; h < g; ++h) {
    const __m256 z = _mm256_set1_ps(zinv[h]);
    for (std::int64_t c = 0; c < d; c += 8) {
      const __m256 r = _mm256_mul_ps(_mm256_load_ps(o + h * dp + c), z);
      float* dst = a.out + h * d + c;
      if (c + 8 <= d) {
        _mm256_storeu_ps(dst, r);
      } else {
        _mm256_maskstore_ps(dst, lanes_below(c, d), r);
      }
    }
  }
}

void swiglu_row_avx2(const float* gate, const float* up, float* out, std::int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  std::int64_t i = 0;
  const auto silu_mul = [&](__m256 g, __m256 u) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_div_ps(_mm256_mul_ps(g, u), _mm256_add_ps(one, e));
  };
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, silu_mul(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < n) {
    const __m256i k = lanes_below(i, n);
    _mm256_maskstore_ps(out + i, k, silu_mul(_mm256_maskload_ps(gate + i, k), _mm256_maskload_ps(up + i, k)));
  }
}

void f32_to_f16_row_avx2(const float* src, std::uint16_t* dst, std::int64_t n) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRound));
  }
  if (i < n) {
    alignas(16) std::uint16_t tail[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(tail),
                    _mm256_cvtps_ph(_mm256_maskload_ps(src + i, lanes_below(i, n)), kRound));
    std::memcpy(dst + i, tail, static_cast<std::size_t>(n - i) * 2);
  }
}

constexpr AttendFn attend_f32_avx2 = attend_avx2<RowF32>;
constexpr AttendFn attend_f16_avx2 = attend_avx2<RowF16>;

constexpr VecKernels kAvx2Vec = {
    attend_f32_avx2,
    attend_f16_avx2,
    swiglu_row_avx2,
    f32_to_f16_row_avx2,
};

}  // namespace

const VecKernels& vec_kernels_avx2() noexcept {
  return kAvx2Vec;
}

}  // namespace sitsrt::cpu::detail
