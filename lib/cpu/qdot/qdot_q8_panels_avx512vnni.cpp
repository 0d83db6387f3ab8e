// Q8_0P (16-row tiles, cpu/repacked_blocks.hpp) on AVX-512 VNNI: one activation row and m rows,
// both with block-sum numerics, y = sum_b float(isum_b) * fl(d_w d_x) in block order (isum_b a
// block's exact int32 dot), as Q8_0R's block-sum kernels (qgemm_q8_block_sums_avx512vnni.cpp) and
// the AMX-INT8 tiles compute. A tile stores each block as the 8 vectors of 4-level words those
// kernels build per product by transposing 16 rows in L1, so here every block is 8 loads and 8
// VPDPBUSD per activation row against broadcast activation words, lanes = weight rows, one float
// step per block, and nothing is transposed: on CPUs without AMX the transpose's shuffles compete
// with VPDPBUSD for the same port (docs/performance.md).
//
// Rows past the last whole tile are Q8_0R rows and take the Q8_0R pair kernels (the decode table's
// entry and qgemm_avx512vnni), one row and m rows alike; matmul hands out rows in 16-row units
// from a tile's start, so which rows those are never depends on the thread count.
#include "core/quant_blocks.hpp"
#include "cpu/qdot/q8_block_sums_avx512.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/qdot/qdot_prefetch_avx512.hpp"
#include "cpu/repacked_blocks.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {
namespace {

constexpr std::size_t kBlockBytes = sizeof(BlockQ8_0);  // per row and block: 32 levels, fp16 d

inline __m512 tile_scales(const std::byte* at) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
}

// Lines of a contiguous region requested in address order, up to a moving limit (towards L1
// or L2).
struct Stream {
  const std::byte* next;
  bool to_l2;
  void up_to(const std::byte* limit) {
    for (; next < limit; next += 64) prefetch_line(next, to_l2);
  }
};

// ---- one activation row ----

// Whole tiles of n_rows (a multiple of 16): per block, two chains of 4 VPDPBUSD (integer sums:
// any order is exact) into the 16 rows' block sums, then acc += float(sum) * fl(d_w d_x).
void one_row_tiles(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  const std::int64_t nb = x.blocks;
  const std::int64_t groups = (nb + kRepackGroupBlocks - 1) / kRepackGroupBlocks;
  const DecodePrefetch& policy = prefetch_policy();  // the decode policy: stream_ahead bytes ahead
  Stream stream{w, policy.to_l2};                    // runs on into the next tile (padding lines are requested too)
  for (std::int64_t r0 = 0; r0 < n_rows; r0 += kTileRows) {
    const std::byte* tile = w + static_cast<std::size_t>(r0) * row_stride;
    __m512 acc = _mm512_setzero_ps();
    for (std::int64_t g = 0; g < groups; ++g) {
      const Q8PanelGroup group = q8_0p_group(g, nb);
      const std::byte* levels = tile + group.levels;
      const std::int64_t b0 = g * kRepackGroupBlocks;
      for (int i = 0; i < group.blocks; ++i, levels += 512) {
        stream.up_to(tile + kTileRows * kBlockBytes * static_cast<std::size_t>(b0 + i + 1) + policy.stream_ahead);
        const std::int64_t b = b0 + i;
        const std::int8_t* xq = x.qs + 32 * b;
        __m512i s0 = _mm512_set1_epi32(-128 * x.sum[b]), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
          s0 = _mm512_dpbusd_epi32(s0, _mm512_loadu_si512(levels + 64 * p), broadcast_word(xq + 4 * p));
          s1 = _mm512_dpbusd_epi32(s1, _mm512_loadu_si512(levels + 64 * (p + 4)), broadcast_word(xq + 4 * (p + 4)));
        }
        const __m512 dw = tile_scales(tile + group.scales + 32 * static_cast<std::size_t>(i));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(dw, _mm512_set1_ps(x.d[b])),
                              acc);
      }
    }
    _mm512_storeu_ps(y + r0, acc);
  }
}

void one_row(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  const std::int64_t whole = n_rows / kTileRows * kTileRows;
  one_row_tiles(w, row_stride, x, y, whole);
  if (whole < n_rows) {
    qdot_kernels_avx512vnni().matvec[static_cast<int>(WeightLayout::kQ8_0R)](
        w + static_cast<std::size_t>(whole) * row_stride, row_stride, x, y + whole, n_rows - whole);
  }
}

// ---- m activation rows ----

constexpr int kMaxColumns = 32;  // activation rows per pass over a tile (accumulators in memory)
constexpr int kColumns = 8;      // activation rows per register pass (8 sums + 8 accumulators)

