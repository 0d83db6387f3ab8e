// Q8_0R products with block-sum numerics on AVX-512 VNNI, without the tile unit: every output is
// y = sum_b float(isum_b) * fl(d_w d_x), one FMA per 32-level block in block order, isum_b the
// block's exact int32 dot. These are the AMX-INT8 tiles' numerics (qgemm_amx.cpp), so on both
// kinds of machine one row, a batch and the tiles give the same bits for a whole 16-row tile.
//
// Why: the pair kernels (qgemm_avx512vnni.cpp's q8_tile) convert, scale and accumulate every
// 4-level VPDPBUSD partial: three float operations per VPDPBUSD, so on CPUs without AMX (AMD EPYC)
// a 16-stream decode step spent three quarters of its time there (docs/performance.md). Here the
// float step runs once per block and activation row, for 16 weight rows at once.
//
// The multi-row kernel transposes each 16-row tile's repack group (<= 32 blocks) once into a
// K-interleaved panel in L1: block i's vector p holds levels 4p .. 4p + 3 of the 16 rows (lane r =
// weight row r). Eight VPDPBUSD against broadcast 4-level words of one activation row then give
// the block's 16 exact sums, lanes = weight rows, with no reduction; the panel serves every
// activation row of the call. The one-row kernel (batch-invariant decode of a single sequence)
// skips the transpose: it forms 16 rows' partials from their own loads and reduces them exactly.
//
// Weight rows past the last whole 16-row tile keep the pair kernels (qgemm_avx512vnni.cpp and the
// decode table), one-row and multi-row alike, as the AMX path does; matmul hands out weight rows in
// 16-row units, so which rows those are never depends on the thread count.
#include "core/quant_blocks.hpp"
#include "cpu/qdot/q8_block_sums_avx512.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/qdot/qdot_prefetch_avx512.hpp"
#include "cpu/qdot/transpose16_avx512.hpp"
#include "cpu/repacked_blocks.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {
namespace {

constexpr int kTile = 16;
constexpr int kOneRowPrefetchBlocks = 16;  // q8r_one_row_vnni: each row's line this far ahead

inline __m512i tile_row_offsets(std::size_t row_stride) {
  return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32(static_cast<int>(row_stride)));
}

// Where a row's blocks lie, read a pair of blocks (b even) at a time; a row's odd last block is
// read alone. (Repack groups hold 32 blocks, so a pair never straddles two.)
//
// pair_levels: blocks b and b + 1 (zeros when !pair) of one row as unsigned levels q + 128.
// scales: the 16 rows' fp16 scales of blocks b (d0) and b + 1 (d1, when pair) as floats, lanes =
// rows, from rows (row 0), each gathered word lying inside the row.
struct RepackedQ8Blocks {
  static __m512i pair_levels(const std::byte* row, std::int64_t nb, std::int64_t b, bool pair) {
    const std::byte* at = row + levels_offset(nb, b);
    return pair ? _mm512_loadu_si512(at)
                : _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
  }
  static void scales(const std::byte* rows, __m512i row_offsets, std::int64_t nb, std::int64_t b, bool pair, __m512& d0,
                     __m512& d1) {
    // The word holding both scales, or for a lone block the word ending with its scale (so
    // nothing past the group's scale array is read).
    const RepackGroup group = repack_group(b / kRepackGroupBlocks, nb, sizeof(BlockQ8_0));
    const std::byte* scale = rows + group.offset + static_cast<std::size_t>(group.blocks) * kQBlock +
                             2 * static_cast<std::size_t>(b % kRepackGroupBlocks);
    const __m512i words = _mm512_i32gather_epi32(row_offsets, scale - (pair ? 0 : 2), 1);
    d0 = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(pair ? words : _mm512_srli_epi32(words, 16)));
    d1 = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, 16)));
  }
  static std::size_t levels_offset(std::int64_t nb, std::int64_t b) {
    const RepackGroup group = repack_group(b / kRepackGroupBlocks, nb, sizeof(BlockQ8_0));
    return group.offset + static_cast<std::size_t>(b % kRepackGroupBlocks) * kQBlock;
  }
};
struct StoredQ8Blocks {
  static __m512i pair_levels(const std::byte* row, std::int64_t /*nb*/, std::int64_t b, bool pair) {
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(row);
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[b].qs));
    const __m256i hi =
        pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[b + 1].qs)) : _mm256_set1_epi8(-128);
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), _mm512_set1_epi8(-128));
  }
  static void scales(const std::byte* rows, __m512i row_offsets, std::int64_t /*nb*/, std::int64_t b, bool pair,
                     __m512& d0, __m512& d1) {
    // The word at the block's start: its scale, then its first two levels.
    const std::byte* at = rows + static_cast<std::size_t>(b) * sizeof(BlockQ8_0);
    d0 = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(row_offsets, at, 1)));
    if (pair)
      d1 = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(row_offsets, at + sizeof(BlockQ8_0), 1)));
  }
};

