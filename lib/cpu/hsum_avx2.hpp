// Internal (files compiled for AVX2 only): the horizontal sum of a ymm register in the one fixed
// order the AVX2 decode kernels, the int8 GEMM and the row primitives share (their results
// depend on it bit for bit). In an anonymous namespace, as the other per-ISA internal headers:
// no inline function compiled for one ISA can stand in for another's at link time.
#pragma once

#include "cpu/simd_intrinsics.hpp"

namespace sitsrt::cpu::detail {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace sitsrt::cpu::detail
