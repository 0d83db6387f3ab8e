// Internal: the int8-activation decode kernels and int8 GEMM tiles of the K-quant formats and
// IQ4_NL (QdotFn / QgemmFn of qdot_kernels.hpp), compiled twice: by matmul/matmul_kquant_avx2.cpp
// (VPMADDUBSW + VPMADDWD) and by qdot_kquant_avxvnni.cpp (-mavxvnni: byte_dot's VPDPBUSD, the same
// int32 lanes, so the same bits). Include only from those two files (anonymous namespace).
#pragma once

#include "cpu/matmul/kquant_formats_avx2.hpp"

namespace sitsrt::cpu::detail {
namespace {

// ---- Int8 activations (qdot_kernels.hpp): a super-block spans 8 activation blocks. ----

inline __m256i dot_lanes_unsigned(__m256i u, const std::int8_t* q) {  // u <= 15: pair sums fit int16
  const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
  return byte_dot(u, x);
}

// Q4_K / Q5_K levels of sub-blocks 2 p (u0) and 2 p + 1 (u1); qh: the Q5_K block's high bits.
template <bool kFifthBit, typename Block>
inline void k4_levels(const Block& blk, __m256i qh, int p, __m256i& u0, __m256i& u1) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i v = load32(blk.qs + 32 * p);
  u0 = _mm256_and_si256(v, low4);
  u1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
  if constexpr (kFifthBit) {  // bit 2p / 2p + 1 of qh[l] -> 16
    const __m256i bit0 = _mm256_set1_epi8(static_cast<char>(1 << (2 * p)));
    const __m256i bit1 = _mm256_set1_epi8(static_cast<char>(2 << (2 * p)));
    const __m256i sixteen = _mm256_set1_epi8(16);
    u0 = _mm256_or_si256(u0, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit0), bit0), sixteen));
    u1 = _mm256_or_si256(u1, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit1), bit1), sixteen));
  }
}

// Q4_K / Q5_K: sub-block s is activation block 8 B + s; mins use ds of the 8 blocks as one
// vector. Q5_K levels (<= 31) still keep vpmaddubsw's int16 pair sums below 2 * 31 * 127.
template <bool kFifthBit, typename Block>
void qdot_k4(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  const std::int64_t nb = x.blocks / 8;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const Block*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (std::int64_t B = 0; B < nb; ++B) {
      prefetch_ahead(blocks + B);
      const Block& blk = blocks[B];
      alignas(32) float dl[8], ml[8];
      scales_k4(blk.scales, half_at(blk.d), half_at(blk.dmin), dl, ml);
      __m256i qh = _mm256_setzero_si256();
      if constexpr (kFifthBit) qh = load32(blk.qh);
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        __m256i u0, u1;
        k4_levels<kFifthBit>(blk, qh, p, u0, u1);
        const std::int64_t b0 = 8 * B + 2 * p;
        const __m256i lanes0 = dot_lanes_unsigned(u0, x.qs + 32 * b0);
        const __m256i lanes1 = dot_lanes_unsigned(u1, x.qs + 32 * b0 + 32);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes0),
                               _mm256_mul_ps(_mm256_broadcast_ss(dl + 2 * p), _mm256_load_ps(x.d8 + 8 * b0)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes1),
                               _mm256_mul_ps(_mm256_broadcast_ss(dl + 2 * p + 1), _mm256_load_ps(x.d8 + 8 * b0 + 8)),
                               acc1);
      }
      accm = _mm256_fmadd_ps(_mm256_load_ps(ml), _mm256_loadu_ps(x.ds + 8 * B), accm);
    }
    y[r] = hsum(_mm256_add_ps(acc0, acc1)) - hsum(accm);
  }
}

// |w| against sign(w) q for signed 8-bit levels with |w| <= 127 (pair sums <= 2 * 127 * 127).
inline __m256i dot_lanes_signed(__m256i wv, const std::int8_t* q) {
  const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
  return byte_dot(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xq, wv));
}

