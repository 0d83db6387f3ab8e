// AVX-512 VNNI integer-dot decode kernels (see qdot_kernels.hpp for the numerics).
// Two weight blocks per zmm: each block's levels become 32 unsigned bytes u (Q8_0: w + 128,
// i.e. w ^ 0x80; Q4/Q5: the nibble [| 5th bit]), vpdpbusd multiplies them with the signed int8
// activations and sums groups of 4 into 16 int32 lanes (8 per block), starting from
// -offset * sum(q) / 8 per lane so the offset (128, 8 or 16) cancels exactly in integers. The
// lanes are converted once and FMAed with [d_w0 d_x0 x8, d_w1 d_x1 x8]: no horizontal sums
// until the end of the row. (Q4_0 / Q4_0R use four blocks per zmm: qdot_q4_avx512vnni.cpp.)
#include "core/kquant_blocks.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/matmul/kquant_kernels.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/qdot/qdot_prefetch_avx512.hpp"
#include "cpu/qdot/q8_0_pairs_avx512.hpp"
#include "cpu/repacked_blocks.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <cstddef>
#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

// Nibbles of two 4-bit blocks: the two 16-byte qs arrays go to 128-bit lanes 0 and 2, are
// duplicated into lanes 1 and 3, and lanes 1 and 3 shift right by 4: after the mask, lane k of
// each block holds elements 16k..16k+15. Five vector ops for 64 levels.
inline __m512i nibbles_of(__m128i q0, __m128i q1) {
  __m512i v = _mm512_inserti32x4(_mm512_castsi128_si512(q0), q1, 2);
  v = _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(2, 2, 0, 0));
  v = _mm512_mask_srli_epi16(v, static_cast<__mmask32>(0xFF00FF00u), v, 4);
  return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
}
template <typename B>
inline __m512i pair_nibbles(const B* blocks, std::int64_t b, bool second) {
  const __m128i q1 = second ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b + 1].qs)) : _mm_setzero_si128();
  return nibbles_of(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs)), q1);
}
inline std::uint32_t load_qh(const std::uint8_t* qh) {
  std::uint32_t v;
  std::memcpy(&v, qh, 4);
  return v;
}

// Each Unpack*::levels(blocks, b, second) returns the unsigned levels of blocks b and b + 1 as
// 64 bytes (block b + 1 contributing zeros when !second, so a row's odd last block adds nothing).
// (UnpackQ8_0: q8_0_pairs_avx512.hpp.)
template <typename B, bool M>
struct UnpackQ4 {
  using Block = B;
  static constexpr bool kMin = M;
  static constexpr int kShift = 0;  // offset 8 = 8 lanes x 1
  static __m512i levels(const Block* blocks, std::int64_t b, bool second) { return pair_nibbles(blocks, b, second); }
};
template <typename B, bool M>
struct UnpackQ5 {
  using Block = B;
  static constexpr bool kMin = M;
  static constexpr int kShift = 1;  // offset 16 = 8 lanes x 2
  static __m512i levels(const Block* blocks, std::int64_t b, bool second) {
    const std::uint64_t qh = load_qh(blocks[b].qh) | (second ? std::uint64_t{load_qh(blocks[b + 1].qh)} << 32 : 0);
    const __m512i u = pair_nibbles(blocks, b, second);
    return _mm512_mask_add_epi8(u, static_cast<__mmask64>(qh), u, _mm512_set1_epi8(16));
  }
};

// Blocks b, b + 1 with their scale pair dw (and min pair mw) already built.
template <typename U>
inline void pair_dot_scaled(const typename U::Block* blocks, std::int64_t b, bool second, const QuantizedRow& x,
                            __m512 dw, __m512 mw, __m512& acc) {
  const __m512i u = U::levels(blocks, b, second);
  __m512i init = _mm512_setzero_si512();
  if constexpr (!U::kMin) init = _mm512_slli_epi32(_mm512_load_si512(x.neg_sum8 + 8 * b), U::kShift);
  const __m512i dot = _mm512_dpbusd_epi32(init, u, _mm512_load_si512(x.qs + 32 * b));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_load_ps(x.d8 + 8 * b)), acc);
  if constexpr (U::kMin) acc = _mm512_fmadd_ps(mw, _mm512_load_ps(x.ds8 + 8 * b), acc);
}

