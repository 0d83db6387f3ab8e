// AVX-512 VNNI integer-dot decode of Q4_K weights (numerics in qdot_kernels.hpp).
//
// A super-block's 128 qs bytes are two 64-byte loads: run p (32 bytes) holds sub-block 2p in its
// low nibbles and 2p + 1 in its high ones, so the masks of load h give [sub-block 4h | 4h + 2]
// and [4h + 1 | 4h + 3], each dotted (vpdpbusd, 8 int32 lanes per sub-block) with the matching
// pair of activation blocks. The lanes are then reduced to the 8 exact sub-block sums u . q: two
// rounds of int16 pairs (vpackssdw + vpmaddwd; a lane of 4 products is at most 4 * 15 * 127 =
// 7620 and the second round's inputs at most 15240, so the packs never saturate) and one swap of
// 128-bit lanes. One convert and one FMA with [fl(fl(d sc_s) d_x)] per super-block then replace
// the per-pair scale spreading, conversions and FMAs of the generic K kernel (qdot_k4_rows in
// qdot_avx512vnni.cpp, which Q5_K keeps: its 5-bit levels would saturate the int16 rounds).
// The mins, fl(dmin m_s) ds_x for the 8 sub-blocks, are one 8-lane FMA per super-block.
// (Q4_KR, the resident repacked layout: qdot_q4kr_avx512vbmi.cpp.)
#include "core/kquant_blocks.hpp"
#include "cpu/qdot/qdot_kernels.hpp"

#include "cpu/simd_intrinsics.hpp"

#include "cpu/qdot/qdot_prefetch_avx512.hpp"

#include <cstddef>
#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

// After the reduction, 128-bit lane 0 holds sub-blocks 0, 1, 4, 5 and lane 2 holds 2, 3, 6, 7;
// lanes 1 and 3 repeat them and get weight 0.
constexpr __mmask16 kUsedLanes = 0x0F0F;

// The 8 (scale, min) pairs of a super-block as two 8-lane float vectors (not yet times d, dmin).
struct ScalesMins {
  __m256 scales, mins;
};
inline ScalesMins scales_mins(const BlockQ4_K& blk) {
  std::uint32_t word[3];
  std::memcpy(word, blk.scales, 12);  // the 6-bit packing of ggml's get_scale_min_k4
  const std::uint32_t scales_lo = word[0] & 0x3F3F3F3Fu, mins_lo = word[1] & 0x3F3F3F3Fu;
  const std::uint32_t scales_hi = (word[2] & 0x0F0F0F0Fu) | (((word[0] >> 6) & 0x03030303u) << 4);
  const std::uint32_t mins_hi = ((word[2] >> 4) & 0x0F0F0F0Fu) | (((word[1] >> 6) & 0x03030303u) << 4);
  return {_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
              _mm_setr_epi32(static_cast<int>(scales_lo), static_cast<int>(scales_hi), 0, 0))),
          _mm256_cvtepi32_ps(
              _mm256_cvtepu8_epi32(_mm_setr_epi32(static_cast<int>(mins_lo), static_cast<int>(mins_hi), 0, 0)))};
}

// The 8 exact sub-block sums of one super-block's levels against x, in the lanes above.
inline __m512i sub_block_sums(const BlockQ4_K& blk, const __m512i (&act)[4]) {
  const __m512i low = _mm512_set1_epi8(0x0F), ones = _mm512_set1_epi16(1);
  __m512i dot[4];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m512i v = _mm512_loadu_si512(blk.qs + 64 * h);
    dot[2 * h] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(v, low), act[2 * h]);
    dot[2 * h + 1] =
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(_mm512_srli_epi16(v, 4), low), act[2 * h + 1]);
  }
  // Per 128-bit lane L: vpackssdw(a, b) = [a's 4 dwords, b's 4 dwords] as words, vpmaddwd sums
  // adjacent words. dot[0] / dot[1] hold sub-blocks {0 | 2} / {1 | 3} (lanes 0-1 | 2-3), dot[2] /
  // dot[3] hold {4 | 6} / {5 | 7}.
  const __m512i t01 = _mm512_madd_epi16(_mm512_packs_epi32(dot[0], dot[1]), ones);  // [a a b b]
  const __m512i t23 = _mm512_madd_epi16(_mm512_packs_epi32(dot[2], dot[3]), ones);
  const __m512i u = _mm512_madd_epi16(_mm512_packs_epi32(t01, t23), ones);  // [a b c d] per lane
  // Lanes 0 and 1 (2 and 3) hold halves of the same sub-blocks: add the swapped copy.
  return _mm512_add_epi32(u, _mm512_shuffle_i64x2(u, u, _MM_SHUFFLE(2, 3, 0, 1)));
}

