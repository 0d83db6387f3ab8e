// AVX-512 row primitives (see vec_kernels.hpp): 16 float lanes, F16C conversions, a vector exp.
#include "cpu/vec_kernels.hpp"

#include "cpu/simd_intrinsics.hpp"

#include "cpu/attend_rows.hpp"
#include "cpu/kv_int4_candidates.hpp"

#include <algorithm>

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

// 16 elements of this kv head's values from element c of the head, converted or dequantized
// to floats straight from memory (lanes at or past d read as 0); the per-row State is shared
// with vec_avx2.cpp (attend_rows.hpp).
struct RowF32 : RowBaseF32 {
  static __m512 load(const State& st, std::int64_t c, std::int64_t d) {
    return _mm512_maskz_loadu_ps(lanes_below(c, d), st.p + c);
  }
};
struct RowF16 : RowBaseF16 {
  static __m512 load(const State& st, std::int64_t c, std::int64_t d) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lanes_below(c, d), st.p + 2 * c));
  }
};
struct RowInt8 : RowBaseInt8 {
  static __m512 load(const State& st, std::int64_t c, std::int64_t d) {
    const __m128i q = _mm_maskz_loadu_epi8(lanes_below(c, d), st.p + c);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(st.scale));
  }
};
struct RowInt4 : RowBaseInt4 {
  static __m512 load(const State& st, std::int64_t c, std::int64_t d) {
    const __mmask16 lanes = lanes_below(c, d);
    if (lanes == 0) return _mm512_setzero_ps();
    const std::int64_t e = st.e0 + c, left = std::min<std::int64_t>(16, d - c);
    const __m128i b = _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << ((left + 1) / 2)) - 1u), st.row + e / 2);
    const __m128i nib = _mm_set1_epi8(0x0F);
    const __m128i x = _mm_unpacklo_epi8(_mm_and_si128(b, nib), _mm_and_si128(_mm_srli_epi16(b, 4), nib));
    const __m128i levels = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kInt4Levels));
    const __m512i q = _mm512_cvtepi8_epi32(_mm_shuffle_epi8(levels, x));
    const Scales sc = scales(st, e, left);
    const __m512 scale = sc.edge >= left ? _mm512_set1_ps(sc.lo)
                                         : _mm512_mask_mov_ps(_mm512_set1_ps(sc.lo),
                                                              static_cast<__mmask16>(0xFFFFu << sc.edge),
                                                              _mm512_set1_ps(sc.hi));
    return _mm512_maskz_mul_ps(lanes, _mm512_cvtepi32_ps(q), scale);
  }
};

// Scores of H heads (qp rows dp apart, s rows kAttendChunk apart) against positions 0 .. n-1,
// four key rows at a time: each key vector is converted once and used by all H heads. Scores of
// the repeated rows of a last partial block land in s[n, pad4(n)) and are ignored. With
// prefetch_values the V rows are requested towards L2 so the value pass finds them close.
//
// D > 0: head_dim is D (a multiple of 16, passed as a constant so the column loops unroll and the
// lane masks and prefetch offsets fold away; decode of 16 streams at head_dim 64 spent a third of
// its attention time on that bookkeeping). D == 0: any head_dim.
template <typename Row, typename VRow, int H, int D>
void scores_block(const AttendArgs& a, const float* qp, std::int64_t dp, float* s, bool prefetch_values) {
  const std::int64_t d = D > 0 ? D : a.head_dim, n = a.n;
  if constexpr (D > 0) dp = D;
  for (std::int64_t p = 0; p < n; p += 4) {
    prefetch_block<_MM_HINT_T0, Row::kKind>(a.k, p + kPrefetchRows, n, d);
    prefetch_block<_MM_HINT_T1, Row::kKind>(a.k, p + kPrefetchRowsL2, n, d);
    if (prefetch_values) prefetch_block<_MM_HINT_T1, VRow::kKind>(a.v, p, n, d);
    const Block4 rows = block_rows(a.k, p);
    const typename Row::State k[4] = {Row::at(rows.r[0], a.k, d), Row::at(rows.r[1], a.k, d),
                                      Row::at(rows.r[2], a.k, d), Row::at(rows.r[3], a.k, d)};
    __m512 acc[H][4];
    for (int h = 0; h < H; ++h) {
      for (int i = 0; i < 4; ++i) acc[h][i] = _mm512_setzero_ps();
    }
    for (std::int64_t c = 0; c < dp; c += 16) {
      const __m512 k0 = Row::load(k[0], c, d), k1 = Row::load(k[1], c, d), k2 = Row::load(k[2], c, d);
      const __m512 k3 = Row::load(k[3], c, d);
      for (int h = 0; h < H; ++h) {
        const __m512 qv = _mm512_load_ps(qp + h * dp + c);
        acc[h][0] = _mm512_fmadd_ps(qv, k0, acc[h][0]);
        acc[h][1] = _mm512_fmadd_ps(qv, k1, acc[h][1]);
        acc[h][2] = _mm512_fmadd_ps(qv, k2, acc[h][2]);
        acc[h][3] = _mm512_fmadd_ps(qv, k3, acc[h][3]);
      }
    }
    for (int h = 0; h < H; ++h) {
      _mm_storeu_ps(s + h * kAttendChunk + p, reduce4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]));
    }
  }
}