// Q2_K / Q3_K: group k is activation block 8 B + k; lanes 0-3 / 4-7 are its sub-blocks 2 k and
// 2 k + 1. Q3_K's signed levels (-4..3) use the sign trick; Q2_K's unsigned levels (0..3) go
// straight into vpmaddubsw and its mins take the half sums of q from a second vpmaddubsw of ones.
template <typename F>
void qdot_k2(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  constexpr bool kQ2 = F::kHasMin;
  const std::int64_t nb = x.blocks / 8;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename F::Block*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (std::int64_t B = 0; B < nb; ++B) {
      prefetch_ahead(blocks + B);
      const auto& blk = blocks[B];
      alignas(32) float dl[16], ml[16];
      F::scales(blk, dl, ml);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const std::int64_t b = 8 * B + k;
        const __m256 d8 = _mm256_load_ps(x.d8 + 8 * b);
        const __m256 scales =
            _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(dl[2 * k])), _mm_set1_ps(dl[2 * k + 1]), 1);
        __m256i lanes;
        __m256& acc = k % 2 == 0 ? acc0 : acc1;
        if constexpr (kQ2) {
          const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * b));
          lanes = byte_dot(low2_bits(blk.qs, k), xq);
          const __m256i sums = byte_dot(_mm256_set1_epi8(1), xq);
          const __m256 mins =
              _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(ml[2 * k])), _mm_set1_ps(ml[2 * k + 1]), 1);
          acc = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(mins, d8), acc);
        } else {
          const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << k));
          const __m256i has = _mm256_cmpeq_epi8(_mm256_and_si256(load32(blk.hmask), bit), bit);
          const __m256i u = _mm256_or_si256(low2_bits(blk.qs, k), _mm256_and_si256(has, _mm256_set1_epi8(4)));
          lanes = dot_lanes_signed(_mm256_sub_epi8(u, _mm256_set1_epi8(4)), x.qs + 32 * b);
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(scales, d8), acc);
      }
    }
    y[r] = hsum(_mm256_add_ps(acc0, acc1));
  }
}

// IQ4_NL: one activation block per weight block, levels from the vpshufb table.
void qdot_iq4_nl(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const BlockIQ4_NL*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const auto block = [&](std::int64_t b, __m256& acc) {
      const __m256i lanes = dot_lanes_signed(IQ4NL::signed_levels(blocks[b]), x.qs + 32 * b);
      const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(half_at(blocks[b].d)), _mm256_load_ps(x.d8 + 8 * b));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), scale, acc);
    };
    std::int64_t b = 0;
    for (; b + 2 <= x.blocks; b += 2) {
      prefetch_ahead(blocks + b);
      block(b, acc0);
      block(b + 1, acc1);
    }
    if (b < x.blocks) block(b, acc0);
    y[r] = hsum(_mm256_add_ps(acc0, acc1));
  }
}

// fl(d * scale) of Q6_K sub-blocks 8 h .. 8 h + 7, one vector per half h.
inline void q6_k_scales(const BlockQ6_K& blk, __m256 (&dl)[2]) {
  const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
  const __m256 d = _mm256_set1_ps(half_at(blk.d));
  dl[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
  dl[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))));
}
// The signed levels of activation block 4 h + j of the super-block.
inline __m256i q6_k_levels(const BlockQ6_K& blk, int h, int j) {
  const __m256i ql = load32(blk.ql + 64 * h + 32 * (j & 1)), qh = load32(blk.qh + 32 * h);
  const __m256i low = _mm256_and_si256(j < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0F));
  const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), _mm256_set1_epi8(3));
  return _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32));
}
// Lanes 0-3: the scale of sub-block 2 j of half dl, lanes 4-7: of 2 j + 1.
inline __m256 q6_k_pair_scales(__m256 dl, int j) {
  return _mm256_permutevar8x32_ps(
      dl, _mm256_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1));
}

