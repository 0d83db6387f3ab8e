// AVX2 integer-dot kernels for m > 1 activation rows (decode batches and prefill) of Q8_0, Q4_0,
// Q4_1, Q5_0 and Q5_1 weights: each weight block is loaded and unpacked (nibbles, abs, fp16
// scales) once for a tile of activation rows, and each activation block loaded once for a tile of
// weight rows, instead of both once per (row, activation) pair as m calls of the decode kernel do.
// Q4_K, Q5_K and Q6_K have theirs beside their decode kernels (matmul_kquant_avx2.cpp).
//
// Batch invariance: every (weight row r, activation row i) output is computed with exactly the
// operations of the decode kernel qdot_avx2<D> (qdot_decode_avx2.hpp) for that pair, taken from the same
// helpers (qdot_blocks_avx2.hpp): the same int32 block lanes (vpmaddubsw, vpmaddwd and the offset
// lanes, exact: VPDPBUSD in the AVX-VNNI build, as its decode), the same scale product fl(d_w d_x) per block, the FMA
// of block b into acc0 for even b and into acc1 for odd b (a lone last block into acc0), the min term's FMA after it,
// and y = hsum(acc0 + acc1). Only the order in which the tile's independent accumulators are updated differs. Hence
// y[i][r] is bit-identical to the m == 1 result for row i, whatever m, whichever rows share the call and however rows
// are split over threads.
//
// Compiled twice, by qgemm_avx2.cpp and qgemm_avxvnni.cpp (with byte_dot's VNNI form, as the
// decode kernels of that build): include only from those two files (anonymous namespace).
#pragma once

#include "core/quant_blocks.hpp"
#include "cpu/matmul/kquant_kernels.hpp"
#include "cpu/qdot/qdot_blocks_avx2.hpp"
#include "cpu/qdot/qdot_kernels.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {
namespace {

// Each format: Weights, one weight row's block unpacked; Act, one activation row's block; and
// add(), the decode kernel's block step of that pair (block_dot in qdot_decode_avx2.hpp).
struct GemmQ8_0 {
  using Block = BlockQ8_0;
  struct Weights {
    __m256i w, abs_w;
    __m256 d;
  };
  struct Act {
    __m256i q;
    __m256 d;
  };
  static Weights weights(const Block& b) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
    return {w, _mm256_sign_epi8(w, w), _mm256_set1_ps(half_at(&b.d))};
  }
  static Act act(const QuantizedRow& x, std::int64_t b) {
    return {_mm256_load_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * b)), _mm256_load_ps(x.d8 + 8 * b)};
  }
  static __m256 add(const Weights& w, const Act& a, __m256 acc) {
    return scaled_add(q8_lanes(w.w, w.abs_w, a.q), w.d, a.d, acc);
  }
};

// Unsigned levels: Q4 (offset 8 = 8 lanes x 1, kShift 0) and Q5 (16 = 8 x 2, kShift 1), the
// offset cancelled in the int32 lanes, or with a min (kMin) its float term m_w fl(d_x sum q).
inline __m256i q4_levels(const BlockQ4_0& b) {
  return nibbles(b.qs);
}
inline __m256i q4_levels(const BlockQ4_1& b) {
  return nibbles(b.qs);
}
template <typename B>
inline __m256i q5_levels(const B& b) {
  return q5_levels(b.qs, b.qh);
}
template <typename B, bool kMin, int kShift, bool kQ5>
struct GemmUnsigned {
  using Block = B;
  struct Weights {
    __m256i u;
    __m256 d, m;
  };
  struct Act {
    __m256i q, offset;
    __m256 d, ds;
  };
  static Weights weights(const Block& b) {
    Weights w;
    if constexpr (kQ5) {
      w.u = q5_levels(b);
    } else {
      w.u = q4_levels(b);
    }
    w.d = _mm256_set1_ps(half_at(&b.d));
    if constexpr (kMin) w.m = _mm256_set1_ps(half_at(&b.m));
    return w;
  }
  static Act act(const QuantizedRow& x, std::int64_t b) {
    Act a;
    a.q = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * b));
    a.d = _mm256_load_ps(x.d8 + 8 * b);
    if constexpr (kMin) {
      a.ds = _mm256_load_ps(x.ds8 + 8 * b);
    } else {
      a.offset = _mm256_slli_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(x.neg_sum8 + 8 * b)), kShift);
    }
    return a;
  }
  static __m256 add(const Weights& w, const Act& a, __m256 acc) {
    if constexpr (kMin) {
      return _mm256_fmadd_ps(w.m, a.ds, scaled_add(unsigned_lanes(w.u, a.q), w.d, a.d, acc));
    } else {
      return scaled_add(unsigned_lanes(w.u, a.q, a.offset), w.d, a.d, acc);
    }
  }
};
using GemmQ4_0 = GemmUnsigned<BlockQ4_0, false, 0, false>;
using GemmQ4_1 = GemmUnsigned<BlockQ4_1, true, 0, false>;
using GemmQ5_0 = GemmUnsigned<BlockQ5_0, false, 1, true>;
using GemmQ5_1 = GemmUnsigned<BlockQ5_1, true, 1, true>;