template <int R>
inline void q4_k_rows(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y) {
  const std::int64_t nb = x.blocks / 8;
  const BlockQ4_K* blocks[R];
  __m512 acc[R];
  __m256 accm[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    blocks[r] = reinterpret_cast<const BlockQ4_K*>(w + static_cast<std::size_t>(r) * row_stride);
    acc[r] = _mm512_setzero_ps();
    accm[r] = _mm256_setzero_ps();
  }
  // Sub-block s of lane i: [0 1 4 5 . . . . 2 3 6 7 . . . .].
  const __m512i lane_sub_block = _mm512_setr_epi32(0, 1, 4, 5, 0, 0, 0, 0, 2, 3, 6, 7, 0, 0, 0, 0);
  for (std::int64_t B = 0; B < nb; ++B) {
    prefetch_rows<R, sizeof(BlockQ4_K)>(w, row_stride, static_cast<std::size_t>(B) * sizeof(BlockQ4_K));
    // Activation blocks 8B .. 8B + 7 as the pairs the masked nibbles meet: {0 | 2}, {1 | 3},
    // {4 | 6}, {5 | 7}.
    const std::int8_t* q = x.qs + 32 * 8 * B;
    const __m512i q01 = _mm512_load_si512(q), q23 = _mm512_load_si512(q + 64);
    const __m512i q45 = _mm512_load_si512(q + 128), q67 = _mm512_load_si512(q + 192);
    const __m512i act[4] = {_mm512_shuffle_i64x2(q01, q23, _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_i64x2(q01, q23, _MM_SHUFFLE(3, 2, 3, 2)),
                            _mm512_shuffle_i64x2(q45, q67, _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_i64x2(q45, q67, _MM_SHUFFLE(3, 2, 3, 2))};
    const __m512 xd = _mm512_maskz_permutexvar_ps(kUsedLanes, lane_sub_block,
                                                  _mm512_castps256_ps512(_mm256_loadu_ps(x.d + 8 * B)));
    const __m256 xds = _mm256_loadu_ps(x.ds + 8 * B);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const BlockQ4_K& blk = blocks[r][B];
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u16(&blk.d) | (load_u16(&blk.dmin) << 16))));
      const ScalesMins sm = scales_mins(blk);
      const __m256 dl = _mm256_mul_ps(_mm256_broadcastss_ps(dm), sm.scales);  // fl(d sc_s)
      const __m256 ml = _mm256_mul_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(dm), _mm256_set1_epi32(1)),
                                      sm.mins);  // fl(dmin m_s)
      const __m512 scale = _mm512_mul_ps(_mm512_permutexvar_ps(lane_sub_block, _mm512_castps256_ps512(dl)), xd);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sub_block_sums(blk, act)), scale, acc[r]);
      accm[r] = _mm256_fmadd_ps(ml, xds, accm[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m128 m4 = _mm_add_ps(_mm256_castps256_ps128(accm[r]), _mm256_extractf128_ps(accm[r], 1));
    const __m128 m2 = _mm_add_ps(m4, _mm_movehl_ps(m4, m4));
    y[r] = _mm512_reduce_add_ps(acc[r]) - _mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2)));
  }
}

}  // namespace

void qdot_q4_k_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                          std::int64_t n_rows) {
  by_four_rows<q4_k_rows<4>, q4_k_rows<1>>(w, row_stride, x, y, n_rows);
}

}  // namespace sitsrt::cpu::detail
