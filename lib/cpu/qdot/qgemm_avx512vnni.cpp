// AVX-512 VNNI integer-dot kernels for m > 1 activation rows (decode batches and prefill) of
// Q8_0 / Q8_0R / Q4_0 / Q4_0R weights: each weight block is loaded and unpacked once for a tile
// of activation rows (register blocking), instead of once per row as m calls of the decode
// kernel would. Q8_0 / Q8_0R's whole 16-row tiles go to the block-sum kernel
// (qgemm_q8_block_sums_avx512vnni.cpp); the pair kernels here take the rows past them.
//
// Batch invariance: every (weight row r, activation row i) output of the pair and Q4 kernels is
// computed with exactly the float operations of the decode kernel for that pair
// (qdot_avx512vnni.cpp, qdot_q4_avx512vnni.cpp): the same blocks per vector lane, the same scale
// products fl(d_w d_x), the same FMA sequence into the same accumulators and the same final
// reduction. Only the exact int32 block sums are formed differently where that shares work (Q4_0:
// one accumulator per block lane for the low and high nibbles; stored Q4_0 transposed to
// block-per-lane words); integer sums are exact, so they are equal. Hence y[i][r] is bit-identical
// to the m == 1 result for row i, whatever m, whichever rows share the call and however rows are
// split over threads. (The Q8 block-sum tiles equal batch-invariant mode's one-row kernel instead.)
#include "core/quant_blocks.hpp"
#include "cpu/qdot/q4_0_units_avx512.hpp"
#include "cpu/qdot/q8_0_pairs_avx512.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/repacked_blocks.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {
namespace {

// ---- Q8_0 / Q8_0R: pairs of blocks per zmm, two accumulators (quads), as qdot_rows ----

// One weight row's quad (blocks b .. b + 3) or tail pair, as the decode kernels read it.
struct Q8Quad {
  __m512i u01, u23;  // unsigned levels (w + 128)
  __m512 d01, d23;   // [d_w x8, d_w' x8]
};
struct StoredQ8 {
  // Per row: its blocks; nothing else to locate.
  static Q8Quad quad(const std::byte* row, std::int64_t /*nb*/, std::int64_t b) {
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(row);
    Q8Quad q;
    quad_halves(blocks, b, offsetof(BlockQ8_0, d), q.d01, q.d23);
    q.u01 = UnpackQ8_0::levels(blocks, b, true);
    q.u23 = UnpackQ8_0::levels(blocks, b + 2, true);
    return q;
  }
  static void pair(const std::byte* row, std::int64_t /*nb*/, std::int64_t b, bool second, __m512i& u, __m512& dw) {
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(row);
    dw = pair_halves(load_u16(&blocks[b].d), second ? load_u16(&blocks[b + 1].d) : 0u);
    u = UnpackQ8_0::levels(blocks, b, second);
  }
};
struct RepackedQ8 {
  static Q8Quad quad(const std::byte* row, std::int64_t nb, std::int64_t b) {
    const RepackGroup group = repack_group(b / kRepackGroupBlocks, nb, sizeof(BlockQ8_0));
    const auto i = static_cast<std::size_t>(b % kRepackGroupBlocks);
    const std::size_t scales_at = group.offset + static_cast<std::size_t>(group.blocks) * kQBlock;
    const __m512 halves = _mm512_castps128_ps512(
        _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + scales_at + 2 * i))));
    Q8Quad q;
    q.d01 = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), halves);
    q.d23 = _mm512_permutexvar_ps(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), halves);
    RepackedQ8_0::quad_levels(row + group.offset + i * kQBlock, q.u01, q.u23);
    return q;
  }
  static void pair(const std::byte* row, std::int64_t nb, std::int64_t b, bool second, __m512i& u, __m512& dw) {
    const RepackGroup group = repack_group(b / kRepackGroupBlocks, nb, sizeof(BlockQ8_0));
    const int i = static_cast<int>(b % kRepackGroupBlocks);
    const std::byte* scales = row + group.offset + static_cast<std::size_t>(group.blocks) * kQBlock;
    dw = pair_halves(load_u16(scales + 2 * i), second ? load_u16(scales + 2 * (i + 1)) : 0u);
    u = RepackedQ8_0::tail_levels(row + group.offset, i, second);
  }
};

