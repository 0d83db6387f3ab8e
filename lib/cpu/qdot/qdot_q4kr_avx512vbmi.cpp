// AVX-512 VNNI + VBMI integer-dot decode of Q4_KR, the resident repacked Q4_K layout
// (cpu/repacked_blocks.hpp); numerics in qdot_kernels.hpp. Reached only where the CPU has
// AVX512_VBMI (DecodeKernel::for_weight and resident_layout check q4_kr_decode_native).
//
// The stored layout's kernel (qdot_q4k_avx512vnni.cpp) reduces 8 int32 lanes per sub-block in
// int16 pairs and unpacks each super-block's 6-bit scales with scalar code: about 7 cycles per
// 64 weights in cache, as much as two threads' share of memory bandwidth allows for 36 bytes.
// Q4_KR needs neither: a unit of two super-blocks is laid out as Q4_0R's unit of 16 blocks (one
// sub-block per 32-bit lane, dotted against the activation's block-lane copy, the high nibbles
// left in place and the sum shifted once), and its 6-bit scales and mins, stored as plain 6-bit
// fields, come out of one vpermb, one vpmultishiftqb and a mask. The same per-sub-block terms
// fl(fl(d sc_s) d_x) u . q and fl(dmin m_s) ds_x as the stored kernel's are summed in another
// order (16 lanes), so results differ from it by float rounding only.
#include "core/kquant_blocks.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/repacked_blocks.hpp"

#include "cpu/simd_intrinsics.hpp"

#include "cpu/qdot/qdot_prefetch_avx512.hpp"

#include <cstddef>
#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

// Q4_KR: vpermb indices putting a unit's scales of super-block 0 / 1 and mins of 0 / 1 at the
// start of qwords 0..3 (bytes [scales 6n][mins 6n] from the unit's 128 n-th byte), and the
// vpmultishiftqb control taking byte t of each qword from its bits 6 t .. 6 t + 7.
struct alignas(64) ByteIndices {  // a plain array: no std:: template with these flags (matmul_kernels.hpp)
  std::uint8_t idx[64];
};
constexpr ByteIndices six_bit_sources(int n) {
  ByteIndices t{};
  for (int q = 0; q < 4; ++q) {
    const int first = q % 2 == 0 ? 6 * n * (q / 2) : 6 * n * (q / 2) + 6;  // scales then mins, block q % 2
    for (int b = 0; b < 8; ++b) t.idx[8 * q + b] = static_cast<std::uint8_t>(first + (b < 6 ? b : 5));
  }
  return t;
}
constexpr ByteIndices kSixBitsOne = six_bit_sources(1), kSixBitsTwo = six_bit_sources(2);
constexpr ByteIndices kSixBitShifts = [] {
  ByteIndices t{};
  for (int b = 0; b < 64; ++b) t.idx[b] = static_cast<std::uint8_t>(6 * (b % 8));
  return t;
}();

// A unit's 16 sub-block scales fl(d sc_s) and mins fl(dmin m_s), sub-block i in lane i (lanes
// 8..15 zero in a unit of one super-block).
template <int kBlocks>
inline void unit_scales(const std::byte* row, const Q4KUnit& unit, __m512& scales, __m512& mins) {
  constexpr __mmask64 kUsed = kBlocks == 2 ? ~__mmask64{0} : 0x00FF00FFull;  // qwords 0, 2 for one block
  const __m512i packed = _mm512_castsi256_si512(_mm256_maskz_loadu_epi8(kBlocks == 2 ? 0xFFFFFFu : 0xFFFu, row + unit.scales));
  const __m512i spread = _mm512_maskz_permutexvar_epi8(
      kUsed, _mm512_load_si512(kBlocks == 2 ? kSixBitsTwo.idx : kSixBitsOne.idx), packed);
  const __m512i six = _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_load_si512(kSixBitShifts.idx), spread),
                                       _mm512_set1_epi8(0x3F));
  const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(six)));
  const __m512 m = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(six, 1)));
  // [d0 d1 dmin0 dmin1] (two blocks) or [d0 dmin0] (one), as floats.
  const __m128 dm = kBlocks == 2 ? _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + unit.d)))
                                 : _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u16(row + unit.d) | (load_u16(row + unit.dmin) << 16))));
  const __m512i d_lane = kBlocks == 2 ? _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1) : _mm512_setzero_si512();
  const __m512i dmin_lane = _mm512_add_epi32(d_lane, _mm512_set1_epi32(kBlocks));
  scales = _mm512_mul_ps(_mm512_permutexvar_ps(d_lane, _mm512_castps128_ps512(dm)), sc);
  mins = _mm512_mul_ps(_mm512_permutexvar_ps(dmin_lane, _mm512_castps128_ps512(dm)), m);
}

// acc[lane i] += float(u . q) fl(fl(d sc) d_x), accm[lane i] += fl(dmin m) ds_x, for the unit's
// sub-block i; xl: the unit's activation lanes.
template <int kBlocks>
inline void q4_kr_unit(const std::byte* row, const Q4KUnit& unit, const __m512i (&xl)[8], __m512 dx, __m512 dsx,
                       __m512& acc, __m512& accm) {
  const __m512i low = _mm512_set1_epi8(0x0F), high = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const std::byte* word = row + unit.levels + static_cast<std::size_t>(32 * kBlocks * j);
    const __m512i q = kBlocks == 2 ? _mm512_loadu_si512(word) : _mm512_maskz_loadu_epi32(0x00FF, word);
    lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(q, low), xl[j]);
    hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(q, high), xl[4 + j]);  // 16 x the high levels' sums
  }
  __m512 scales, mins;
  unit_scales<kBlocks>(row, unit, scales, mins);
  const __m512i exact = _mm512_add_epi32(lo, _mm512_srai_epi32(hi, 4));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), _mm512_mul_ps(scales, dx), acc);
  accm = _mm512_fmadd_ps(mins, dsx, accm);
}

template <int R>
inline void q4_kr_rows(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y) {
  const std::int64_t nb = x.blocks / 8;
  __m512 acc[R], accm[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = accm[r] = _mm512_setzero_ps();
  for (std::int64_t u = 0; kQ4KRepackUnitBlocks * u < nb; ++u) {
    const Q4KUnit unit = q4_k_unit(u, nb);
    __m512i xl[8];
    const std::int8_t* lanes = x.lanes + 512 * u;  // the unit's 16 blocks of 32
#pragma GCC unroll 8
    for (int m = 0; m < 8; ++m) xl[m] = _mm512_load_si512(lanes + 64 * m);
    const __mmask16 used = unit.blocks == 2 ? 0xFFFF : 0x00FF;
    const __m512 dx = _mm512_maskz_loadu_ps(used, x.d + 16 * u), dsx = _mm512_maskz_loadu_ps(used, x.ds + 16 * u);
    if (unit.blocks == 2) {
      prefetch_rows<R, 2 * sizeof(BlockQ4_K)>(w, row_stride, unit.levels);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) q4_kr_unit<2>(w + static_cast<std::size_t>(r) * row_stride, unit, xl, dx, dsx, acc[r], accm[r]);
    } else {
      for (int r = 0; r < R; ++r) q4_kr_unit<1>(w + static_cast<std::size_t>(r) * row_stride, unit, xl, dx, dsx, acc[r], accm[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]) - _mm512_reduce_add_ps(accm[r]);
}

}  // namespace

void qdot_q4_kr_avx512vbmi(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                           std::int64_t n_rows) {
  by_four_rows<q4_kr_rows<4>, q4_kr_rows<1>>(w, row_stride, x, y, n_rows);
}

}  // namespace sitsrt::cpu::detail
