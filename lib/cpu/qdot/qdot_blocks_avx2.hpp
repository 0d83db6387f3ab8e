// Block helpers shared by the AVX2 integer-dot kernels: the decode kernels (qdot_decode_avx2.hpp)
// and the multi-row GEMM (qgemm_tiles_avx2.hpp) must run the very same operations for batch
// invariance, so both take them from here. Include only from AVX2 and AVX-VNNI files (internal
// linkage: no ODR clash with the other ISA files). Built with -mavxvnni (the *_avxvnni.cpp files),
// byte_dot is one VPDPBUSD instead of VPMADDUBSW + VPMADDWD (+ VPADDD): the same exact int32 lanes.
#pragma once

#include "core/quant_blocks.hpp"
#include "cpu/qdot/qdot_kernels.hpp"

#include "cpu/hsum_avx2.hpp"
#include "cpu/simd_intrinsics.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

namespace sitsrt::cpu::detail {
namespace {

constexpr int kPrefetchBytes = 1536;  // as in matmul_avx2.cpp
inline void prefetch_ahead(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

inline float half_at(const void* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return _cvtsh_ss(v);
}

inline __m256i nibbles(const std::uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
                          _mm256_set1_epi8(0x0F));
}

// 0xFF in byte j where bit j of bits is set, else 0.
inline __m256i bytes_from_bits(std::uint32_t bits) {
  const __m256i shuffle =
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuffle);
  const __m256i bit = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL);  // all bits but bit (j mod 8)
  return _mm256_cmpeq_epi8(_mm256_or_si256(spread, bit), _mm256_set1_epi64x(-1));
}

// Q5 levels: the low nibbles with bit 4 from qh.
inline __m256i q5_levels(const std::uint8_t* qs, const std::uint8_t* qh) {
  std::uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return _mm256_or_si256(nibbles(qs), _mm256_and_si256(bytes_from_bits(bits), _mm256_set1_epi8(16)));
}

// acc + the int32 lanes of u . s: lane i gets the sum of the products of bytes 4i .. 4i + 3, u
// unsigned and s signed. Exact, and the same in both forms, as long as the byte pairs' sums fit
// in int16 (VPMADDUBSW saturates them; VPDPBUSD does not): every caller keeps them below 2^15.
inline __m256i byte_dot(__m256i acc, __m256i u, __m256i s) {
#if defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}
inline __m256i byte_dot(__m256i u, __m256i s) {
#if defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

// The int32 lanes of a Q8_0 block's dot with activation levels x: the weight's sign moved onto x
// (|w| <= 128, |x| <= 127: the int16 pair sums stay below 2^15).
inline __m256i q8_lanes(__m256i w, __m256i abs_w, __m256i x) {
  return byte_dot(abs_w, _mm256_sign_epi8(x, w));
}

// Those of unsigned levels u (< 32) with x, plus `offset` (the lanes' share of -offset * sum(x));
// int32 sums are exact in any order.
inline __m256i unsigned_lanes(__m256i u, __m256i x, __m256i offset) {
  return byte_dot(offset, u, x);
}
inline __m256i unsigned_lanes(__m256i u, __m256i x) {
  return byte_dot(u, x);
}

// The float step of one block: acc += float(lanes) * fl(d_w d_x).
inline __m256 scaled_add(__m256i lanes, __m256 dw, __m256 dx, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(dw, dx), acc);
}

// ---- The int8 GEMM's tiling (qgemm_avx2.cpp, matmul_kquant_avx2.cpp) ----

// R weight rows (from w, row_stride apart) against C activation rows x[0 .. C): y[c * ldy + r].
using QgemmTileFn = void (*)(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, float* y,
                             std::int64_t ldy);

// A QgemmFn over Tile<R, C>::run (R <= kR, C <= kC): weight rows by kR, activation rows by kC,
// the last tiles narrower (every (row, activation) result is the same whatever tile it is in),
// in panels of weight rows (qgemm_panel_rows): each activation tile runs over a panel's rows.
template <template <int, int> class Tile, int kR, int kC>
void qgemm_tiles(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, std::int64_t m, float* y,
                 std::int64_t ldy, std::int64_t n_rows) {
  static constexpr auto kTiles = []<int... I>(std::integer_sequence<int, I...>) {
    return std::array<QgemmTileFn, kR * kC>{&Tile<I / kC + 1, I % kC + 1>::run...};
  }
  (std::make_integer_sequence<int, kR * kC>{});
  const std::int64_t panel = qgemm_panel_rows(row_stride, kR);  // activation tiles inner, panels outer
  for (std::int64_t p0 = 0; p0 < n_rows; p0 += panel) {
    const std::int64_t p1 = n_rows - p0 < panel ? n_rows : p0 + panel;
    for (std::int64_t i0 = 0; i0 < m; i0 += kC) {
      const int nc = m - i0 < kC ? static_cast<int>(m - i0) : kC;
      for (std::int64_t r0 = p0; r0 < p1; r0 += kR) {
        const int nr = n_rows - r0 < kR ? static_cast<int>(n_rows - r0) : kR;
        kTiles[static_cast<std::size_t>((nr - 1) * kC + (nc - 1))](w + static_cast<std::size_t>(r0) * row_stride,
                                                                   row_stride, x + i0, y + i0 * ldy + r0, ldy);
      }
    }
  }
}

}  // namespace
}  // namespace sitsrt::cpu::detail