// Q6_K: signed levels u - 32 in [-32, 31]; as Q8_0 in qdot_avx2.cpp, |w| against sign(w) q keeps
// the int16 pair sums within 2 * 32 * 127. Lanes 0-3 of a block are its first 16 elements
// (scale 2 k), lanes 4-7 the second 16 (scale 2 k + 1).
void qdot_q6_k(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  const std::int64_t nb = x.blocks / 8;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const BlockQ6_K*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (std::int64_t B = 0; B < nb; ++B) {
      prefetch_ahead(blocks + B);
      const BlockQ6_K& blk = blocks[B];
      __m256 dl[2];
      q6_k_scales(blk, dl);
      for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const __m256i wv = q6_k_levels(blk, h, j);
          const std::int64_t b = 8 * B + 4 * h + j;
          const __m256i lanes = dot_lanes_signed(wv, x.qs + 32 * b);
          const __m256 scales = q6_k_pair_scales(dl[h], j);
          __m256& acc = j % 2 == 0 ? acc0 : acc1;
          acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(scales, _mm256_load_ps(x.d8 + 8 * b)), acc);
        }
      }
    }
    y[r] = hsum(_mm256_add_ps(acc0, acc1));
  }
}

// ---- Int8 GEMM (m > 1 activation rows, QgemmFn of qdot_kernels.hpp) ----
// R weight rows x C activation rows. Per (row, activation) pair exactly the float operations of
// qdot_k4 / qdot_q6_k (the same scale products from the same dl / ml, the FMA sequence into the
// same accumulators, the same reduction), so each output is bit-identical to the decode kernel's;
// the levels and scales are unpacked once per weight row for the C activation rows.
template <bool kFifthBit, typename Block>
struct K4Tile {
  template <int R, int C>
  struct Of {
    static void run(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, float* y, std::int64_t ldy) {
      const std::int64_t nb = x[0].blocks / 8;
      const Block* rows[R];
      __m256 acc0[R][C], acc1[R][C], accm[R][C];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        rows[r] = reinterpret_cast<const Block*>(w + static_cast<std::size_t>(r) * row_stride);
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) acc0[r][c] = acc1[r][c] = accm[r][c] = _mm256_setzero_ps();
      }
      for (std::int64_t B = 0; B < nb; ++B) {
        alignas(32) float dl[R][8], ml[R][8];
        __m256i qh[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          prefetch_ahead(rows[r] + B);
          const Block& blk = rows[r][B];
          scales_k4(blk.scales, half_at(blk.d), half_at(blk.dmin), dl[r], ml[r]);
          qh[r] = _mm256_setzero_si256();
          if constexpr (kFifthBit) qh[r] = load32(blk.qh);
        }
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
          __m256i u0[R], u1[R];
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) k4_levels<kFifthBit>(rows[r][B], qh[r], p, u0[r], u1[r]);
          const std::int64_t b0 = 8 * B + 2 * p;
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            const __m256 d0 = _mm256_load_ps(x[c].d8 + 8 * b0), d1 = _mm256_load_ps(x[c].d8 + 8 * b0 + 8);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
              const __m256i lanes0 = dot_lanes_unsigned(u0[r], x[c].qs + 32 * b0);
              const __m256i lanes1 = dot_lanes_unsigned(u1[r], x[c].qs + 32 * b0 + 32);
              acc0[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes0),
                                           _mm256_mul_ps(_mm256_broadcast_ss(dl[r] + 2 * p), d0), acc0[r][c]);
              acc1[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes1),
                                           _mm256_mul_ps(_mm256_broadcast_ss(dl[r] + 2 * p + 1), d1), acc1[r][c]);
            }
          }
        }
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const __m256 ds = _mm256_loadu_ps(x[c].ds + 8 * B);
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) accm[r][c] = _mm256_fmadd_ps(_mm256_load_ps(ml[r]), ds, accm[r][c]);
        }
      }
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) y[c * ldy + r] = hsum(_mm256_add_ps(acc0[r][c], acc1[r][c])) - hsum(accm[r][c]);
      }
    }
  };
};

