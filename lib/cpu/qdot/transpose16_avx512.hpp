// Internal, for AVX-512 kernel files: a 16 x 16 transpose of 32-bit lanes (the AMX files pack
// activation tiles with it, the VNNI block-sum GEMM its K-interleaved weight panels, the float
// GEMM its weight panels). Internal linkage (anonymous namespace), so each ISA file compiles its
// own copy under its own -m flags (ODR note in matmul_kernels.hpp).
#pragma once

#include "cpu/simd_intrinsics.hpp"

namespace sitsrt::cpu::detail {
namespace {

// r[l] := column l of the 16 x 16 matrix of 32-bit lanes r[0..15] (4-stage shuffle transpose).
inline void transpose16x32bit(__m512i (&r)[16]) {
  __m512i a[16], b[16];
  for (int i = 0; i < 8; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    b[4 * i + 0] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  for (int q = 0; q < 4; ++q) {
    const __m512i d0 = _mm512_shuffle_i32x4(b[q], b[4 + q], 0x88), d1 = _mm512_shuffle_i32x4(b[q], b[4 + q], 0xDD);
    const __m512i e0 = _mm512_shuffle_i32x4(b[8 + q], b[12 + q], 0x88);
    const __m512i e1 = _mm512_shuffle_i32x4(b[8 + q], b[12 + q], 0xDD);
    r[q] = _mm512_shuffle_i32x4(d0, e0, 0x88);
    r[8 + q] = _mm512_shuffle_i32x4(d0, e0, 0xDD);
    r[4 + q] = _mm512_shuffle_i32x4(d1, e1, 0x88);
    r[12 + q] = _mm512_shuffle_i32x4(d1, e1, 0xDD);
  }
}

}  // namespace
}  // namespace sitsrt::cpu::detail