// Tail: one or two blocks, scales built per pair.
template <typename U>
inline void pair_dot(const typename U::Block* blocks, std::int64_t b, bool second, const QuantizedRow& x,
                     __m512& acc) {
  const __m512 dw = pair_halves(load_u16(&blocks[b].d), second ? load_u16(&blocks[b + 1].d) : 0u);
  __m512 mw = _mm512_setzero_ps();
  if constexpr (U::kMin) mw = pair_halves(load_u16(&blocks[b].m), second ? load_u16(&blocks[b + 1].m) : 0u);
  pair_dot_scaled<U>(blocks, b, second, x, dw, mw, acc);
}

// R rows at once: each step loads the activation blocks (levels, scales, offset sums) once for
// all R rows, and R independent streams keep more loads in flight. Every row's arithmetic (and
// its order) is exactly that of R = 1, so results do not depend on how rows are grouped.
template <typename U, int R>
inline void qdot_rows(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y) {
  using Block = typename U::Block;
  const std::int64_t nb = x.blocks;
  const Block* blocks[R];
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    blocks[r] = reinterpret_cast<const Block*>(w + static_cast<std::size_t>(r) * row_stride);
    acc0[r] = _mm512_setzero_ps();
    acc1[r] = _mm512_setzero_ps();
  }
  std::int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    prefetch_rows<R, 4 * sizeof(Block)>(w, row_stride, static_cast<std::size_t>(b) * sizeof(Block));
    __m512i init01 = _mm512_setzero_si512(), init23 = _mm512_setzero_si512();
    if constexpr (!U::kMin) {
      init01 = _mm512_slli_epi32(_mm512_load_si512(x.neg_sum8 + 8 * b), U::kShift);
      init23 = _mm512_slli_epi32(_mm512_load_si512(x.neg_sum8 + 8 * (b + 2)), U::kShift);
    }
    const __m512i q01 = _mm512_load_si512(x.qs + 32 * b), q23 = _mm512_load_si512(x.qs + 32 * (b + 2));
    const __m512 xd01 = _mm512_load_ps(x.d8 + 8 * b), xd23 = _mm512_load_ps(x.d8 + 8 * (b + 2));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m512 d01, d23, m01 = _mm512_setzero_ps(), m23 = _mm512_setzero_ps();
      quad_halves(blocks[r], b, offsetof(Block, d), d01, d23);
      if constexpr (U::kMin) quad_halves(blocks[r], b, offsetof(Block, m), m01, m23);
      const __m512i dot01 = _mm512_dpbusd_epi32(init01, U::levels(blocks[r], b, true), q01);
      const __m512i dot23 = _mm512_dpbusd_epi32(init23, U::levels(blocks[r], b + 2, true), q23);
      acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot01), _mm512_mul_ps(d01, xd01), acc0[r]);
      acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot23), _mm512_mul_ps(d23, xd23), acc1[r]);
      if constexpr (U::kMin) {
        acc0[r] = _mm512_fmadd_ps(m01, _mm512_load_ps(x.ds8 + 8 * b), acc0[r]);
        acc1[r] = _mm512_fmadd_ps(m23, _mm512_load_ps(x.ds8 + 8 * (b + 2)), acc1[r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    for (std::int64_t t = b; t < nb; t += 2) pair_dot<U>(blocks[r], t, t + 1 < nb, x, acc0[r]);
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
  }
}

template <typename U>
void qdot_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                     std::int64_t n_rows) {
  constexpr int kRows = 4;
  std::int64_t r = 0;
  for (; r + kRows <= n_rows; r += kRows) {
    qdot_rows<U, kRows>(w + static_cast<std::size_t>(r) * row_stride, row_stride, x, y + r);
  }
  for (; r < n_rows; ++r) qdot_rows<U, 1>(w + static_cast<std::size_t>(r) * row_stride, row_stride, x, y + r);
}