// ---- one activation row: 16 rows' partials from their own loads, reduced exactly ----

// Reduction of 16 registers (register r: row r's 8 partials of block b, then 8 of block b + 1)
// to two vectors of 16 block sums: unpack/add pairs of rows (4 partials per 128-bit lane left),
// then pairs of pairs (one per lane), then 128-bit lanes of each block.
inline void reduce_two_blocks(__m512i (&p)[kTile], __m512i& sum_b, __m512i& sum_b1) {
  __m512i q[8], r[4];
  for (int i = 0; i < 8; ++i) {
    q[i] =
        _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * i], p[2 * i + 1]), _mm512_unpackhi_epi32(p[2 * i], p[2 * i + 1]));
  }
  for (int j = 0; j < 4; ++j) {
    r[j] =
        _mm512_add_epi32(_mm512_unpacklo_epi64(q[2 * j], q[2 * j + 1]), _mm512_unpackhi_epi64(q[2 * j], q[2 * j + 1]));
  }
  // r[j]'s 128-bit lanes: rows 4j..4j+3 over partials 0-3, 4-7 of block b, then of block b + 1.
  const __m512i u01 = _mm512_add_epi32(_mm512_shuffle_i32x4(r[0], r[1], 0x88), _mm512_shuffle_i32x4(r[0], r[1], 0xDD));
  const __m512i u23 = _mm512_add_epi32(_mm512_shuffle_i32x4(r[2], r[3], 0x88), _mm512_shuffle_i32x4(r[2], r[3], 0xDD));
  sum_b = _mm512_shuffle_i32x4(u01, u23, 0x88);
  sum_b1 = _mm512_shuffle_i32x4(u01, u23, 0xDD);
}

// Block sums of blocks b and b + 1 (when pair; else b alone) of the 16 rows at `rows`, each
// accumulator starting at -128 sum(x) of its block (the levels are taken as q + 128).
template <typename Blocks>
inline void two_block_sums(const std::byte* rows, std::size_t row_stride, std::int64_t nb, std::int64_t b, bool pair,
                           __m512i xb, __m512i start, __m512i& sum_b, __m512i& sum_b1, bool prefetch_rows) {
  __m512i p[kTile];
  const std::byte* row = rows;
  const std::size_t ahead = static_cast<std::size_t>(b + kOneRowPrefetchBlocks) * sizeof(BlockQ8_0);
  const bool to_l2 = prefetch_policy().to_l2;  // 16 streams: the distance stays this kernel's own
  for (int r = 0; r < kTile; ++r, row += row_stride) {
    if (prefetch_rows) prefetch_line(row + ahead, to_l2);
    p[r] = _mm512_dpbusd_epi32(start, Blocks::pair_levels(row, nb, b, pair), xb);
  }
  reduce_two_blocks(p, sum_b, sum_b1);
}