// R weight rows x C activation rows. Per (r, c) the operations of qdot_rows<UnpackQ8_0> /
// qdot_repacked_rows: quads into acc0 (blocks b, b + 1) and acc1 (b + 2, b + 3), the tail pairs
// into acc0, y = reduce(acc0 + acc1).
template <typename W, int R, int C>
void q8_tile(const std::byte* w, std::size_t row_stride, const QuantizedRow* const* x, float* y, std::int64_t ldy) {
  const std::int64_t nb = x[0]->blocks;
  __m512 acc0[R][C], acc1[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc0[r][c] = acc1[r][c] = _mm512_setzero_ps();
  }
  constexpr int kShift = UnpackQ8_0::kShift;
  std::int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    prefetch_rows<R, 4 * sizeof(BlockQ8_0)>(w, row_stride, static_cast<std::size_t>(b) * sizeof(BlockQ8_0));
    Q8Quad q[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) q[r] = W::quad(w + static_cast<std::size_t>(r) * row_stride, nb, b);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const QuantizedRow& xc = *x[c];
      const __m512i init01 = _mm512_slli_epi32(_mm512_load_si512(xc.neg_sum8 + 8 * b), kShift);
      const __m512i init23 = _mm512_slli_epi32(_mm512_load_si512(xc.neg_sum8 + 8 * (b + 2)), kShift);
      const __m512i q01 = _mm512_load_si512(xc.qs + 32 * b), q23 = _mm512_load_si512(xc.qs + 32 * (b + 2));
      const __m512 xd01 = _mm512_load_ps(xc.d8 + 8 * b), xd23 = _mm512_load_ps(xc.d8 + 8 * (b + 2));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i dot01 = _mm512_dpbusd_epi32(init01, q[r].u01, q01);
        const __m512i dot23 = _mm512_dpbusd_epi32(init23, q[r].u23, q23);
        acc0[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot01), _mm512_mul_ps(q[r].d01, xd01), acc0[r][c]);
        acc1[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot23), _mm512_mul_ps(q[r].d23, xd23), acc1[r][c]);
      }
    }
  }
  for (; b < nb; b += 2) {
    const bool second = b + 1 < nb;
    __m512i u[R];
    __m512 dw[R];
    for (int r = 0; r < R; ++r) W::pair(w + static_cast<std::size_t>(r) * row_stride, nb, b, second, u[r], dw[r]);
    for (int c = 0; c < C; ++c) {
      const QuantizedRow& xc = *x[c];
      const __m512i init = _mm512_slli_epi32(_mm512_load_si512(xc.neg_sum8 + 8 * b), kShift);
      const __m512i q = _mm512_load_si512(xc.qs + 32 * b);
      const __m512 xd = _mm512_load_ps(xc.d8 + 8 * b);
      for (int r = 0; r < R; ++r) {
        const __m512i dot = _mm512_dpbusd_epi32(init, u[r], q);
        acc0[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw[r], xd), acc0[r][c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) y[c * ldy + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r][c], acc1[r][c]));
  }
}

// ---- Q4_0 / Q4_0R: units of 16 blocks, block i of a unit in 32-bit lane i, as qdot_q4 ----

// One weight row's unit as 4 words of 16 blocks (word j = qs bytes 4j..4j+3 of block i in lane i:
// elements 4j..4j+3 in the low nibbles, 16+4j..16+4j+3 in the high ones) and its 16 fp16 scales
// (lanes past a row's last block: zero levels and scales).
struct Q4Unit {
  __m512i words[4];
  __m256i halves;
};