// sh[0, n) -> exp(sh - max) with max and sum (16 float partial sums) returned; sh[n, pad16(n))
// -> 0 so the value pass can run whole blocks of four rows (s rows are kAttendChunk long).
inline void softmax_numerators(float* sh, std::int64_t n, float* max_out, float* sum_out) {
  __m512 mv = _mm512_set1_ps(-__builtin_inff());
  for (std::int64_t p = 0; p < n; p += 16) {
    mv = _mm512_max_ps(mv, _mm512_mask_loadu_ps(_mm512_set1_ps(-__builtin_inff()), lanes_below(p, n), sh + p));
  }
  const float m = _mm512_reduce_max_ps(mv);
  const __m512 max = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < n; p += 16) {
    const __m512 e = _mm512_maskz_mov_ps(lanes_below(p, n), exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(sh + p), max)));
    _mm512_storeu_ps(sh + p, e);
    sum = _mm512_add_ps(sum, e);
  }
  *max_out = m;
  *sum_out = _mm512_reduce_add_ps(sum);
}

// o[h] = sum_p w[h, p] * v[p], four rows at a time; each value vector is converted once for all
// heads. A last partial block repeats row n-1 with weight 0 (adds exact zeros).
template <typename Row, int D>
void values_pass(const AttendArgs& a, const float* w, std::int64_t dp) {
  const std::int64_t d = D > 0 ? D : a.head_dim, g = a.group;
  if constexpr (D > 0) dp = D;
  for (std::int64_t i = 0; i < g * dp; i += 16) _mm512_store_ps(a.o + i, _mm512_setzero_ps());
  for (std::int64_t p = 0; p < kPrefetchRows; p += 4) prefetch_block<_MM_HINT_T0, Row::kKind>(a.v, p, a.n, d);
  for (std::int64_t p = 0; p < a.n; p += 4) {
    prefetch_block<_MM_HINT_T0, Row::kKind>(a.v, p + kPrefetchRows, a.n, d);
    const Block4 rows = block_rows(a.v, p);
    const typename Row::State v[4] = {Row::at(rows.r[0], a.v, d), Row::at(rows.r[1], a.v, d),
                                      Row::at(rows.r[2], a.v, d), Row::at(rows.r[3], a.v, d)};
    for (std::int64_t c = 0; c < dp; c += 16) {
      const __m512 v0 = Row::load(v[0], c, d), v1 = Row::load(v[1], c, d), v2 = Row::load(v[2], c, d);
      const __m512 v3 = Row::load(v[3], c, d);
      for (std::int64_t h = 0; h < g; ++h) {
        const float* wh = w + h * kAttendChunk + p;
        float* oh = a.o + h * dp + c;
        __m512 acc = _mm512_fmadd_ps(_mm512_set1_ps(wh[0]), v0, _mm512_load_ps(oh));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(wh[1]), v1, acc);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(wh[2]), v2, acc);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(wh[3]), v3, acc);
        _mm512_store_ps(oh, acc);
      }
    }
  }
}

