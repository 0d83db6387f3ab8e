// AVX-512 VNNI integer-dot decode kernels (see qdot_kernels.hpp for the numerics).
// Two weight blocks per zmm: each block's levels become 32 unsigned bytes u (Q8_0: w + 128,
// i.e. w ^ 0x80; Q4/Q5: the nibble [| 5th bit]), vpdpbusd multiplies them with the signed int8
// activations and sums groups of 4 into 16 int32 lanes (8 per block), starting from
// -offset * sum(q) / 8 per lane so the offset (128, 8 or 16) cancels exactly in integers. The
// lanes are converted once and FMAed with [d_w0 d_x0 x8, d_w1 d_x1 x8]: no horizontal sums
// until the end of the row.
#include "core/quant_blocks.hpp"
#include "cpu/qdot_kernels.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

constexpr int kPrefetchBytes = 1536;  // as in matmul_avx512.cpp
inline void prefetch_ahead(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

inline std::uint32_t load_u16(const void* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// [f(h0) x8, f(h1) x8] for two fp16 values.
inline __m512 pair_halves(std::uint32_t h0, std::uint32_t h1) {
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (h1 << 16))));
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

inline __m256i nibbles(const std::uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
                          _mm256_set1_epi8(0x0F));
}

struct UnpackQ8_0 {
  using Block = BlockQ8_0;
  static constexpr bool kMin = false;
  static constexpr int kShift = 4;  // offset 128 = 8 lanes x 16
  static __m256i levels(const Block& b) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)), _mm256_set1_epi8(-128));
  }
};
template <typename B, bool M>
struct UnpackQ4 {
  using Block = B;
  static constexpr bool kMin = M;
  static constexpr int kShift = 0;  // offset 8 = 8 lanes x 1
  static __m256i levels(const Block& b) { return nibbles(b.qs); }
};
template <typename B, bool M>
struct UnpackQ5 {
  using Block = B;
  static constexpr bool kMin = M;
  static constexpr int kShift = 1;  // offset 16 = 8 lanes x 2
  static __m256i levels(const Block& b) {
    std::uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    const __m256i u = nibbles(b.qs);
    return _mm256_mask_add_epi8(u, static_cast<__mmask32>(qh), u, _mm256_set1_epi8(16));
  }
};

template <typename U>
inline void pair_dot(const typename U::Block* blocks, std::int64_t b, bool second, const QuantizedRow& x,
                     __m512& acc) {
  const __m256i u0 = U::levels(blocks[b]);
  const __m256i u1 = second ? U::levels(blocks[b + 1]) : _mm256_setzero_si256();
  const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(u0), u1, 1);
  __m512i init = _mm512_setzero_si512();
  if constexpr (!U::kMin) init = _mm512_slli_epi32(_mm512_load_si512(x.neg_sum8 + 8 * b), U::kShift);
  const __m512i dot = _mm512_dpbusd_epi32(init, u, _mm512_load_si512(x.qs + 32 * b));
  const __m512 dw = pair_halves(load_u16(&blocks[b].d), second ? load_u16(&blocks[b + 1].d) : 0u);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, _mm512_load_ps(x.d8 + 8 * b)), acc);
  if constexpr (U::kMin) {
    const __m512 mw = pair_halves(load_u16(&blocks[b].m), second ? load_u16(&blocks[b + 1].m) : 0u);
    acc = _mm512_fmadd_ps(mw, _mm512_load_ps(x.ds8 + 8 * b), acc);
  }
}

template <typename U>
void qdot_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                     std::int64_t n_rows) {
  const std::int64_t nb = x.blocks;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename U::Block*>(w + static_cast<std::size_t>(r) * row_stride);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    std::int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
      prefetch_ahead(blocks + b);
      pair_dot<U>(blocks, b, true, x, acc0);
      pair_dot<U>(blocks, b + 2, true, x, acc1);
    }
    for (; b < nb; b += 2) pair_dot<U>(blocks, b, b + 1 < nb, x, acc0);
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  }
}

constexpr QdotKernels kAvx512Vnni = {{
    nullptr,                                          // f32
    nullptr,                                          // f16
    nullptr,                                          // bf16
    qdot_avx512vnni<UnpackQ8_0>,                      // q8_0
    qdot_avx512vnni<UnpackQ4<BlockQ4_0, false>>,      // q4_0
    qdot_avx512vnni<UnpackQ4<BlockQ4_1, true>>,       // q4_1
    qdot_avx512vnni<UnpackQ5<BlockQ5_0, false>>,      // q5_0
    qdot_avx512vnni<UnpackQ5<BlockQ5_1, true>>,       // q5_1
}};

}  // namespace

const QdotKernels& qdot_kernels_avx512vnni() noexcept {
  return kAvx512Vnni;
}

}  // namespace sitsrt::cpu::detail