template <typename F, int R>
inline void qdot_repacked_rows(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y) {
  const std::int64_t nb = x.blocks;
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  const __m512i first_pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i second_pair = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
    const RepackGroup group = repack_group(g, nb, F::kBlockBytes);
    const std::size_t scales_at = group.offset + static_cast<std::size_t>(group.blocks) * F::kLevelBytes;
    int i = 0;
    for (; i + 4 <= group.blocks; i += 4) {
      const std::int64_t b = g * kRepackGroupBlocks + i;
      // As qdot_rows (the group holds the same bytes as its stored blocks, in another order).
      prefetch_rows<R, 4 * F::kBlockBytes>(w, row_stride, static_cast<std::size_t>(b) * F::kBlockBytes);
      const __m512i init01 = _mm512_slli_epi32(_mm512_load_si512(x.neg_sum8 + 8 * b), F::kShift);
      const __m512i init23 = _mm512_slli_epi32(_mm512_load_si512(x.neg_sum8 + 8 * (b + 2)), F::kShift);
      const __m512i q01 = _mm512_load_si512(x.qs + 32 * b), q23 = _mm512_load_si512(x.qs + 32 * (b + 2));
      const __m512 xd01 = _mm512_load_ps(x.d8 + 8 * b), xd23 = _mm512_load_ps(x.d8 + 8 * (b + 2));
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const std::byte* row = w + static_cast<std::size_t>(r) * row_stride;
        const __m512 halves = _mm512_castps128_ps512(
            _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + scales_at + 2 * i))));
        const __m512 d01 = _mm512_permutexvar_ps(first_pair, halves), d23 = _mm512_permutexvar_ps(second_pair, halves);
        __m512i u01, u23;
        F::quad_levels(row + group.offset + static_cast<std::size_t>(i) * F::kLevelBytes, u01, u23);
        const __m512i dot01 = _mm512_dpbusd_epi32(init01, u01, q01);
        const __m512i dot23 = _mm512_dpbusd_epi32(init23, u23, q23);
        acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot01), _mm512_mul_ps(d01, xd01), acc0[r]);
        acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot23), _mm512_mul_ps(d23, xd23), acc1[r]);
      }
    }
    for (; i < group.blocks; i += 2) {  // the row's last (nb mod 4) blocks, in pairs, as qdot_rows
      const std::int64_t b = g * kRepackGroupBlocks + i;
      const bool second = i + 1 < group.blocks;
      const __m512i init = _mm512_slli_epi32(_mm512_load_si512(x.neg_sum8 + 8 * b), F::kShift);
      const __m512i q = _mm512_load_si512(x.qs + 32 * b);
      const __m512 xd = _mm512_load_ps(x.d8 + 8 * b);
      for (int r = 0; r < R; ++r) {
        const std::byte* row = w + static_cast<std::size_t>(r) * row_stride;
        const std::byte* scales = row + scales_at;
        const __m512 dw = pair_halves(load_u16(scales + 2 * i), second ? load_u16(scales + 2 * (i + 1)) : 0u);
        const __m512i dot = _mm512_dpbusd_epi32(init, F::tail_levels(row + group.offset, i, second), q);
        acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, xd), acc0[r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
}

template <typename F>
void qdot_repacked(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  constexpr int kRows = 4;
  std::int64_t r = 0;
  for (; r + kRows <= n_rows; r += kRows) {
    qdot_repacked_rows<F, kRows>(w + static_cast<std::size_t>(r) * row_stride, row_stride, x, y + r);
  }
  for (; r < n_rows; ++r) qdot_repacked_rows<F, 1>(w + static_cast<std::size_t>(r) * row_stride, row_stride, x, y + r);
}

// INT4 g128: a group's 4 sub-blocks are two pairs (Q4_0-packed); lane 0 of each block starts at
// -z * sum(q), so the zero point cancels exactly in integers.
void qdot_q4_g128_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                             std::int64_t n_rows) {
  const std::int64_t ng = x.blocks / 4;
  constexpr __mmask16 kFirstLanes = 0x0101;  // lane 0 of each block of a pair
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* groups = reinterpret_cast<const BlockQ4_G128*>(w + static_cast<std::size_t>(r) * row_stride);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (std::int64_t g = 0; g < ng; ++g) {
      prefetch_ahead(groups + g);
      const __m512i zero = _mm512_set1_epi32(groups[g].zero & 15);
      const __m512 dw = _mm512_set1_ps(_cvtsh_ss(static_cast<unsigned short>(load_u16(&groups[g].d))));
      for (int p = 0; p < 2; ++p) {
        const std::int64_t b = 4 * g + 2 * p;
        const std::uint8_t* qs = groups[g].qs + 32 * p;
        const __m512i u = nibbles_of(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16)));
        const __m512i init = _mm512_maskz_mullo_epi32(kFirstLanes, _mm512_load_si512(x.neg_sum8 + 8 * b), zero);
        const __m512i dot = _mm512_dpbusd_epi32(init, u, _mm512_load_si512(x.qs + 32 * b));
        __m512& acc = p == 0 ? acc0 : acc1;
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_load_ps(x.d8 + 8 * b)), acc);
      }
    }
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  }
}

