// AVX2 integer-dot decode kernels (see qdot_kernels.hpp for the numerics); also used at the
// plain AVX-512 level, which has no VNNI. One block per ymm: vpmaddubsw multiplies unsigned
// levels with the signed int8 activations into int16 pairs and vpmaddwd(1) widens them to
// 8 int32 lanes (with AVX-VNNI one vpdpbusd: byte_dot in qdot_blocks_avx2.hpp). Q8_0 moves the
// weight's sign onto the activation (|w| <= 128 and |q| <= 127 keep the int16 pair sums below
// 2^15, where w ^ 0x80 would saturate); Q4/Q5 levels are < 32 and their offset is cancelled
// exactly by starting the int32 lanes at -offset * sum(q) / 8.
//
// Compiled twice, by qdot_avx2.cpp and qdot_avxvnni.cpp (the same kernels with byte_dot's VNNI
// form): include only from those two files; everything is in an anonymous namespace.
#pragma once

#include "core/quant_blocks.hpp"
#include "cpu/matmul/kquant_kernels.hpp"
#include "cpu/qdot/qdot_blocks_avx2.hpp"
#include "cpu/qdot/qdot_kernels.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

// Each format: the block's int32 dot lanes (summing to the exact integer dot with the offset
// removed).
struct DotQ8_0 {
  using Block = BlockQ8_0;
  static constexpr bool kMin = false;
  static __m256i dot(const Block& b, const std::int8_t* q, const std::int32_t*) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
    return q8_lanes(w, _mm256_sign_epi8(w, w), _mm256_load_si256(reinterpret_cast<const __m256i*>(q)));
  }
};
template <typename U, int kShift>
inline __m256i dot_unsigned(__m256i u, const std::int8_t* q, const std::int32_t* neg_sum8) {
  const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
  if constexpr (U::kMin) return unsigned_lanes(u, x);
  return unsigned_lanes(u, x, _mm256_slli_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(neg_sum8)), kShift));
}
template <typename B, bool M>
struct DotQ4 {
  using Block = B;
  static constexpr bool kMin = M;
  static __m256i dot(const Block& b, const std::int8_t* q, const std::int32_t* s8) {
    return dot_unsigned<DotQ4, 0>(nibbles(b.qs), q, s8);  // offset 8 = 8 lanes x 1
  }
};
template <typename B, bool M>
struct DotQ5 {
  using Block = B;
  static constexpr bool kMin = M;
  static __m256i dot(const Block& b, const std::int8_t* q, const std::int32_t* s8) {
    return dot_unsigned<DotQ5, 1>(q5_levels(b.qs, b.qh), q, s8);  // offset 16 = 8 lanes x 2
  }
};

template <typename D>
inline void block_dot(const typename D::Block& blk, std::int64_t b, const QuantizedRow& x, __m256& acc) {
  const __m256i lanes = D::dot(blk, x.qs + 32 * b, x.neg_sum8 + 8 * b);
  acc = scaled_add(lanes, _mm256_set1_ps(half_at(&blk.d)), _mm256_load_ps(x.d8 + 8 * b), acc);
  if constexpr (D::kMin) acc = _mm256_fmadd_ps(_mm256_set1_ps(half_at(&blk.m)), _mm256_load_ps(x.ds8 + 8 * b), acc);
}

template <typename D>
void qdot_avx2(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  const std::int64_t nb = x.blocks;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* blocks = reinterpret_cast<const typename D::Block*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    std::int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      prefetch_ahead(blocks + b);
      block_dot<D>(blocks[b], b, x, acc0);
      block_dot<D>(blocks[b + 1], b + 1, x, acc1);
    }
    if (b < nb) block_dot<D>(blocks[b], b, x, acc0);
    y[r] = hsum(_mm256_add_ps(acc0, acc1));
  }
}