// acc[c] (lanes = the tile's rows) += the group's blocks against activation rows x[c] (block b0 the
// group's first): per block 8 VPDPBUSD per row into its exact sum, then acc += float(sum) * fl(d_w
// d_x). `next` (first pass over a group only) requests the next tile's lines meanwhile.
template <int C>
void group_pass(const std::byte* tile, const Q8PanelGroup& group, std::int64_t b0, const QuantizedRow* x,
                __m512* acc_mem, Stream* next, std::size_t next_per_block) {
  __m512 acc[C];
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = _mm512_load_ps(reinterpret_cast<const float*>(acc_mem + c));
  const std::byte* levels = tile + group.levels;
  for (int i = 0; i < group.blocks; ++i, levels += 512) {
    if (next != nullptr) next->up_to(next->next + next_per_block);
    const std::int64_t b = b0 + i;
    __m512i sum[C];
    block_sums<C>(levels, x, b, sum);
    scale_block<C>(tile_scales(tile + group.scales + 32 * static_cast<std::size_t>(i)), x, b, sum, acc);
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) _mm512_store_ps(reinterpret_cast<float*>(acc_mem + c), acc[c]);
}

using PassFn = void (*)(const std::byte*, const Q8PanelGroup&, std::int64_t, const QuantizedRow*, __m512*, Stream*,
                        std::size_t);
constexpr PassFn kPasses[kColumns] = {group_pass<1>, group_pass<2>, group_pass<3>, group_pass<4>,
                                      group_pass<5>, group_pass<6>, group_pass<7>, group_pass<8>};

// Whole tiles of n_rows (a multiple of 16) against m activation rows: per tile and group, every
// activation row (8 per register pass) over the group's levels (17 KiB, in L1 after the first pass);
// the next tile (one contiguous region) is requested towards L2 in address order during the first.
void gemm_tiles(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, std::int64_t m, float* y,
                std::int64_t ldy, std::int64_t n_rows) {
  const std::int64_t nb = x[0].blocks;
  const std::int64_t groups = (nb + kRepackGroupBlocks - 1) / kRepackGroupBlocks;
  const std::size_t tile_stride = kTileRows * row_stride;
  const std::size_t per_block = (tile_stride + static_cast<std::size_t>(nb) - 1) / static_cast<std::size_t>(nb);
  alignas(64) __m512 acc[kMaxColumns];
  for (std::int64_t r0 = 0; r0 < n_rows; r0 += kTileRows) {
    const std::byte* tile = w + static_cast<std::size_t>(r0) * row_stride;
    Stream next{tile + tile_stride, true};  // towards L2 while the tile is computed on
    for (std::int64_t i0 = 0; i0 < m; i0 += kMaxColumns) {
      const int n = static_cast<int>(m - i0 < kMaxColumns ? m - i0 : kMaxColumns);
      for (int c = 0; c < n; ++c) acc[c] = _mm512_setzero_ps();
      for (std::int64_t g = 0; g < groups; ++g) {
        const Q8PanelGroup group = q8_0p_group(g, nb);
        for (int c0 = 0; c0 < n; c0 += kColumns) {
          const int nc = n - c0 < kColumns ? n - c0 : kColumns;
          Stream* ahead = i0 == 0 && c0 == 0 ? &next : nullptr;
          kPasses[nc - 1](tile, group, g * kRepackGroupBlocks, x + i0 + c0, acc + c0, ahead, per_block);
        }
      }
      for (int c = 0; c < n; ++c) _mm512_storeu_ps(y + (i0 + c) * ldy + r0, acc[c]);
    }
  }
}

void gemm(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, std::int64_t m, float* y, std::int64_t ldy,
          std::int64_t n_rows) {
  const std::int64_t whole = n_rows / kTileRows * kTileRows;
  gemm_tiles(w, row_stride, x, m, y, ldy, whole);
  if (whole < n_rows) {
    qgemm_avx512vnni(WeightLayout::kQ8_0R)(w + static_cast<std::size_t>(whole) * row_stride, row_stride, x, m,
                                           y + whole, ldy, n_rows - whole);
  }
}

}  // namespace

void qdot_q8_0p_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                           std::int64_t n_rows) {
  one_row(w, row_stride, x, y, n_rows);
}

void qgemm_q8_0p_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, std::int64_t m, float* y,
                            std::int64_t ldy, std::int64_t n_rows) {
  gemm(w, row_stride, x, m, y, ldy, n_rows);
}

}  // namespace sitsrt::cpu::detail