// Whole 16-row tiles of n_rows (a multiple of 16). The next tile (one contiguous region) is
// requested in address order while one runs, as in qgemm_amx.cpp's q8_tiles; a pair of blocks at
// a time. (Deterministic single-stream decode, 0.35B Q8_0: see docs/performance.md.)
template <typename Blocks>
void one_row_tiles(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  const std::int64_t nb = x.blocks;
  const __m512i row_offsets = tile_row_offsets(row_stride);
  const std::size_t tile_bytes = kTile * row_stride;
  const auto tile_lines = static_cast<std::int64_t>((tile_bytes + 63) / 64);
  const std::int64_t lines_per_pair = (tile_lines + (nb + 1) / 2 - 1) / ((nb + 1) / 2);
  for (std::int64_t r0 = 0; r0 + kTile <= n_rows; r0 += kTile) {
    const std::byte* rows = w + static_cast<std::size_t>(r0) * row_stride;
    const std::byte* next = rows + tile_bytes;
    const bool prefetch_rows = r0 == 0;
    std::int64_t line = 0;
    __m512 acc = _mm512_setzero_ps();
    for (std::int64_t b = 0; b < nb;) {  // b stays even: groups hold 32 blocks, so pairs never straddle one
      for (const std::int64_t end = line + lines_per_pair < tile_lines ? line + lines_per_pair : tile_lines; line < end;
           ++line) {
        prefetch_l2(next + 64 * line);
      }
      const bool pair = b + 1 < nb;  // an odd row's last block alone (upper half zero)
      // lane 0: block b's offset, lane 8: block b + 1's (each block's 8 partial lanes sum to it)
      const __m512i start = _mm512_maskz_set1_epi32(0x0001, -128 * x.sum[b]) |
                            (pair ? _mm512_maskz_set1_epi32(0x0100, -128 * x.sum[b + 1]) : _mm512_setzero_si512());
      const __m512i xb =
          pair ? _mm512_load_si512(x.qs + 32 * b)
               : _mm512_zextsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * b)));
      __m512i sum_b, sum_b1;
      two_block_sums<Blocks>(rows, row_stride, nb, b, pair, xb, start, sum_b, sum_b1, prefetch_rows);
      __m512 dw, dw1;
      Blocks::scales(rows, row_offsets, nb, b, pair, dw, dw1);
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum_b), _mm512_mul_ps(dw, _mm512_set1_ps(x.d[b])), acc);
      if (pair) acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum_b1), _mm512_mul_ps(dw1, _mm512_set1_ps(x.d[b + 1])), acc);
      b += 2;
    }
    _mm512_storeu_ps(y + r0, acc);
  }
}

// ---- m activation rows: K-interleaved panels of one repack group ----

constexpr int kMaxColumns = 32;  // activation rows per pass over a tile (accumulators in memory)
constexpr int kColumns = 8;      // activation rows per register pass (8 sums + 8 accumulators)

// One 16-row tile's repack group: block i's levels as 8 vectors (vector p: levels 4p .. 4p + 3
// of each row, lane r = row r, unsigned as stored) and its 16 scales as floats.
struct alignas(64) Panel {
  __m512i words[kRepackGroupBlocks][8];
  __m512 scales[kRepackGroupBlocks];
};

// Lines of the next tile requested per pair of blocks transposed (NextTile: the tile's region is
// contiguous, so requests in address order let the L2 streamer run ahead; as in q8_tiles).
struct NextTile {
  const std::byte* at = nullptr;
  std::int64_t line = 0, lines = 0, per_pair = 0;
  void step() {
    for (const std::int64_t end = line + per_pair < lines ? line + per_pair : lines; line < end; ++line) {
      prefetch_l2(at + 64 * line);
    }
  }
};

template <typename Blocks>
void fill_panel(const std::byte* rows, std::size_t row_stride, __m512i row_offsets, std::int64_t nb,
                const RepackGroup& group, std::int64_t b0, Panel& panel, NextTile& next) {
  for (int i = 0; i < group.blocks; i += 2) {
    next.step();
    const std::int64_t b = b0 + i;
    const bool pair = i + 1 < group.blocks;
    __m512i r[kTile];
    const std::byte* row = rows;
    for (int k = 0; k < kTile; ++k, row += row_stride) r[k] = Blocks::pair_levels(row, nb, b, pair);
    transpose16x32bit(r);  // r[p]: word p of block i (p < 8) or of block i + 1 (p >= 8), lane = row
    for (int p = 0; p < 8; ++p) _mm512_store_si512(&panel.words[i][p], r[p]);
    __m512 d0, d1;
    Blocks::scales(rows, row_offsets, nb, b, pair, d0, d1);
    panel.scales[i] = d0;
    if (pair) {
      for (int p = 0; p < 8; ++p) _mm512_store_si512(&panel.words[i + 1][p], r[8 + p]);
      panel.scales[i + 1] = d1;
    }
  }
}