// INT4 g128: sub-block s of a group against activation block 4g + s. The signed levels u - z
// (|.| <= 15) take Q8_0's sign trick: |u - z| against sign(u - z) * q, exact in int16 pairs.
void qdot_q4_g128_avx2(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                       std::int64_t n_rows) {
  const std::int64_t ng = x.blocks / 4;
  for (std::int64_t r = 0; r < n_rows; ++r) {
    const auto* groups = reinterpret_cast<const BlockQ4_G128*>(w + static_cast<std::size_t>(r) * row_stride);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (std::int64_t g = 0; g < ng; ++g) {
      prefetch_ahead(groups + g);
      const __m256i zero = _mm256_set1_epi8(static_cast<char>(groups[g].zero & 15));
      const __m256 dw = _mm256_set1_ps(half_at(&groups[g].d));
      for (int s = 0; s < 4; ++s) {
        const std::int64_t b = 4 * g + s;
        const __m256i u = _mm256_sub_epi8(nibbles(groups[g].qs + 16 * s), zero);
        const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * b));
        const __m256i lanes = byte_dot(_mm256_sign_epi8(u, u), _mm256_sign_epi8(q, u));
        __m256& acc = s % 2 == 0 ? acc0 : acc1;
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_mul_ps(dw, _mm256_load_ps(x.d8 + 8 * b)), acc);
      }
    }
    y[r] = hsum(_mm256_add_ps(acc0, acc1));
  }
}

// quantize_row_q8_act with 8 lanes: same operations, bit-identical output (see the AVX-512
// version in qdot_avx512vnni.cpp).
QuantizedRow quantize_avx2(const float* x, std::int64_t cols, std::byte* buffer) noexcept {
  const QuantizedRowLayout l = quantized_row_layout(cols, buffer);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (std::int64_t b = 0; b < l.padded_blocks; ++b) {
    __m256i q8 = _mm256_setzero_si256();
    float d = 0.0f;
    std::int32_t sum = 0;
    if (b < l.blocks) {
      __m256 v[4], m = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
        m = _mm256_max_ps(m, _mm256_and_ps(v[i], abs_mask));
      }
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      d = _mm_cvtss_f32(m4) / 127.0f;
      const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
      __m256i q[4];
      for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
      const __m256i s32 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      sum = _mm_cvtsi128_si32(s4);
      // packs work per 128-bit lane: fix the order with a final dword permute.
      const __m256i a = _mm256_packs_epi32(q[0], q[1]), c = _mm256_packs_epi32(q[2], q[3]);
      q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, c), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(l.qs + 32 * b), q8);
    store_block_scales(l, b, d, sum);
  }
  return quantized_row(l);
}

// The K-quant decode kernels of this build (matmul_kquant_avx2.cpp, qdot_kquant_avxvnni.cpp).
template <DType kType>
constexpr QdotFn kKquantQdot =
#if defined(__AVXVNNI__)
    qdot_kquant_avxvnni<kType>;
#else
    qdot_kquant_avx2<kType>;
#endif

constexpr QdotKernels kAvx2Qdot = {
    {
        nullptr,                             // f32
        nullptr,                             // f16
        nullptr,                             // bf16
        qdot_avx2<DotQ8_0>,                  // q8_0
        qdot_avx2<DotQ4<BlockQ4_0, false>>,  // q4_0
        qdot_avx2<DotQ4<BlockQ4_1, true>>,   // q4_1
        qdot_avx2<DotQ5<BlockQ5_0, false>>,  // q5_0
        qdot_avx2<DotQ5<BlockQ5_1, true>>,   // q5_1
        nullptr,                             // fp8_e4m3: float activations
        qdot_q4_g128_avx2,                   // q4_g128
        // K-quant section (no Q8_K path)
        kKquantQdot<DType::kQ2_K>, kKquantQdot<DType::kQ3_K>, kKquantQdot<DType::kQ4_K>, kKquantQdot<DType::kQ5_K>,
        kKquantQdot<DType::kQ6_K>, nullptr, kKquantQdot<DType::kIQ4_NL>, nullptr,
        nullptr,  // repacked section: AVX-512 VNNI only
    },
    quantize_avx2};

}  // namespace
}  // namespace sitsrt::cpu::detail
