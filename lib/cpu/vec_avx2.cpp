// AVX2 + FMA + F16C row primitives (see vec_kernels.hpp): 8 float lanes, a vector exp.
// Rows are padded to 16 floats (the layout shared with the other levels), so steps of 8
// never need a tail inside the padded buffers; only reads from caller memory are masked.
#include "cpu/attend_rows.hpp"
#include "cpu/kv_int4_candidates.hpp"
#include "cpu/vec_kernels.hpp"

#include "cpu/hsum_avx2.hpp"
#include "cpu/simd_intrinsics.hpp"

#include <algorithm>
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

// 8 elements of this kv head's values from element c of the head, converted or dequantized to
// floats straight from memory (lanes at or past d read as 0; c may run to pad16(d)); the per-row
// State is shared with vec_avx512.cpp (attend_rows.hpp).
// Up to `bytes` (<= 8) bytes at p, zero-filled to 8: no read past a row's last head.
inline __m128i load_bytes8(const std::byte* p, std::int64_t bytes) {
  if (bytes >= 8) return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  std::uint64_t tail = 0;
  std::memcpy(&tail, p, static_cast<std::size_t>(bytes));
  return _mm_cvtsi64_si128(static_cast<long long>(tail));
}
struct RowF32 : RowBaseF32 {
  static __m256 load(const State& st, std::int64_t c, std::int64_t d) {
    const float* f = st.p + c;
    if (c + 8 <= d) return _mm256_loadu_ps(f);
    return c < d ? _mm256_maskload_ps(f, lanes_below(c, d)) : _mm256_setzero_ps();
  }
};
struct RowF16 : RowBaseF16 {
  static __m256 load(const State& st, std::int64_t c, std::int64_t d) {
    if (c + 8 <= d) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(st.p + 2 * c)));
    if (c >= d) return _mm256_setzero_ps();
    alignas(16) std::uint16_t tail[8] = {};  // copy the remaining halves into a zeroed block
    std::memcpy(tail, st.p + 2 * c, static_cast<std::size_t>(d - c) * 2);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tail)));
  }
};
struct RowInt8 : RowBaseInt8 {
  static __m256 load(const State& st, std::int64_t c, std::int64_t d) {
    if (c >= d) return _mm256_setzero_ps();
    const __m128i q = load_bytes8(st.p + c, d - c);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(st.scale));
  }
};
struct RowInt4 : RowBaseInt4 {
  static __m256 load(const State& st, std::int64_t c, std::int64_t d) {
    if (c >= d) return _mm256_setzero_ps();
    const std::int64_t e = st.e0 + c, left = std::min<std::int64_t>(8, d - c);
    std::uint32_t packed = 0;
    if (left == 8) {
      std::memcpy(&packed, st.row + e / 2, 4);  // the common case: one 4-byte load
    } else {
      std::memcpy(&packed, st.row + e / 2, static_cast<std::size_t>((left + 1) / 2));
    }
    const __m128i b = _mm_cvtsi32_si128(static_cast<int>(packed));
    const __m128i nib = _mm_set1_epi8(0x0F);
    const __m128i x = _mm_unpacklo_epi8(_mm_and_si128(b, nib), _mm_and_si128(_mm_srli_epi16(b, 4), nib));
    const __m128i levels = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kInt4Levels));
    const __m256i q = _mm256_cvtepi8_epi32(_mm_shuffle_epi8(levels, x));
    const Scales sc = scales(st, e, left);
    // Lanes below the group edge keep the first group's scale.
    const __m256 scale = sc.edge >= left ? _mm256_set1_ps(sc.lo)
                                         : _mm256_blendv_ps(_mm256_set1_ps(sc.hi), _mm256_set1_ps(sc.lo),
                                                            _mm256_castsi256_ps(lanes_below(0, sc.edge)));
    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(q), scale);
    return left == 8 ? f : _mm256_and_ps(f, _mm256_castsi256_ps(lanes_below(c, d)));
  }
};