template <int R, int C>
struct Q6KTile {
  static void run(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, float* y, std::int64_t ldy) {
    const std::int64_t nb = x[0].blocks / 8;
    const BlockQ6_K* rows[R];
    __m256 acc[2][R][C];  // qdot_q6_k's acc0 (even j) and acc1 (odd j)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      rows[r] = reinterpret_cast<const BlockQ6_K*>(w + static_cast<std::size_t>(r) * row_stride);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[0][r][c] = acc[1][r][c] = _mm256_setzero_ps();
    }
    for (std::int64_t B = 0; B < nb; ++B) {
      __m256 dl[R][2];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        prefetch_ahead(rows[r] + B);
        q6_k_scales(rows[r][B], dl[r]);
      }
      for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const std::int64_t b = 8 * B + 4 * h + j;
          __m256i wv[R], abs_w[R];
          __m256 scales[R];
#pragma GCC unroll 4
          for (int r = 0; r < R; ++r) {
            wv[r] = q6_k_levels(rows[r][B], h, j);
            abs_w[r] = _mm256_sign_epi8(wv[r], wv[r]);
            scales[r] = q6_k_pair_scales(dl[r][h], j);
          }
#pragma GCC unroll 4
          for (int c = 0; c < C; ++c) {
            const __m256i xq = _mm256_load_si256(reinterpret_cast<const __m256i*>(x[c].qs + 32 * b));
            const __m256 d8 = _mm256_load_ps(x[c].d8 + 8 * b);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {  // dot_lanes_signed with |w| hoisted
              const __m256i lanes = byte_dot(abs_w[r], _mm256_sign_epi8(xq, wv[r]));
              acc[j % 2][r][c] =
                  _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(scales[r], d8), acc[j % 2][r][c]);
            }
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) y[c * ldy + r] = hsum(_mm256_add_ps(acc[0][r][c], acc[1][r][c]));
    }
  }
};

// The decode kernel of kType (every K type but Q8_K, and IQ4_NL).
template <DType kType>
void qdot_kquant_rows(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                      std::int64_t n_rows) {
  if constexpr (kType == DType::kQ2_K) {
    qdot_k2<Q2K>(w, row_stride, x, y, n_rows);
  } else if constexpr (kType == DType::kQ3_K) {
    qdot_k2<Q3K>(w, row_stride, x, y, n_rows);
  } else if constexpr (kType == DType::kQ4_K) {
    qdot_k4<false, BlockQ4_K>(w, row_stride, x, y, n_rows);
  } else if constexpr (kType == DType::kQ5_K) {
    qdot_k4<true, BlockQ5_K>(w, row_stride, x, y, n_rows);
  } else if constexpr (kType == DType::kQ6_K) {
    qdot_q6_k(w, row_stride, x, y, n_rows);
  } else {
    static_assert(kType == DType::kIQ4_NL);
    qdot_iq4_nl(w, row_stride, x, y, n_rows);
  }
}

// The int8 GEMM of Q4_K, Q5_K and Q6_K, else nullptr.
inline QgemmFn qgemm_kquant_tiles(DType type) noexcept {
  // 2 weight rows x 2 activation rows (Q4_K / Q5_K: 12 accumulators) and 2 x 3 (Q6_K: 12).
  switch (type) {
    case DType::kQ4_K:
      return qgemm_tiles<K4Tile<false, BlockQ4_K>::Of, 2, 2>;
    case DType::kQ5_K:
      return qgemm_tiles<K4Tile<true, BlockQ5_K>::Of, 2, 2>;
    case DType::kQ6_K:
      return qgemm_tiles<Q6KTile, 2, 3>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace sitsrt::cpu::detail