// Stored GGUF blocks: the decode kernel's unit loads (quad k, 128-bit lane jj = block 4k + jj's
// qs), then a 4x4 transpose of 32-bit words: lane 4k + jj of word j = dword 4jj + j of quad k.
struct StoredQ4 {
  static Q4Unit unit(const std::byte* row, std::int64_t nb, std::int64_t b0, int n) {
    __m512i qs[kQuads];
    Q4Unit u;
    const UnitAt at = StoredQ4_0::locate(nb, b0);
    if (n == kUnitBlocks) {
      StoredQ4_0::full_unit(row, at, qs, u.halves);
    } else {
      StoredQ4_0::last_unit(row, at, n, qs, u.halves);
    }
    // Lanes 0..7: word j (j = 0, 2) of quads k, k + 1; lanes 8..15: word j + 1 of the same.
    const __m512i even = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    const __m512i odd = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
    const __m512i a0 = _mm512_permutex2var_epi32(qs[0], even, qs[1]), a1 = _mm512_permutex2var_epi32(qs[0], odd, qs[1]);
    const __m512i b0v = _mm512_permutex2var_epi32(qs[2], even, qs[3]), b1 = _mm512_permutex2var_epi32(qs[2], odd, qs[3]);
    u.words[0] = _mm512_shuffle_i64x2(a0, b0v, _MM_SHUFFLE(1, 0, 1, 0));
    u.words[1] = _mm512_shuffle_i64x2(a0, b0v, _MM_SHUFFLE(3, 2, 3, 2));
    u.words[2] = _mm512_shuffle_i64x2(a1, b1, _MM_SHUFFLE(1, 0, 1, 0));
    u.words[3] = _mm512_shuffle_i64x2(a1, b1, _MM_SHUFFLE(3, 2, 3, 2));
    return u;
  }
};
// Q4_0R: the words are the layout (cpu/repacked_blocks.hpp).
struct RepackedQ4 {
  static Q4Unit unit(const std::byte* row, std::int64_t nb, std::int64_t b0, int n) {
    const RepackGroup group = repack_group(b0 / kRepackGroupBlocks, nb, sizeof(BlockQ4_0));
    const auto i0 = static_cast<std::size_t>(b0 % kRepackGroupBlocks);
    const std::byte* levels = row + group.offset + i0 * kQsBytes;
    const std::byte* scales = row + group.offset + static_cast<std::size_t>(group.blocks) * kQsBytes + 2 * i0;
    Q4Unit u;
    if (n == kUnitBlocks) {
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) u.words[j] = _mm512_loadu_si512(levels + 64 * j);
      u.halves = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales));
    } else {
      const __mmask16 lanes = unit_lanes(n);
      for (int j = 0; j < 4; ++j) u.words[j] = _mm512_maskz_loadu_epi32(lanes, levels + 4 * n * j);
      u.halves = _mm256_maskz_loadu_epi16(lanes, scales);
    }
    return u;
  }
};

// R weight rows x C activation rows. Per (r, c) and unit: the exact block sums
// u . q - 8 sum(q) in lane i (one vpdpbusd chain over the 8 nibble words against the
// activation's block lanes, from -8 sum(q)), then acc += float(sum) * fl(fl(d_w) d_x): the
// decode kernels' one float step per unit; y = reduce(acc).
template <typename W, int R, int C>
void q4_tile(const std::byte* w, std::size_t row_stride, const QuantizedRow* const* x, float* y, std::int64_t ldy) {
  const std::int64_t nb = x[0]->blocks;
  __m512 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const __m512i low = _mm512_set1_epi8(0x0F);
  for (std::int64_t b0 = 0; b0 < nb; b0 += kUnitBlocks) {
    const int n = nb - b0 < kUnitBlocks ? static_cast<int>(nb - b0) : kUnitBlocks;
    const __mmask16 lanes = unit_lanes(n);
    __m512 dx[C];
    __m512i neg_offset[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      dx[c] = _mm512_maskz_loadu_ps(lanes, x[c]->d + b0);
      neg_offset[c] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                       _mm512_slli_epi32(_mm512_maskz_loadu_epi32(lanes, x[c]->sum + b0), 3));
    }
    // The decode kernels' weight prefetch (at small m the product streams weights as decode does).
    prefetch_rows<R, kUnitBlocks * sizeof(BlockQ4_0)>(w, row_stride, static_cast<std::size_t>(b0) * sizeof(BlockQ4_0));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const Q4Unit u = W::unit(w + static_cast<std::size_t>(r) * row_stride, nb, b0, n);
      __m512i lo[4], hi[4];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        lo[j] = _mm512_and_si512(u.words[j], low);
        hi[j] = _mm512_and_si512(_mm512_srli_epi16(u.words[j], 4), low);
      }
      const __m512 dw = _mm512_cvtph_ps(u.halves);
      // The C sums' vpdpbusd chains interleaved (j outer), so their latency overlaps.
      __m512i sum[C];
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) sum[c] = neg_offset[c];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const std::int8_t* xl = x[c]->lanes + kQBlock * b0;  // word m of block i at 64 m + 4 i
          sum[c] = _mm512_dpbusd_epi32(sum[c], lo[j], _mm512_load_si512(xl + 64 * j));
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const std::int8_t* xl = x[c]->lanes + kQBlock * b0;
          sum[c] = _mm512_dpbusd_epi32(sum[c], hi[j], _mm512_load_si512(xl + 64 * (4 + j)));
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[c]), _mm512_mul_ps(dw, dx[c]), acc[r][c]);
      }
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]);
  }
}

using TileFn = void (*)(const std::byte* w, std::size_t row_stride, const QuantizedRow* const* x, float* y,
                        std::int64_t ldy);