// As scores_block in vec_avx512.cpp, with 8 lanes and at most two heads per pass (16 registers).
template <typename Row, typename VRow, int H>
void scores_block(const AttendArgs& a, const float* qp, std::int64_t dp, float* s, bool prefetch_values) {
  const std::int64_t d = a.head_dim, n = a.n;
  for (std::int64_t p = 0; p < n; p += 4) {
    prefetch_block<_MM_HINT_T0, Row::kKind>(a.k, p + kPrefetchRows, n, d);
    prefetch_block<_MM_HINT_T1, Row::kKind>(a.k, p + kPrefetchRowsL2, n, d);
    if (prefetch_values) prefetch_block<_MM_HINT_T1, VRow::kKind>(a.v, p, n, d);
    const Block4 rows = block_rows(a.k, p);
    const typename Row::State k[4] = {Row::at(rows.r[0], a.k, d), Row::at(rows.r[1], a.k, d),
                                      Row::at(rows.r[2], a.k, d), Row::at(rows.r[3], a.k, d)};
    __m256 acc[H][4];
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < 4; ++i) acc[h][i] = _mm256_setzero_ps();
    }
    for (std::int64_t c = 0; c < dp; c += 8) {
      const __m256 k0 = Row::load(k[0], c, d), k1 = Row::load(k[1], c, d), k2 = Row::load(k[2], c, d);
      const __m256 k3 = Row::load(k[3], c, d);
      for (int h = 0; h < H; ++h) {
        const __m256 qv = _mm256_load_ps(qp + h * dp + c);
        acc[h][0] = _mm256_fmadd_ps(qv, k0, acc[h][0]);
        acc[h][1] = _mm256_fmadd_ps(qv, k1, acc[h][1]);
        acc[h][2] = _mm256_fmadd_ps(qv, k2, acc[h][2]);
        acc[h][3] = _mm256_fmadd_ps(qv, k3, acc[h][3]);
      }
    }
    for (int h = 0; h < H; ++h) {
      _mm_storeu_ps(s + h * kAttendChunk + p, reduce4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]));
    }
  }
}

// sh[0, n) -> exp(sh - max) with max and sum (8 float partial sums) returned; sh[n, pad16(n))
// -> 0 so the value pass can run whole blocks of four rows (s rows are kAttendChunk long).
inline void softmax_numerators(float* sh, std::int64_t n, float* max_out, float* sum_out) {
  const __m256 minus_inf = _mm256_set1_ps(-__builtin_inff());
  __m256 mv = minus_inf;
  for (std::int64_t p = 0; p < n; p += 8) {
    mv =
        _mm256_max_ps(mv, _mm256_blendv_ps(minus_inf, _mm256_loadu_ps(sh + p), _mm256_castsi256_ps(lanes_below(p, n))));
  }
  const float m = hmax(mv);
  const __m256 max = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  for (std::int64_t p = 0; p < pad16(n); p += 8) {
    const __m256 keep = _mm256_castsi256_ps(lanes_below(p, n));
    const __m256 e = _mm256_and_ps(exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(sh + p), max)), keep);
    _mm256_storeu_ps(sh + p, e);
    sum = _mm256_add_ps(sum, e);
  }
  *max_out = m;
  *sum_out = hsum(sum);
}

// As values_pass in vec_avx512.cpp, with 8 lanes.
template <typename Row>
void values_pass(const AttendArgs& a, const float* w, std::int64_t dp) {
  const std::int64_t d = a.head_dim, g = a.group;
  for (std::int64_t i = 0; i < g * dp; i += 8) _mm256_store_ps(a.o + i, _mm256_setzero_ps());
  for (std::int64_t p = 0; p < a.n; p += 4) {
    const Block4 rows = block_rows(a.v, p);
    const typename Row::State v[4] = {Row::at(rows.r[0], a.v, d), Row::at(rows.r[1], a.v, d),
                                      Row::at(rows.r[2], a.v, d), Row::at(rows.r[3], a.v, d)};
    for (std::int64_t c = 0; c < dp; c += 8) {
      const __m256 v0 = Row::load(v[0], c, d), v1 = Row::load(v[1], c, d), v2 = Row::load(v[2], c, d);
      const __m256 v3 = Row::load(v[3], c, d);
      for (std::int64_t h = 0; h < g; ++h) {
        const float* wh = w + h * kAttendChunk + p;
        float* oh = a.o + h * dp + c;
        __m256 acc = _mm256_fmadd_ps(_mm256_broadcast_ss(wh), v0, _mm256_load_ps(oh));
        acc = _mm256_fmadd_ps(_mm256_broadcast_ss(wh + 1), v1, acc);
        acc = _mm256_fmadd_ps(_mm256_broadcast_ss(wh + 2), v2, acc);
        acc = _mm256_fmadd_ps(_mm256_broadcast_ss(wh + 3), v3, acc);
        _mm256_store_ps(oh, acc);
      }
    }
  }
}