// Q5_K (Q4_K has its own kernel, qdot_q4k_avx512vnni.cpp; this one also takes Q4_K, with
// kFifthBit false): sub-blocks 2p and 2p + 1 of a super-block are activation blocks 8B + 2p and
// 8B + 2p + 1, consecutive in x: one zmm holds the 32-byte qs run p twice, the upper copy shifted
// right by 4, so after the mask it is [levels of 2p, levels of 2p + 1] (Q5_K: plus 16 where bit
// 2p / 2p + 1 of qh[l] is set). vpdpbusd needs no offset (levels are unsigned); the scale pair
// [fl(d sc_2p) x8, fl(d sc_2p+1) x8] times d_x multiplies the lanes, and the mins
// fl(dmin m_s) ds_x of all 8 sub-blocks are one 8-lane FMA per super-block.
template <bool kFifthBit, typename Block, int R>
inline void qdot_k4_rows(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y) {
  const std::int64_t nb = x.blocks / 8;
  const Block* blocks[R];
  __m512 acc0[R], acc1[R];
  __m256 accm[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    blocks[r] = reinterpret_cast<const Block*>(w + static_cast<std::size_t>(r) * row_stride);
    acc0[r] = acc1[r] = _mm512_setzero_ps();
    accm[r] = _mm256_setzero_ps();
  }
  for (std::int64_t B = 0; B < nb; ++B) {
    // As qdot_rows: past its row's end, a row's prefetch continues in the next group.
    const DecodePrefetch& policy = prefetch_policy();
    const std::size_t ahead = static_cast<std::size_t>(B) * sizeof(Block) + policy.row_ahead;
    const std::size_t wrap = ahead >= row_stride ? static_cast<std::size_t>(R - 1) * row_stride : 0;
    __m512 dl512[R];
    __m512i qh[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const std::byte* next = w + static_cast<std::size_t>(r) * row_stride + ahead + wrap;
      for (std::size_t off = 0; off < sizeof(Block) + 63; off += 64) {
        prefetch_line(next + off, policy.to_l2);
      }
      const Block& blk = blocks[r][B];
      // The 8 (scale, min) pairs from the 12 packed bytes (as matmul_kquant_avx2.cpp's scales_k4).
      std::uint32_t word[3];
      std::memcpy(word, blk.scales, 12);
      const std::uint32_t scales_lo = word[0] & 0x3F3F3F3Fu, mins_lo = word[1] & 0x3F3F3F3Fu;
      const std::uint32_t scales_hi = (word[2] & 0x0F0F0F0Fu) | (((word[0] >> 6) & 0x03030303u) << 4);
      const std::uint32_t mins_hi = ((word[2] >> 4) & 0x0F0F0F0Fu) | (((word[1] >> 6) & 0x03030303u) << 4);
      const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u16(&blk.d) | (load_u16(&blk.dmin) << 16))));
      const __m256 dl = _mm256_mul_ps(_mm256_broadcastss_ps(dm), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                                                                     _mm_setr_epi32(static_cast<int>(scales_lo),
                                                                                    static_cast<int>(scales_hi), 0, 0))));
      const __m256 ml = _mm256_mul_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(dm), _mm256_set1_epi32(1)),
                                      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32(
                                          static_cast<int>(mins_lo), static_cast<int>(mins_hi), 0, 0))));
      dl512[r] = _mm512_castps256_ps512(dl);  // only lanes 0-7 are indexed below
      qh[r] = _mm512_setzero_si512();
      if constexpr (kFifthBit) qh[r] = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh)));
      accm[r] = _mm256_fmadd_ps(ml, _mm256_loadu_ps(x.ds + 8 * B), accm[r]);
    }
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const std::int64_t b0 = 8 * B + 2 * p;
      const __m512i xq = _mm512_load_si512(x.qs + 32 * b0);
      const __m512 xd = _mm512_load_ps(x.d8 + 8 * b0);
      const __m512i pick = _mm512_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1,
                                             2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i v =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[r][B].qs + 32 * p)));
        __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(v, static_cast<__mmask32>(0xFFFF0000u), v, 4),
                                     _mm512_set1_epi8(0x0F));
        if constexpr (kFifthBit) {
          const __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(1 << (2 * p))),
                                                  _mm256_set1_epi8(static_cast<char>(2 << (2 * p))), 1);
          u = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(qh[r], bits), u, _mm512_set1_epi8(16));
        }
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, xq);
        const __m512 scale = _mm512_mul_ps(_mm512_permutexvar_ps(pick, dl512[r]), xd);
        __m512& acc = p % 2 == 0 ? acc0[r] : acc1[r];
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m128 m4 = _mm_add_ps(_mm256_castps256_ps128(accm[r]), _mm256_extractf128_ps(accm[r], 1));
    const __m128 m2 = _mm_add_ps(m4, _mm_movehl_ps(m4, m4));
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r])) - _mm_cvtss_f32(_mm_add_ss(m2, _mm_movehdup_ps(m2)));
  }
}

