// Internal, for vec_avx2.cpp / vec_avx512.cpp only: the scalar steps of kv_int4::quantize_group
// (core/kv_int4.hpp) that the SIMD int4 group quantizers share: the four candidate scale codes of
// a group, their scales and reciprocals. Restated rather than included: core/kv_int4.hpp's inline
// functions are shared with baseline files (the ODR note of matmul_kernels.hpp), so everything here has
// internal linkage. kv_int4_quantizer_test checks every byte the SIMD forms write against
// kv_int4::quantize_group, so a change there that is not made here fails it.
#pragma once

#include "cpu/simd_intrinsics.hpp"

#include <cstdint>
#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

// Levels (index order) and the midpoints between neighbours, as core/kv_int4.hpp. The 16th
// midpoint pads the table for 16-lane lookups and is never compared with (a search over 15
// midpoints probes indices 0..14).
constexpr float kInt4LevelValues[16] = {-127.0f, -104.0f, -83.0f, -65.0f, -49.0f, -35.0f, -22.0f, -10.0f,
                                        1.0f,    13.0f,   25.0f,  38.0f,  53.0f,  69.0f,  89.0f,  113.0f};
constexpr float kInt4Midpoints[16] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                      7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f, 1.0e30f};
constexpr std::uint8_t kInt4MaxCode = 0x7B;

// A product the caller must not see fused into the next add or subtract: GCC contracts vector
// arithmetic into FMA under -mfma even in -std=c++20 mode (-ffp-contract=fast is its C++
// default), and the scalar quantizer rounds every product. The empty asm hides the value.
template <typename Vec>
inline Vec int4_rounded(Vec v) {
  asm("" : "+v"(v));
  return v;
}

// kv_int4::code_at_least.
inline std::uint8_t int4_code_at_least(float need) {
  if (!(need < 57344.0f * 0.0625f)) return kInt4MaxCode;
  if (need <= 4.0f * 9.5367431640625e-7f) {
    const float steps = need * 1048576.0f;
    return static_cast<std::uint8_t>(steps <= 1.0f ? 1 : steps <= 2.0f ? 2 : steps <= 3.0f ? 3 : 4);
  }
  std::uint32_t bits;
  std::memcpy(&bits, &need, 4);
  std::uint32_t code = ((bits >> 23) - 108u) << 2 | ((bits >> 21) & 3u);
  if ((bits & 0x1fffffu) != 0) ++code;
  return static_cast<std::uint8_t>(code < kInt4MaxCode ? code : kInt4MaxCode);
}

// The four candidates of a group (kv_int4::candidate(pos, neg, i) for i = 0..3) with their
// scales (kv_int4::scale_of, the code as an f16's high byte times 2^-4: exact through F16C) and
// reciprocals 1 / scale. Candidates 2k and 2k + 1 share a sign, so their two divisions and code
// search are done once (the same operations, so the same codes). A branch-free vector form of
// this, and computing a batch of groups' candidates ahead of their searches, measured no faster.
struct Int4Candidates {
  std::uint8_t code[4];
  alignas(16) float scale[4];
  alignas(16) float inverse[4];
};
inline Int4Candidates int4_candidates(float pos, float neg) {
  Int4Candidates out;
  const bool positive_wider = pos >= neg;
  for (int half = 0; half < 2; ++half) {
    const bool negative_scale = (half == 0) == positive_wider;
    const float to_low = negative_scale ? pos : neg, to_high = negative_scale ? neg : pos;
    const float a = to_low / 127.0f, b = to_high / 113.0f;
    const int c = int4_code_at_least(a > b ? a : b);
    const int sign = negative_scale ? 0x80 : 0;
    out.code[2 * half] = static_cast<std::uint8_t>((c < 1 ? 1 : c) | sign);
    out.code[2 * half + 1] = static_cast<std::uint8_t>((c - 1 < 1 ? 1 : c - 1) | sign);
  }
  for (int i = 0; i < 4; ++i) out.scale[i] = _cvtsh_ss(static_cast<unsigned short>(out.code[i] << 8)) * 0.0625f;
  _mm_store_ps(out.inverse, _mm_div_ps(_mm_set1_ps(1.0f), _mm_load_ps(out.scale)));  // as four scalar divisions
  return out;
}

// The best of four candidates as the scalar loop picks it: the first, then any strictly lower
// error (a NaN error never wins).
inline int int4_best_candidate(const float (&error)[4]) {
  int best = 0;
  for (int c = 1; c < 4; ++c) best = error[c] < error[best] ? c : best;
  return best;
}

}  // namespace
}  // namespace sitsrt::cpu::detail