// One chunk of one (query row, kv head) pair (see AttendArgs): scores for every head reading
// each key once, softmax numerators, then the value sum reading each value once.
template <typename KRow, typename VRow>
struct AttendAvx512 {
  static void run(const AttendArgs& a) {
    if (a.head_dim == 64) return run_d<64>(a);
    if (a.head_dim == 128) return run_d<128>(a);
    run_d<0>(a);
  }
  template <int D>
  static void run_d(const AttendArgs& a) {
    const std::int64_t d = D > 0 ? D : a.head_dim, dp = pad16(d), g = a.group;
    float* qp = a.scratch;
    float* s = qp + g * dp;
    const __m512 scale = _mm512_set1_ps(a.scale);
    for (std::int64_t h = 0; h < g; ++h) {
      for (std::int64_t c = 0; c < dp; c += 16) {
        _mm512_store_ps(qp + h * dp + c,
                        _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes_below(c, d), a.q + h * d + c), scale));
      }
    }
    for (std::int64_t p = 0; p < kPrefetchRows; p += 4) prefetch_block<_MM_HINT_T0, KRow::kKind>(a.k, p, a.n, d);
    for (std::int64_t p = kPrefetchRows; p < kPrefetchRowsL2; p += 4)
      prefetch_block<_MM_HINT_T1, KRow::kKind>(a.k, p, a.n, d);
    for (std::int64_t h = 0; h < g;) {  // heads in blocks of up to four: 16 accumulators
      const std::int64_t left = g - h;
      float* sh = s + h * kAttendChunk;
      const bool first = h == 0;
      if (left >= 4) {
        scores_block<KRow, VRow, 4, D>(a, qp + h * dp, dp, sh, first);
        h += 4;
      } else if (left == 3) {
        scores_block<KRow, VRow, 3, D>(a, qp + h * dp, dp, sh, first);
        h += 3;
      } else if (left == 2) {
        scores_block<KRow, VRow, 2, D>(a, qp + h * dp, dp, sh, first);
        h += 2;
      } else {
        scores_block<KRow, VRow, 1, D>(a, qp + h * dp, dp, sh, first);
        h += 1;
      }
    }
    for (std::int64_t h = 0; h < g; ++h) softmax_numerators(s + h * kAttendChunk, a.n, a.max + h, a.sum + h);
    values_pass<VRow, D>(a, s, dp);
  }
};

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