template <bool kFifthBit, typename Block>
void qdot_k4_vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  constexpr int kRows = 2;
  std::int64_t r = 0;
  for (; r + kRows <= n_rows; r += kRows) {
    qdot_k4_rows<kFifthBit, Block, kRows>(w + static_cast<std::size_t>(r) * row_stride, row_stride, x, y + r);
  }
  for (; r < n_rows; ++r) qdot_k4_rows<kFifthBit, Block, 1>(w + static_cast<std::size_t>(r) * row_stride, row_stride, x, y + r);
}

// Q6_K: groups k = 4h + j and k + 1 (j = 0 or 2) are adjacent activation blocks whose low 4 bits
// are the low (j = 0) or high (j = 2) nibbles of the 64 bytes ql[64h, 64h + 64), and whose high 2
// bits are bit pairs j and j + 1 of qh[32h + l]: one zmm of unsigned levels u = 0..63 per pair.
// The offset 32 is removed exactly by starting each pair's vpdpbusd at -32 * (sum of q per
// 4-element lane), computed once for all rows. Lanes 4i..4i+3 belong to 16-element sub-block
// 8h + 2j + i. Per row and super-block, the 16 fl(fl(d sc) d_x) are one vector (d_x of the
// sub-block's activation block), permuted per pair: the same products as one multiply per pair.
// The high bits: with the qh run in both halves of a zmm, the upper half shifted right by 2 puts
// the j = 2 pairs' bits at 4-5 of each byte, and that shifted left by 4 the j = 0 pairs' bits;
// one ternary-logic op merges them with the nibbles, one mask clears bits 6-7.
template <int R>
inline void qdot_q6_k_rows(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y) {
  const std::int64_t nb = x.blocks / 8;
  const BlockQ6_K* blocks[R];
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    blocks[r] = reinterpret_cast<const BlockQ6_K*>(w + static_cast<std::size_t>(r) * row_stride);
    acc0[r] = acc1[r] = _mm512_setzero_ps();
  }
  const __m512i block_of_sub = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  constexpr int kNibbleOrHigh = 0xE4;  // vpternlogd: (a & c) | (b & ~c)
  for (std::int64_t B = 0; B < nb; ++B) {
    // As qdot_rows: past its row's end, a row's prefetch continues in the next group.
    const DecodePrefetch& policy = prefetch_policy();
    const std::size_t ahead = static_cast<std::size_t>(B) * sizeof(BlockQ6_K) + policy.row_ahead;
    const std::size_t wrap = ahead >= row_stride ? static_cast<std::size_t>(R - 1) * row_stride : 0;
    const __m512 xd_sub = _mm512_permutexvar_ps(block_of_sub, _mm512_castps256_ps512(_mm256_loadu_ps(x.d + 8 * B)));
    __m512 dlx[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const auto* next = reinterpret_cast<const char*>(w + static_cast<std::size_t>(r) * row_stride + ahead + wrap);
      for (int line = 0; line < 4; ++line) prefetch_line(next + 64 * line, policy.to_l2);
      const BlockQ6_K& blk = blocks[r][B];
      const __m512 d = _mm512_set1_ps(_cvtsh_ss(static_cast<unsigned short>(load_u16(&blk.d))));
      const __m512 dl = _mm512_mul_ps(
          d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)))));
      dlx[r] = _mm512_mul_ps(dl, xd_sub);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512i high2[R];  // the j = 2 pairs' high bits at bits 4-5 of each byte
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[r][B].qh + 32 * h)));
        high2[r] = _mm512_mask_srli_epi16(qh, static_cast<__mmask32>(0xFFFF0000u), qh, 2);
      }
