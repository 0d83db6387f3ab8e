// Internal, for the qdot_avx512vnni.cpp and qgemm_avx512vnni.cpp files only: pairs of 32-element
// blocks in one zmm (fp16 scale pairs and quads, Q8_0's stored and repacked level loads), shared
// by the decode (m == 1) and multi-row (m > 1) integer-dot kernels so both read the same levels
// and scales. Internal linkage, compiled per ISA file (see the ODR note in matmul_kernels.hpp).
#pragma once

#include "core/quant_blocks.hpp"
#include "cpu/qdot/qdot_prefetch_avx512.hpp"
#include "cpu/simd_intrinsics.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {
namespace {

// [f(h0) x8, f(h1) x8] for two fp16 values.
inline __m512 pair_halves(std::uint32_t h0, std::uint32_t h1) {
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (h1 << 16))));
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(f));
}

// Two 32-byte halves as one zmm: [u0 | u1].
inline __m512i pair_from_halves(__m256i u0, __m256i u1) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(u0), u1, 1);
}
// Q8_0 stored blocks: levels of blocks b and b + 1 as unsigned bytes w ^ 0x80 (block b + 1 zeros
// when !second, so a row's odd last block adds nothing).
struct UnpackQ8_0 {
  using Block = BlockQ8_0;
  static constexpr bool kMin = false;
  static constexpr int kShift = 4;  // offset 128 = 8 lanes x 16
  static __m512i levels(const Block* blocks, std::int64_t b, bool second) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[b].qs));
    const __m256i w1 =
        second ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[b + 1].qs)) : _mm256_set1_epi8(-128);
    return _mm512_xor_si512(pair_from_halves(w0, w1), _mm512_set1_epi8(-128));
  }
};

// The fp16 scales (or mins, at byte `field` of each block) of blocks b..b+3 as two pair
// vectors: one conversion for four blocks.
template <typename Block>
inline void quad_halves(const Block* blocks, std::int64_t b, std::size_t field, __m512& p01, __m512& p23) {
  const auto* base = reinterpret_cast<const std::byte*>(blocks + b) + field;
  const std::uint64_t h = std::uint64_t{load_u16(base)} | std::uint64_t{load_u16(base + sizeof(Block))} << 16 |
                          std::uint64_t{load_u16(base + 2 * sizeof(Block))} << 32 |
                          std::uint64_t{load_u16(base + 3 * sizeof(Block))} << 48;
  const __m512 f = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(h))));
  p01 = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), f);
  p23 = _mm512_permutexvar_ps(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), f);
}

// Repacked Q8_0 (cpu/repacked_blocks.hpp): the pairs, offsets, scale products and
// accumulation order of qdot_rows<UnpackQ8_0>, so the results are bit-identical to the stored
// layout's; only the loads change. A quad's levels come from two 64-byte loads with no
// unpacking (already unsigned), and its four scales from one 8-byte load instead of four
// 2-byte gathers. (Q4_0 and Q4_0R: qdot_q4_avx512vnni.cpp.)
struct RepackedQ8_0 {
  static constexpr std::size_t kBlockBytes = sizeof(BlockQ8_0);
  static constexpr int kLevelBytes = kQBlock;
  static constexpr int kShift = UnpackQ8_0::kShift;
  static void quad_levels(const std::byte* quad, __m512i& u01, __m512i& u23) {
    u01 = _mm512_loadu_si512(quad);
    u23 = _mm512_loadu_si512(quad + 64);
  }
  static __m512i tail_levels(const std::byte* levels, int i, bool second) {
    const __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(levels + kLevelBytes * i));
    const __m256i u1 = second ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(levels + kLevelBytes * (i + 1)))
                              : _mm256_setzero_si256();
    return pair_from_halves(u0, u1);
  }
};

}  // namespace
}  // namespace sitsrt::cpu::detail
