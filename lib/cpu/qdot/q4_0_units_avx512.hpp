// Internal, for the qdot_q4_avx512vnni.cpp and qgemm_avx512vnni.cpp files only: Q4_0 weights
// in units of 16 blocks (block geometry, lane masks and the stored GGUF layout's unit loads),
// shared by the decode (m == 1) and multi-row (m > 1) integer-dot kernels so both read the same
// levels and scales. Internal linkage, compiled per ISA file (see the ODR note in
// matmul_kernels.hpp).
#pragma once

#include "core/quant_blocks.hpp"
#include "cpu/simd_intrinsics.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sitsrt::cpu::detail {
namespace {

constexpr int kUnitBlocks = 16;  // blocks per float step
constexpr int kQuads = kUnitBlocks / 4;
constexpr int kQsBytes = kQBlock / 2;

// Masks of the first `present` blocks (clamped to 0..4) of a quad: 4 dwords per block.
inline __mmask16 quad_dwords(int present) {
  return static_cast<__mmask16>(present >= 4 ? 0xFFFFu : present <= 0 ? 0u : (1u << (4 * present)) - 1);
}
inline __mmask16 unit_lanes(int present) {
  return static_cast<__mmask16>(present >= kUnitBlocks ? 0xFFFFu : (1u << present) - 1);
}

// Word indices of vpermt2w over a quad's 72 bytes (A = bytes 0..63, B = bytes 8..71).
constexpr int quad_word(int byte) {  // the index of the word at even `byte` of the quad
  return byte < 64 ? byte / 2 : 32 + (byte - 8) / 2;
}
// 32 word indices for vpermt2w (a plain array, not std::array: no std:: template is instantiated
// with this file's flags, see the ODR note in matmul_kernels.hpp).
struct alignas(64) WordIndices {
  std::uint16_t idx[32];
};
// Block j's qs (bytes 18 j + 2 .. 18 j + 17) to words 8 j .. 8 j + 7.
constexpr WordIndices kQuadQs = [] {
  WordIndices t{};
  for (int w = 0; w < 32; ++w) t.idx[w] = static_cast<std::uint16_t>(quad_word(18 * (w / 8) + 2 + 2 * (w % 8)));
  return t;
}();
// The scales (bytes 0 of each block) of two quads P (first source) and Q: word i < 4 = P's block
// i, word 4 + i = Q's block i; words 8..15 repeat 0..7.
constexpr WordIndices kPairScales = [] {
  WordIndices t{};
  for (int w = 0; w < 16; ++w) t.idx[w] = static_cast<std::uint16_t>(9 * (w % 4) + (w % 8 < 4 ? 0 : 32));
  return t;
}();

// Where a unit of 16 blocks starting at block b0 lies in every row (rows share nb): its levels
// and scales' byte offsets from the row start.
struct UnitAt {
  std::size_t levels, scales;
};

// Stored GGUF blocks (18 bytes: fp16 d, 16 bytes qs). A whole unit gathers each quad's qs with
// one vpermt2w over two overlapping loads and the 16 scales with two more from the quads'
// first loads; a last partial unit copies its blocks.
struct StoredQ4_0 {
  static UnitAt locate(std::int64_t /*nb*/, std::int64_t b0) {
    const std::size_t at = static_cast<std::size_t>(b0) * sizeof(BlockQ4_0);
    return {at, at};
  }
  static void full_unit(const std::byte* row, UnitAt at, __m512i (&qs)[kQuads], __m256i& halves) {
    const __m512i qs_words = _mm512_load_si512(kQuadQs.idx);
    const std::byte* unit = row + at.levels;
    __m512i first[kQuads];
#pragma GCC unroll 4
    for (int k = 0; k < kQuads; ++k) {
      const std::byte* quad = unit + static_cast<std::size_t>(4 * k) * sizeof(BlockQ4_0);
      first[k] = _mm512_loadu_si512(quad);
      qs[k] = _mm512_permutex2var_epi16(first[k], qs_words, _mm512_loadu_si512(quad + 8));
    }
    const __m512i scale_words = _mm512_load_si512(kPairScales.idx);
    const __m512i s01 = _mm512_permutex2var_epi16(first[0], scale_words, first[1]);
    const __m512i s23 = _mm512_permutex2var_epi16(first[2], scale_words, first[3]);
    halves = _mm512_castsi512_si256(_mm512_mask_blend_epi16(0xFF00u, s01, s23));
  }
  static void last_unit(const std::byte* row, UnitAt at, int n, __m512i (&qs)[kQuads], __m256i& halves) {
    alignas(64) std::uint8_t levels[kUnitBlocks * kQsBytes] = {};
    alignas(32) std::uint16_t d[kUnitBlocks] = {};
    const auto* blocks = reinterpret_cast<const BlockQ4_0*>(row + at.levels);
    for (int i = 0; i < n; ++i) {
      std::memcpy(levels + kQsBytes * i, blocks[i].qs, kQsBytes);
      std::memcpy(&d[i], &blocks[i].d, 2);
    }
    for (int k = 0; k < kQuads; ++k) qs[k] = _mm512_load_si512(levels + 64 * k);
    halves = _mm256_load_si256(reinterpret_cast<const __m256i*>(d));
  }
};

}  // namespace
}  // namespace sitsrt::cpu::detail
