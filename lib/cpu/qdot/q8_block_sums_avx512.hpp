// Internal, for the AVX-512 VNNI Q8 block-sum kernels only (qgemm_q8_block_sums_avx512vnni.cpp,
// qdot_q8_panels_avx512vnni.cpp): one block of 16 weight rows held as 8 vectors of 4-level words
// (vector p: levels 4p .. 4p + 3 of each row, lane = row, unsigned q + 128), against activation
// rows. Everything here has internal linkage (anonymous namespace), so each file compiles its own
// copy under its own -m flags (the ODR note in matmul_kernels.hpp).
#pragma once

#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/simd_intrinsics.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

inline __m512i broadcast_word(const std::int8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// sum[c] = the 16 rows' exact int32 sums of block b against activation row x[c]: 8 VPDPBUSD
// against x[c]'s broadcast 4-level words, from -128 sum(x[c] of block b) (the levels are q + 128).
template <int C>
inline void block_sums(const std::byte* words, const QuantizedRow* x, std::int64_t b, __m512i (&sum)[C]) {
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) sum[c] = _mm512_set1_epi32(-128 * x[c].sum[b]);
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {
    const __m512i wp = _mm512_loadu_si512(words + 64 * p);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) sum[c] = _mm512_dpbusd_epi32(sum[c], wp, broadcast_word(x[c].qs + 32 * b + 4 * p));
  }
}

// acc[c] += float(sum[c]) * fl(d_w d_x): the block's one float step per activation row (dw: the
// 16 rows' scales).
template <int C>
inline void scale_block(__m512 dw, const QuantizedRow* x, std::int64_t b, const __m512i (&sum)[C], __m512 (&acc)[C]) {
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[c]), _mm512_mul_ps(dw, _mm512_set1_ps(x[c].d[b])), acc[c]);
  }
}

}  // namespace
}  // namespace sitsrt::cpu::detail