#pragma GCC unroll 2
      for (int j = 0; j <= 2; j += 2) {
        const std::int64_t b0 = 8 * B + 4 * h + j;
        const __m512i q = _mm512_load_si512(x.qs + 32 * b0);
        const __m512i neg_offset = _mm512_sub_epi32(_mm512_setzero_si512(),
                                                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(32), q));
        const int s0 = 8 * h + 2 * j;
        const __m512i pick = _mm512_setr_epi32(s0, s0, s0, s0, s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0 + 2, s0 + 2, s0 + 2,
                                               s0 + 2, s0 + 3, s0 + 3, s0 + 3, s0 + 3);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
          const __m512i ql = _mm512_loadu_si512(blocks[r][B].ql + 64 * h);
          const __m512i nibbles = j == 0 ? ql : _mm512_srli_epi16(ql, 4);
          const __m512i high = j == 0 ? _mm512_slli_epi16(high2[r], 4) : high2[r];
          const __m512i u = _mm512_and_si512(_mm512_ternarylogic_epi32(nibbles, high, _mm512_set1_epi8(0x0F), kNibbleOrHigh),
                                             _mm512_set1_epi8(0x3F));
          const __m512i dot = _mm512_dpbusd_epi32(neg_offset, u, q);
          __m512& acc = j == 0 ? acc0[r] : acc1[r];
          acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(pick, dlx[r]), acc);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
}

void qdot_q6_k_vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  constexpr int kRows = 2;
  std::int64_t r = 0;
  for (; r + kRows <= n_rows; r += kRows) qdot_q6_k_rows<kRows>(w + static_cast<std::size_t>(r) * row_stride, row_stride, x, y + r);
  for (; r < n_rows; ++r) qdot_q6_k_rows<1>(w + static_cast<std::size_t>(r) * row_stride, row_stride, x, y + r);
}

// quantize_row_q8_act with 16 lanes: same operations (max of |x|, d = amax / 127 and 1 / d in
// scalar, x * id rounded to nearest even by vcvtps2dq), so the output is bit-identical.
QuantizedRow quantize_avx512(const float* x, std::int64_t cols, std::byte* buffer) noexcept {
  const QuantizedRowLayout l = quantized_row_layout(cols, buffer);
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (std::int64_t b = 0; b < l.padded_blocks; ++b) {
    __m256i q8 = _mm256_setzero_si256();
    float d = 0.0f;
    std::int32_t sum = 0;
    if (b < l.blocks) {
      const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(x0, abs_mask), _mm512_and_ps(x1, abs_mask)));
      d = amax / 127.0f;
      const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));
      sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
      q8 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(q0)), _mm512_cvtepi32_epi8(q1), 1);
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(l.qs + 32 * b), q8);
    store_block_scales(l, b, d, sum);
  }
  return quantized_row(l);
}

constexpr QdotKernels kAvx512Vnni = {{
    nullptr,                                          // f32
    nullptr,                                          // f16
    nullptr,                                          // bf16
    qdot_avx512vnni<UnpackQ8_0>,                      // q8_0
    qdot_q4_0_avx512vnni,                             // q4_0: qdot_q4_avx512vnni.cpp
    qdot_avx512vnni<UnpackQ4<BlockQ4_1, true>>,       // q4_1
    qdot_avx512vnni<UnpackQ5<BlockQ5_0, false>>,      // q5_0
    qdot_avx512vnni<UnpackQ5<BlockQ5_1, true>>,       // q5_1
    nullptr,                                          // fp8_e4m3: float activations
    qdot_q4_g128_avx512vnni,                          // q4_g128
    // K-quant section (Q2_K, Q3_K, IQ4_NL: the AVX2 kernels; no Q8_K path)
    qdot_kquant_avx2<DType::kQ2_K>, qdot_kquant_avx2<DType::kQ3_K>, qdot_q4_k_avx512vnni,
    qdot_k4_vnni<true, BlockQ5_K>, qdot_q6_k_vnni, nullptr, qdot_kquant_avx2<DType::kIQ4_NL>,
    // repacked section
    qdot_repacked<RepackedQ8_0>, qdot_q4_0r_avx512vnni,
    nullptr,                                          // fp8_e4m3r: the AVX512-FP16 kernel
    qdot_q4_kr_avx512vbmi,                            // q4_kr: qdot_q4kr_avx512vbmi.cpp (VBMI CPUs only)
    qdot_q8_0p_avx512vnni,                            // q8_0p: qdot_q8_panels_avx512vnni.cpp
}, quantize_avx512};

}  // namespace

const QdotKernels& qdot_kernels_avx512vnni() noexcept {
  return kAvx512Vnni;
}

}  // namespace sitsrt::cpu::detail
