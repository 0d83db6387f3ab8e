// AVX-512 VNNI integer-dot decode of Q4_0 weights, in the stored GGUF layout (kQ4_0) and the
// resident repacked one (kQ4_0R, cpu/repacked_blocks.hpp); numerics in qdot_kernels.hpp.
// Both work on units of 16 blocks and end each with one float step for the unit: the exact
// block sums u . q - 8 sum(q), block i in lane i, converted and FMA'd with fl(d_w d_x).
//
// Stored GGUF blocks: four blocks per zmm. The 64 bytes of four blocks' qs (byte k = element k
// in the low nibble, element k + 16 in the high one) give, after & 0x0F and (>> 4) & 0x0F,
// 128-bit lane j = block j's elements 0..15 and 16..31. Two vpdpbusd against the matching
// activation halves into one accumulator leave 4 int32 lanes per block; the four quads' lanes are
// then reduced to one vector of 16 block sums (int16 pairs, a permute).
//
// Q4_0R: one block per 32-bit lane. Load j of a unit is word j (qs bytes 4j..4j+3) of its 16
// blocks; against the activation's block-lane copy (QuantizedRow::lanes) four vpdpbusd on the
// low nibbles (& 0x0F) and four on the high nibbles left in place (& 0xF0: 16 times the level)
// leave each block's sums in its own lane: sum = low + (high >> 4), no reduction and no shift
// per load. About 2 cycles per 64 weights in cache against 2.5-2.8 for the quads (1 thread).
//
// The same integer sums, scales and float operations: the two layouts' results are
// bit-identical.
#include "core/quant_blocks.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/repacked_blocks.hpp"

#include "cpu/simd_intrinsics.hpp"

#include "cpu/qdot/qdot_prefetch_avx512.hpp"
#include "cpu/qdot/q4_0_units_avx512.hpp"

#include <cstddef>
#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

// The activation side of a unit of 16 blocks, shared by the rows of a pass.
struct UnitActivations {
  __m512i lo[kQuads], hi[kQuads];  // quad k, lane j: block 4k + j's q0..15 / q16..31
  __m512 d;                        // d_x of block i in lane i
  __m512i offset;                  // 8 sum(q) of block i in lane i
};

// Blocks b0 .. b0 + n - 1 of x (n < 16 only in a row's last unit; the rest read as zeros).
template <bool kFull>
inline UnitActivations unit_activations(const QuantizedRow& x, std::int64_t b0, int n) {
  UnitActivations a;
#pragma GCC unroll 4
  for (int k = 0; k < kQuads; ++k) {
    const std::int8_t* q = x.qs + kQBlock * (b0 + 4 * k);  // [blk 0 | blk 1] [blk 2 | blk 3], 32 bytes each
    __m512i q01, q23;
    if constexpr (kFull) {
      q01 = _mm512_load_si512(q);
      q23 = _mm512_load_si512(q + 64);
    } else {
      q01 = _mm512_maskz_loadu_epi32(quad_dwords(2 * (n - 4 * k)), q);
      q23 = _mm512_maskz_loadu_epi32(quad_dwords(2 * (n - 4 * k - 2)), q + 64);
    }
    a.lo[k] = _mm512_shuffle_i64x2(q01, q23, _MM_SHUFFLE(2, 0, 2, 0));
    a.hi[k] = _mm512_shuffle_i64x2(q01, q23, _MM_SHUFFLE(3, 1, 3, 1));
  }
  const __mmask16 lanes = unit_lanes(kFull ? kUnitBlocks : n);
  a.d = _mm512_maskz_loadu_ps(lanes, x.d + b0);
  a.offset = _mm512_slli_epi32(_mm512_maskz_loadu_epi32(lanes, x.sum + b0), 3);
  return a;
}

// acc[lane i] += float(u . q - 8 sum(q)) * fl(d_w d_x) for block i of the unit, from the four
// quads' packed qs and the 16 fp16 weight scales.
inline void accumulate_unit(const __m512i (&qs)[kQuads], __m256i halves, const UnitActivations& a, __m512& acc) {
  const __m512i low = _mm512_set1_epi8(0x0F);
  __m512i dot[kQuads];
#pragma GCC unroll 4
  for (int k = 0; k < kQuads; ++k) {
    const __m512i lo = _mm512_and_si512(qs[k], low), hi = _mm512_and_si512(_mm512_srli_epi16(qs[k], 4), low);
    dot[k] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, a.lo[k]), hi, a.hi[k]);
  }
  // The reduction runs in int16 pairs (vpackssdw + vpmaddwd): a lane of 8 products is at most
  // 8 * 15 * 127 = 15240 in magnitude, two of them 30480, so the packs never saturate.
  // 4 lanes per block -> 2: 128-bit lane j = [block j of quad k: 2 lanes, block j of quad k + 1: 2].
  const __m512i ones = _mm512_set1_epi16(1);
  const __m512i d01 = _mm512_madd_epi16(_mm512_packs_epi32(dot[0], dot[1]), ones);
  const __m512i d23 = _mm512_madd_epi16(_mm512_packs_epi32(dot[2], dot[3]), ones);
  // -> 1: lane 4j + k = block 4k + j; the permutation puts block i in lane i.
  const __m512i sums = _mm512_madd_epi16(_mm512_packs_epi32(d01, d23), ones);
  const __m512i block_order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i exact = _mm512_sub_epi32(_mm512_permutexvar_epi32(block_order, sums), a.offset);
  const __m512 scale = _mm512_mul_ps(_mm512_cvtph_ps(halves), a.d);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), scale, acc);
}