// gelu_tanh(g) * u = g * u / (1 + exp(-2 k (g + 0.044715 g^3))), k = sqrt(2 / pi).
void geglu_row_avx512(const float* gate, const float* up, float* out, std::int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 minus_two_k = _mm512_set1_ps(-1.5957691216057308f);
  const __m512 cubic = _mm512_set1_ps(0.044715f);
  for (std::int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = lanes_below(i, n);
    const __m512 g = _mm512_maskz_loadu_ps(k, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(k, up + i);
    const __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(cubic, g), _mm512_mul_ps(g, g), g);
    const __m512 e = exp_avx512(_mm512_mul_ps(minus_two_k, inner));
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

// kv_int4::quantize_group for `groups` groups of 32 (two vectors each), bit for bit: the same
// products and differences, each rounded on its own (int4_rounded: no FMA), and each candidate's
// error summed in the scalar's tree order.
// The nearest level's index is the number of midpoints below v; a branch-free binary search over
// the 15 sorted midpoints (four permute lookups) counts them as the scalar's 15 comparisons do,
// NaN included (no comparison holds: index 0). Levels are integers, so looking the level up by
// index gives the scalar's sum of gaps exactly.
__m512i int4_nearest_index(__m512 v, __m512 midpoints) {
  __m512i index = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(v, _mm512_set1_ps(kInt4Midpoints[7]), _CMP_GT_OQ),
                                         _mm512_set1_epi32(8));
  for (int step = 4; step > 0; step /= 2) {
    const __m512 probe = _mm512_permutexvar_ps(_mm512_add_epi32(index, _mm512_set1_epi32(step - 1)), midpoints);
    index = _mm512_mask_add_epi32(index, _mm512_cmp_ps_mask(v, probe, _CMP_GT_OQ), index, _mm512_set1_epi32(step));
  }
  return index;
}

// Two indices a byte, low nibble first: the low byte of each 64-bit lane is idx[2k] | idx[2k+1] << 4.
__m128i int4_pack_indices(__m512i lo, __m512i hi) {
  const __m128i a = _mm512_cvtepi64_epi8(_mm512_or_si512(lo, _mm512_srli_epi64(lo, 28)));
  const __m128i b = _mm512_cvtepi64_epi8(_mm512_or_si512(hi, _mm512_srli_epi64(hi, 28)));
  return _mm_unpacklo_epi64(a, b);
}

void int4_quantize_groups_avx512(const float* x, std::int64_t groups, std::byte* indices, std::byte* codes) {
  const __m512 midpoints = _mm512_loadu_ps(kInt4Midpoints), levels = _mm512_loadu_ps(kInt4LevelValues);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  for (std::int64_t g = 0; g < groups; ++g) {
    const __m512 x0 = _mm512_loadu_ps(x + 32 * g), x1 = _mm512_loadu_ps(x + 32 * g + 16);
    // max(x, 0) and max(-x, 0) as the scalar's `x > m ? x : m` (maxps keeps m for NaN): every
    // lane is +0 or positive, so the reduction order does not matter.
    const __m512 zero = _mm512_setzero_ps();
    const float pos = _mm512_reduce_max_ps(_mm512_max_ps(x1, _mm512_max_ps(x0, zero)));
    const __m512 n0 = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x0), sign));
    const __m512 n1 = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x1), sign));
    const float neg = _mm512_reduce_max_ps(_mm512_max_ps(n1, _mm512_max_ps(n0, zero)));
    if (!(pos > 0.0f) && !(neg > 0.0f)) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(indices + 16 * g), _mm_set1_epi8(static_cast<char>(0x88)));
      codes[g] = std::byte{0};
      continue;
    }
    const Int4Candidates candidate = int4_candidates(pos, neg);
    __m512i index[4][2];
    __m512 half_sums[4];  // e[i] + e[i + 16], the tree's first level
    for (int c = 0; c < 4; ++c) {
      const __m512 s = _mm512_set1_ps(candidate.scale[c]), inv = _mm512_set1_ps(candidate.inverse[c]);
      index[c][0] = int4_nearest_index(_mm512_mul_ps(x0, inv), midpoints);
      index[c][1] = int4_nearest_index(_mm512_mul_ps(x1, inv), midpoints);
      const __m512 d0 = _mm512_sub_ps(x0, int4_rounded(_mm512_mul_ps(_mm512_permutexvar_ps(index[c][0], levels), s)));
      const __m512 d1 = _mm512_sub_ps(x1, int4_rounded(_mm512_mul_ps(_mm512_permutexvar_ps(index[c][1], levels), s)));
      half_sums[c] = _mm512_add_ps(int4_rounded(_mm512_mul_ps(d0, d0)), int4_rounded(_mm512_mul_ps(d1, d1)));
    }
    // The tree's other levels for all four candidates at once: e[i] + e[i + 8] (candidates 0, 1
    // in one vector, 2, 3 in another), + e[i + 4] (candidate c in 128-bit lane c), + e[i + 2],
    // + e[i + 1]; candidate c's sum ends in lane 4c.
    const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(half_sums[0], half_sums[1], 0x44),
                                     _mm512_shuffle_f32x4(half_sums[0], half_sums[1], 0xEE));
    const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(half_sums[2], half_sums[3], 0x44),
                                     _mm512_shuffle_f32x4(half_sums[2], half_sums[3], 0xEE));
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, 0x88), _mm512_shuffle_f32x4(s01, s23, 0xDD));
    s = _mm512_add_ps(s, _mm512_shuffle_ps(s, s, _MM_SHUFFLE(3, 2, 3, 2)));
    s = _mm512_add_ps(s, _mm512_shuffle_ps(s, s, _MM_SHUFFLE(1, 1, 1, 1)));
    alignas(64) float sums[16];
    _mm512_store_ps(sums, s);
    const float error[4] = {sums[0], sums[4], sums[8], sums[12]};
    const int best = int4_best_candidate(error);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(indices + 16 * g), int4_pack_indices(index[best][0], index[best][1]));
    codes[g] = static_cast<std::byte>(candidate.code[best]);
  }
}

constexpr VecKernels kAvx512Vec = {
    attend_table<AttendAvx512, RowF32, RowF16, RowInt8, RowInt4>(),
    swiglu_row_avx512,
    geglu_row_avx512,
    f32_to_f16_row_avx512,
    int4_quantize_groups_avx512,
};

}  // namespace

const VecKernels& vec_kernels_avx512() noexcept {
  return kAvx512Vec;
}

}  // namespace sitsrt::cpu::detail