// Weight rows by kR, activation rows by kC (the last tiles narrower: every (row, activation)
// result is the same whatever tile it falls in), in panels of weight rows (qgemm_panel_rows):
// each activation tile runs over the panel's rows (from L2) while it stays in L1.
template <typename W, int kR, int kC, TileFn (*Pick)(int r, int c)>
void qgemm_tiles(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, std::int64_t m, float* y,
                 std::int64_t ldy, std::int64_t n_rows) {
  const QuantizedRow* rows[kC];
  const std::int64_t panel = qgemm_panel_rows(row_stride, kR);
  for (std::int64_t p0 = 0; p0 < n_rows; p0 += panel) {
    const std::int64_t p1 = n_rows - p0 < panel ? n_rows : p0 + panel;
    for (std::int64_t i0 = 0; i0 < m; i0 += kC) {
      const int nc = m - i0 < kC ? static_cast<int>(m - i0) : kC;
      for (int c = 0; c < nc; ++c) rows[c] = x + i0 + c;
      for (std::int64_t r0 = p0; r0 < p1; r0 += kR) {
        const int nr = n_rows - r0 < kR ? static_cast<int>(n_rows - r0) : kR;
        Pick(nr, nc)(w + static_cast<std::size_t>(r0) * row_stride, row_stride, rows, y + i0 * ldy + r0, ldy);
      }
    }
  }
}

// Q8: 2 weight rows x 4 activation rows (16 accumulators, the 2 rows' quads in 8 more registers).
template <typename W>
TileFn q8_pick(int r, int c) {
  static constexpr TileFn k1[] = {q8_tile<W, 1, 1>, q8_tile<W, 1, 2>, q8_tile<W, 1, 3>, q8_tile<W, 1, 4>};
  static constexpr TileFn k2[] = {q8_tile<W, 2, 1>, q8_tile<W, 2, 2>, q8_tile<W, 2, 3>, q8_tile<W, 2, 4>};
  return r == 2 ? k2[c - 1] : k1[c - 1];
}
// Q4: 4 weight rows x 4 activation rows (16 accumulators; one row's 8 nibble words at a time).
template <typename W>
TileFn q4_pick(int r, int c) {
  static constexpr TileFn k[4][4] = {
      {q4_tile<W, 1, 1>, q4_tile<W, 1, 2>, q4_tile<W, 1, 3>, q4_tile<W, 1, 4>},
      {q4_tile<W, 2, 1>, q4_tile<W, 2, 2>, q4_tile<W, 2, 3>, q4_tile<W, 2, 4>},
      {q4_tile<W, 3, 1>, q4_tile<W, 3, 2>, q4_tile<W, 3, 3>, q4_tile<W, 3, 4>},
      {q4_tile<W, 4, 1>, q4_tile<W, 4, 2>, q4_tile<W, 4, 3>, q4_tile<W, 4, 4>},
  };
  return k[r - 1][c - 1];
}

// Q8_0 / Q8_0R: whole 16-row tiles with block-sum numerics (qgemm_q8_block_sums_avx512vnni.cpp),
// the rows past them with the pair kernel, whose outputs equal the decode kernel's.
template <typename W, WeightLayout kLayout>
void q8_gemm(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, std::int64_t m, float* y,
             std::int64_t ldy, std::int64_t n_rows) {
  const std::int64_t whole = n_rows / 16 * 16;
  qgemm_q8_block_sum_tiles(kLayout)(w, row_stride, x, m, y, ldy, whole);
  if (whole < n_rows) {
    qgemm_tiles<W, 2, 4, q8_pick<W>>(w + static_cast<std::size_t>(whole) * row_stride, row_stride, x, m, y + whole, ldy,
                                     n_rows - whole);
  }
}

}  // namespace

QgemmFn qgemm_avx512vnni(WeightLayout layout) noexcept {
  switch (layout) {
    case WeightLayout::kQ8_0:
      return q8_gemm<StoredQ8, WeightLayout::kQ8_0>;
    case WeightLayout::kQ8_0R:
      return q8_gemm<RepackedQ8, WeightLayout::kQ8_0R>;
    case WeightLayout::kQ4_0: return qgemm_tiles<StoredQ4, 4, 4, q4_pick<StoredQ4>>;
    case WeightLayout::kQ4_0R: return qgemm_tiles<RepackedQ4, 4, 4, q4_pick<RepackedQ4>>;
    case WeightLayout::kQ8_0P:
      return qgemm_q8_0p_avx512vnni;
    default: return nullptr;
  }
}

}  // namespace sitsrt::cpu::detail