// acc[c] (lanes = the tile's rows) += the panel's `blocks` blocks against activation rows x[c],
// whose block b0 is the panel's block 0: per block, 8 VPDPBUSD per row into its exact sum, then
// acc += float(sum) * fl(d_w d_x).
template <int C>
void panel_pass(const Panel& panel, int blocks, std::int64_t b0, const QuantizedRow* x, __m512* acc_mem) {
  __m512 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm512_load_ps(reinterpret_cast<const float*>(acc_mem + c));
  for (int i = 0; i < blocks; ++i) {
    const std::int64_t b = b0 + i;
    __m512i sum[C];
    block_sums<C>(reinterpret_cast<const std::byte*>(panel.words[i]), x, b, sum);
    scale_block<C>(panel.scales[i], x, b, sum, acc);
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm512_store_ps(reinterpret_cast<float*>(acc_mem + c), acc[c]);
}

using PassFn = void (*)(const Panel&, int, std::int64_t, const QuantizedRow*, __m512*);
constexpr PassFn kPasses[kColumns] = {panel_pass<1>, panel_pass<2>, panel_pass<3>, panel_pass<4>,
                                      panel_pass<5>, panel_pass<6>, panel_pass<7>, panel_pass<8>};

// Whole 16-row tiles of n_rows (a multiple of 16) against m activation rows.
template <typename Blocks>
void gemm_tiles(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, std::int64_t m, float* y,
                std::int64_t ldy, std::int64_t n_rows) {
  const std::int64_t nb = x[0].blocks;
  const std::int64_t groups = (nb + kRepackGroupBlocks - 1) / kRepackGroupBlocks;
  const __m512i row_offsets = tile_row_offsets(row_stride);
  Panel panel;
  alignas(64) __m512 acc[kMaxColumns];
  const std::size_t tile_bytes = kTile * row_stride;
  const auto tile_lines = static_cast<std::int64_t>((tile_bytes + 63) / 64);
  const std::int64_t pairs = (nb + 1) / 2;
  for (std::int64_t r0 = 0; r0 + kTile <= n_rows; r0 += kTile) {
    const std::byte* rows = w + static_cast<std::size_t>(r0) * row_stride;
    NextTile next{rows + tile_bytes, 0, tile_lines, (tile_lines + pairs - 1) / pairs};
    for (std::int64_t i0 = 0; i0 < m; i0 += kMaxColumns) {
      if (i0 > 0) next.per_pair = 0;  // requested during the first pass
      const int n = static_cast<int>(m - i0 < kMaxColumns ? m - i0 : kMaxColumns);
      for (int c = 0; c < n; ++c) acc[c] = _mm512_setzero_ps();
      for (std::int64_t g = 0; g < groups; ++g) {
        const RepackGroup group = repack_group(g, nb, sizeof(BlockQ8_0));
        fill_panel<Blocks>(rows, row_stride, row_offsets, nb, group, g * kRepackGroupBlocks, panel, next);
        for (int c0 = 0; c0 < n; c0 += kColumns) {
          const int nc = n - c0 < kColumns ? n - c0 : kColumns;
          kPasses[nc - 1](panel, group.blocks, g * kRepackGroupBlocks, x + i0 + c0, acc + c0);
        }
      }
      for (int c = 0; c < n; ++c) _mm512_storeu_ps(y + (i0 + c) * ldy + r0, acc[c]);
    }
  }
}

// Whole tiles by block sums, a last partial tile by the VNNI decode kernel of the layout.
template <typename Blocks, WeightLayout kLayout>
void one_row(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  const std::int64_t whole = n_rows / kTile * kTile;
  one_row_tiles<Blocks>(w, row_stride, x, y, whole);
  if (whole < n_rows) {
    qdot_kernels_avx512vnni().matvec[static_cast<int>(kLayout)](w + static_cast<std::size_t>(whole) * row_stride,
                                                                row_stride, x, y + whole, n_rows - whole);
  }
}

}  // namespace

QgemmFn qgemm_q8_block_sum_tiles(WeightLayout layout) noexcept {
  if (layout == WeightLayout::kQ8_0R) return gemm_tiles<RepackedQ8Blocks>;
  if (layout == WeightLayout::kQ8_0) return gemm_tiles<StoredQ8Blocks>;
  return nullptr;
}

QdotFn qdot_q8_block_sums(WeightLayout layout) noexcept {
  if (layout == WeightLayout::kQ8_0R) return one_row<RepackedQ8Blocks, WeightLayout::kQ8_0R>;
  if (layout == WeightLayout::kQ8_0) return one_row<StoredQ8Blocks, WeightLayout::kQ8_0>;
  return nullptr;
}

}  // namespace sitsrt::cpu::detail