// R rows per pass share the activation side of each unit.
template <int R>
inline void stored_rows(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y) {
  const std::int64_t nb = x.blocks;
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  std::int64_t b0 = 0;
  for (; b0 + kUnitBlocks <= nb; b0 += kUnitBlocks) {
    prefetch_rows<R, kUnitBlocks * sizeof(BlockQ4_0)>(w, row_stride, static_cast<std::size_t>(b0) * sizeof(BlockQ4_0));
    const UnitActivations a = unit_activations<true>(x, b0, kUnitBlocks);
    const UnitAt at = StoredQ4_0::locate(nb, b0);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m512i qs[kQuads];
      __m256i halves;
      StoredQ4_0::full_unit(w + static_cast<std::size_t>(r) * row_stride, at, qs, halves);
      accumulate_unit(qs, halves, a, acc[r]);
    }
  }
  if (b0 < nb) {
    const int n = static_cast<int>(nb - b0);
    const UnitActivations a = unit_activations<false>(x, b0, n);
    const UnitAt at = StoredQ4_0::locate(nb, b0);
    for (int r = 0; r < R; ++r) {
      __m512i qs[kQuads];
      __m256i halves;
      StoredQ4_0::last_unit(w + static_cast<std::size_t>(r) * row_stride, at, n, qs, halves);
      accumulate_unit(qs, halves, a, acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]);
}

// Q4_0R: a unit of n blocks (n < 16 only at the row's end) at `levels` (word j of block i at
// 4 (n j + i)) with its scales at `scales`, against the unit's activation lanes.
template <bool kFull>
inline void accumulate_lanes(const std::byte* levels, const std::byte* scales, int n, const __m512i (&xl)[8],
                             __m512i neg_offset, __m512 dx, __m512& acc) {
  const __m512i low = _mm512_set1_epi8(0x0F), high = _mm512_set1_epi8(static_cast<char>(0xF0));
  const __mmask16 lanes = unit_lanes(n);
  __m512i lo = neg_offset, hi = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512i q = kFull ? _mm512_loadu_si512(levels + 64 * j) : _mm512_maskz_loadu_epi32(lanes, levels + 4 * n * j);
    lo = _mm512_dpbusd_epi32(lo, _mm512_and_si512(q, low), xl[j]);
    hi = _mm512_dpbusd_epi32(hi, _mm512_and_si512(q, high), xl[4 + j]);
  }
  // hi = 16 (high levels . q) exactly (|hi| <= 16 * 15 * 127 * 16), so the shift divides exactly.
  const __m512i exact = _mm512_add_epi32(lo, _mm512_srai_epi32(hi, 4));
  const __m256i halves = kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales))
                               : _mm256_maskz_loadu_epi16(lanes, scales);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), _mm512_mul_ps(_mm512_cvtph_ps(halves), dx), acc);
}

template <int R>
inline void repacked_rows(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y) {
  const std::int64_t nb = x.blocks;
  __m512 acc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (std::int64_t b0 = 0; b0 < nb; b0 += kUnitBlocks) {
    const int n = nb - b0 < kUnitBlocks ? static_cast<int>(nb - b0) : kUnitBlocks;
    const RepackGroup group = repack_group(b0 / kRepackGroupBlocks, nb, sizeof(BlockQ4_0));
    const auto i0 = static_cast<std::size_t>(b0 % kRepackGroupBlocks);
    const std::size_t levels = group.offset + i0 * kQsBytes;
    const std::size_t scales = group.offset + static_cast<std::size_t>(group.blocks) * kQsBytes + 2 * i0;
    __m512i xl[8];
    const std::int8_t* unit = x.lanes + kQBlock * b0;
#pragma GCC unroll 8
    for (int m = 0; m < 8; ++m) xl[m] = _mm512_load_si512(unit + 64 * m);
    const __mmask16 lanes = unit_lanes(n);
    const __m512 dx = _mm512_maskz_loadu_ps(lanes, x.d + b0);
    const __m512i neg_offset = _mm512_sub_epi32(_mm512_setzero_si512(),
                                                _mm512_slli_epi32(_mm512_maskz_loadu_epi32(lanes, x.sum + b0), 3));
    if (n == kUnitBlocks) {
      prefetch_rows<R, kUnitBlocks * sizeof(BlockQ4_0)>(w, row_stride, static_cast<std::size_t>(b0) * sizeof(BlockQ4_0));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::byte* row = w + static_cast<std::size_t>(r) * row_stride;
        accumulate_lanes<true>(row + levels, row + scales, n, xl, neg_offset, dx, acc[r]);
      }
    } else {
      for (int r = 0; r < R; ++r) {
        const std::byte* row = w + static_cast<std::size_t>(r) * row_stride;
        accumulate_lanes<false>(row + levels, row + scales, n, xl, neg_offset, dx, acc[r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(acc[r]);
}

}  // namespace

void qdot_q4_0_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                          std::int64_t n_rows) {
  by_four_rows<stored_rows<4>, stored_rows<1>>(w, row_stride, x, y, n_rows);
}

void qdot_q4_0r_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                           std::int64_t n_rows) {
  by_four_rows<repacked_rows<4>, repacked_rows<1>>(w, row_stride, x, y, n_rows);
}

}  // namespace sitsrt::cpu::detail