// Block b of R weight rows against C activation rows, into acc (acc0 or acc1 of the tile).
template <typename F, int R, int C>
[[gnu::always_inline]] inline void tile_block(const typename F::Block* const* rows, const QuantizedRow* x,
                                              std::int64_t b, __m256 (&acc)[R][C]) {
  typename F::Weights u[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) u[r] = F::weights(rows[r][b]);
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
    const typename F::Act a = F::act(x[c], b);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r][c] = F::add(u[r], a, acc[r][c]);
  }
}

// R weight rows x C activation rows, each pair as qdot_avx2<D>: blocks in pairs into acc0 / acc1,
// y = hsum(acc0 + acc1).
template <typename F, int R, int C>
void tile(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, float* y, std::int64_t ldy) {
  using Block = typename F::Block;
  const std::int64_t nb = x[0].blocks;
  const Block* rows[R];
  __m256 acc0[R][C], acc1[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    rows[r] = reinterpret_cast<const Block*>(w + static_cast<std::size_t>(r) * row_stride);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc0[r][c] = acc1[r][c] = _mm256_setzero_ps();
  }
  std::int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) prefetch_ahead(rows[r] + b);  // the decode kernel's weight prefetch
    tile_block<F, R, C>(rows, x, b, acc0);
    tile_block<F, R, C>(rows, x, b + 1, acc1);
  }
  if (b < nb) tile_block<F, R, C>(rows, x, b, acc0);
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) y[c * ldy + r] = hsum(_mm256_add_ps(acc0[r][c], acc1[r][c]));
  }
}

template <typename F>
struct Tiles {
  template <int R, int C>
  struct Of {
    static void run(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, float* y, std::int64_t ldy) {
      tile<F, R, C>(w, row_stride, x, y, ldy);
    }
  };
};

// 2 weight rows x 3 activation rows: 12 accumulators, the rest of the 16 ymm registers for the
// unpacked weights. Measured on Zen 3 (L2-resident weights, 1 thread, per (row, activation) block
// vs the per-row decode kernel): 1.3x Q8_0, 1.45x Q4_0, 1.6x Q4_1 at m >= 8; 2x2, 3x2, 3x3 and
// 1x4 within 5% of it, 4x1 no gain, 2x4 spills.
constexpr int kTileRows = 2, kTileActivations = 3;

QgemmFn qgemm_avx2_tiles(WeightLayout layout) noexcept {
  switch (layout) {
    case WeightLayout::kQ8_0:
      return qgemm_tiles<Tiles<GemmQ8_0>::Of, kTileRows, kTileActivations>;
    case WeightLayout::kQ4_0:
      return qgemm_tiles<Tiles<GemmQ4_0>::Of, kTileRows, kTileActivations>;
    case WeightLayout::kQ4_1:
      return qgemm_tiles<Tiles<GemmQ4_1>::Of, kTileRows, kTileActivations>;
    case WeightLayout::kQ5_0:
      return qgemm_tiles<Tiles<GemmQ5_0>::Of, kTileRows, kTileActivations>;
    case WeightLayout::kQ5_1:
      return qgemm_tiles<Tiles<GemmQ5_1>::Of, kTileRows, kTileActivations>;
    case WeightLayout::kQ4_K:
    case WeightLayout::kQ5_K:
    case WeightLayout::kQ6_K:
#if defined(__AVXVNNI__)
      return qgemm_kquant_avxvnni(stored_type(layout));  // qdot_kquant_avxvnni.cpp, beside their decode
#else
      return qgemm_kquant_avx2(stored_type(layout));  // matmul_kquant_avx2.cpp, beside their decode
#endif
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace sitsrt::cpu::detail