template <typename KRow, typename VRow>
struct AttendAvx2 {
  static void run(const AttendArgs& a) {
    const std::int64_t d = a.head_dim, dp = pad16(d), g = a.group;
    float* qp = a.scratch;
    float* s = qp + g * dp;
    const __m256 scale = _mm256_set1_ps(a.scale);
    for (std::int64_t h = 0; h < g; ++h) {
      for (std::int64_t c = 0; c < dp; c += 8) {
        const float* src = a.q + h * d + c;
        const __m256 qv = c + 8 <= d ? _mm256_loadu_ps(src)
                          : c < d    ? _mm256_maskload_ps(src, lanes_below(c, d))
                                     : _mm256_setzero_ps();
        _mm256_store_ps(qp + h * dp + c, _mm256_mul_ps(qv, scale));
      }
    }
    for (std::int64_t p = 0; p < kPrefetchRows; p += 4) prefetch_block<_MM_HINT_T0, KRow::kKind>(a.k, p, a.n, d);
    for (std::int64_t h = 0; h < g;) {  // heads in pairs: 8 accumulators
      float* sh = s + h * kAttendChunk;
      if (g - h >= 2) {
        scores_block<KRow, VRow, 2>(a, qp + h * dp, dp, sh, h == 0);
        h += 2;
      } else {
        scores_block<KRow, VRow, 1>(a, qp + h * dp, dp, sh, h == 0);
        h += 1;
      }
    }
    for (std::int64_t h = 0; h < g; ++h) softmax_numerators(s + h * kAttendChunk, a.n, a.max + h, a.sum + h);
    values_pass<VRow>(a, s, dp);
  }
};

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

// gelu_tanh(g) * u = g * u / (1 + exp(-2 k (g + 0.044715 g^3))), k = sqrt(2 / pi).
void geglu_row_avx2(const float* gate, const float* up, float* out, std::int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 minus_two_k = _mm256_set1_ps(-1.5957691216057308f);
  const __m256 cubic = _mm256_set1_ps(0.044715f);
  std::int64_t i = 0;
  const auto gelu_mul = [&](__m256 g, __m256 u) {
    const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(cubic, g), _mm256_mul_ps(g, g), g);
    const __m256 e = exp_avx2(_mm256_mul_ps(minus_two_k, inner));
    return _mm256_div_ps(_mm256_mul_ps(g, u), _mm256_add_ps(one, e));
  };
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, gelu_mul(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < n) {
    const __m256i k = lanes_below(i, n);
    _mm256_maskstore_ps(out + i, k, gelu_mul(_mm256_maskload_ps(gate + i, k), _mm256_maskload_ps(up + i, k)));
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

// kv_int4::quantize_group for `groups` groups of 32 (four vectors each), bit for bit, as the
// AVX-512 form (vec_avx512.cpp) but with 8 lanes: without a 16-entry permute the index is the
// count of the 15 midpoints below v (each comparison's all-ones mask subtracted), and the level
// one of two 8-entry lookups.
__m256i int4_nearest_index(__m256 v) {
  __m256i index = _mm256_setzero_si256();
  for (int j = 0; j < 15; ++j) {
    const __m256 above = _mm256_cmp_ps(v, _mm256_set1_ps(kInt4Midpoints[j]), _CMP_GT_OQ);
    index = _mm256_sub_epi32(index, _mm256_castps_si256(above));
  }
  return index;
}
__m256 int4_level(__m256i index) {
  const __m256 low = _mm256_permutevar8x32_ps(_mm256_loadu_ps(kInt4LevelValues), index);
  const __m256 high = _mm256_permutevar8x32_ps(_mm256_loadu_ps(kInt4LevelValues + 8), index);
  return _mm256_blendv_ps(low, high, _mm256_castsi256_ps(_mm256_slli_epi32(index, 28)));  // bit 3: 8..15
}

// 32 indices (four vectors, in order) two a byte, low nibble first.
__m128i int4_pack_indices(const __m256i (&index)[4]) {
  const __m256i words = _mm256_packus_epi32(index[0], index[1]), words2 = _mm256_packus_epi32(index[2], index[3]);
  // packus works per 128-bit lane: bytes come as 0-3, 8-11, 16-19, 24-27 | 4-7, 12-15, ...
  const __m256i bytes =
      _mm256_permutevar8x32_epi32(_mm256_packus_epi16(words, words2), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  // Each 16-bit lane b0 | b1 << 8 (both < 16) -> b0 | b1 << 4 in its low byte.
  const __m256i pairs = _mm256_and_si256(_mm256_or_si256(bytes, _mm256_srli_epi16(bytes, 4)), _mm256_set1_epi16(0xFF));
  return _mm_packus_epi16(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
}

void int4_quantize_groups_avx2(const float* x, std::int64_t groups, std::byte* indices, std::byte* codes) {
  const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g) {
    __m256 xs[4];
    for (int k = 0; k < 4; ++k) xs[k] = _mm256_loadu_ps(x + 32 * g + 8 * k);
    // max(x, 0) and max(-x, 0) as the scalar's `x > m ? x : m` (maxps keeps m for NaN): every
    // lane is +0 or positive, so the reduction order does not matter.
    __m256 p = zero, n = zero;
    for (int k = 0; k < 4; ++k) {
      p = _mm256_max_ps(xs[k], p);
      n = _mm256_max_ps(_mm256_xor_ps(xs[k], sign), n);
    }
    alignas(32) float lanes[2][8];
    _mm256_store_ps(lanes[0], p);
    _mm256_store_ps(lanes[1], n);
    float pos = 0.0f, neg = 0.0f;
    for (int i = 0; i < 8; ++i) {
      pos = lanes[0][i] > pos ? lanes[0][i] : pos;
      neg = lanes[1][i] > neg ? lanes[1][i] : neg;
    }
    if (!(pos > 0.0f) && !(neg > 0.0f)) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(indices + 16 * g), _mm_set1_epi8(static_cast<char>(0x88)));
      codes[g] = std::byte{0};
      continue;
    }
    const Int4Candidates candidate = int4_candidates(pos, neg);
    __m256i index[4][4];
    __m256 sums8[4];  // the tree's first two levels: (e[i] + e[i + 16]) + (e[i + 8] + e[i + 24]), i < 8
    for (int c = 0; c < 4; ++c) {
      const __m256 s = _mm256_set1_ps(candidate.scale[c]), inv = _mm256_set1_ps(candidate.inverse[c]);
      __m256 e[4];
      for (int k = 0; k < 4; ++k) {
        index[c][k] = int4_nearest_index(_mm256_mul_ps(xs[k], inv));
        const __m256 d = _mm256_sub_ps(xs[k], int4_rounded(_mm256_mul_ps(int4_level(index[c][k]), s)));
        e[k] = int4_rounded(_mm256_mul_ps(d, d));
      }
      sums8[c] = _mm256_add_ps(_mm256_add_ps(e[0], e[2]), _mm256_add_ps(e[1], e[3]));
    }
    // + e[i + 4] (candidates 0, 1 in one vector's halves, 2, 3 in another's), + e[i + 2],
    // + e[i + 1]: candidate c's sum ends in lane 4 (c % 2) of vector c / 2.
    __m256 s01 = _mm256_add_ps(_mm256_permute2f128_ps(sums8[0], sums8[1], 0x20),
                               _mm256_permute2f128_ps(sums8[0], sums8[1], 0x31));
    __m256 s23 = _mm256_add_ps(_mm256_permute2f128_ps(sums8[2], sums8[3], 0x20),
                               _mm256_permute2f128_ps(sums8[2], sums8[3], 0x31));
    s01 = _mm256_add_ps(s01, _mm256_shuffle_ps(s01, s01, _MM_SHUFFLE(3, 2, 3, 2)));
    s23 = _mm256_add_ps(s23, _mm256_shuffle_ps(s23, s23, _MM_SHUFFLE(3, 2, 3, 2)));
    s01 = _mm256_add_ps(s01, _mm256_shuffle_ps(s01, s01, _MM_SHUFFLE(1, 1, 1, 1)));
    s23 = _mm256_add_ps(s23, _mm256_shuffle_ps(s23, s23, _MM_SHUFFLE(1, 1, 1, 1)));
    alignas(32) float sums[2][8];
    _mm256_store_ps(sums[0], s01);
    _mm256_store_ps(sums[1], s23);
    const float error[4] = {sums[0][0], sums[0][4], sums[1][0], sums[1][4]};
    const int best = int4_best_candidate(error);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(indices + 16 * g), int4_pack_indices(index[best]));
    codes[g] = static_cast<std::byte>(candidate.code[best]);
  }
}

constexpr VecKernels kAvx2Vec = {
    attend_table<AttendAvx2, RowF32, RowF16, RowInt8, RowInt4>(),
    swiglu_row_avx2,
    geglu_row_avx2,
    f32_to_f16_row_avx2,
    int4_quantize_groups_avx2,
};

}  // namespace

const VecKernels& vec_kernels_avx2() noexcept {
  return kAvx2Vec;
}

}  // namespace sitsrt::cpu::detail
