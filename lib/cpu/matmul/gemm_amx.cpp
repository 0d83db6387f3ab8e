// AMX prefill tiles (AMX-TILE/AMX-BF16 + AVX512-BF16): y (+)= bf16(x) bf16(W)^T, fp32 sums.
//
// The weights are the A operand and the activations the B operand, so C tiles hold y^T
// (16 weight rows x 16 x rows). That way the per-block work on the weights is only decode and
// round: each weight row's 32 columns of a step are one A tile row, stored as they come. The
// activations carry the transpose instead: amx_convert_rows writes x once per matmul as B tiles
// in the VNNI pair layout (tile row p holds, for each of 16 x rows i, the pair x[i][2p], x[i][2p+1]),
// and the C tiles are transposed once per output when written to y.
//
// Per block of 32 weight rows (two A tiles) and kAmxBlockK columns: decode and pack the rows
// (Q8_0/Q4_0/F16/F32/BF16 directly, other formats through their fp32 dequant, bit-identical to
// dequantize_row), then for every pair of 16-row x groups run 2 x 2 TDPBF16PS per 32 columns,
// accumulating in a per-thread y^T stage across K blocks.
//
// Only reached at Isa::kAmx (see amx_prefill.hpp); everything but the declared entry points is
// in an anonymous namespace (ODR note in matmul_kernels.hpp), and no std:: templates are used.
#include "cpu/matmul/amx_prefill.hpp"
#include "cpu/matmul/amx_tiles.hpp"

#include "core/quant_blocks.hpp"

#include "cpu/simd_intrinsics.hpp"

namespace sitsrt::cpu::detail {
namespace {

constexpr int kPairs = 16;                     // bf16 pairs per tile row (64 bytes)
constexpr int kTileK = 2 * kPairs;             // bf16 columns per tile row
constexpr int kTileElems = kAmxTile * kTileK;  // bf16 per tile (1 KiB)
constexpr std::int64_t kBlockN = kAmxBlockN;

// Palette 1, all 8 tiles 16 rows x 64 bytes. C(h, g) = tile 2h + g for weight half h and x group
// g; A0, A1 = 4, 5 (weight halves); B0, B1 = 6, 7 (x groups).
void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = kAmxTile;
  }
  load_tile_config(cfg);
}

// 32 fp32 -> 32 bf16 (round to nearest even), element order kept.
inline __m512i to_bf16x32(__m512 lo, __m512 hi) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

inline __mmask16 first_lanes(std::int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xFFFF : n <= 0 ? 0 : (1u << n) - 1u);
}

inline std::int64_t smaller(std::int64_t a, std::int64_t b) {
  return a < b ? a : b;
}

// Weight sources for one A tile row: 32 consecutive weights of a row as bf16, each the bf16
// rounding of the fp32 value dequantize_row gives (so every format rounds once, like the
// generic path). Those without one here go through DequantTile.
inline __m512 half_scale(const std::uint16_t* d) {
  return _mm512_set1_ps(_cvtsh_ss(*d));
}
struct DirectQ8_0 {
  static constexpr int kBytesPer32 = sizeof(BlockQ8_0);
  static __m512i bf16x32(const std::byte* row, std::int64_t k) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + k / kQBlock;
    const __m512 d = half_scale(&b->d);
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs))));
    const __m512 hi =
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16))));
    return to_bf16x32(_mm512_mul_ps(lo, d), _mm512_mul_ps(hi, d));
  }
};
struct DirectQ4_0 {  // the block's 16 weights d * (q - 8) in a table, looked up by nibble
  static constexpr int kBytesPer32 = sizeof(BlockQ4_0);
  static __m512i bf16x32(const std::byte* row, std::int64_t k) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(row) + k / kQBlock;
    const __m512 levels = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m512 table = _mm512_mul_ps(levels, half_scale(&b->d));
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)));
    return to_bf16x32(_mm512_permutexvar_ps(v, table), _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table));
  }
};
struct DirectF16 {
  static constexpr int kBytesPer32 = 64;
  static __m512i bf16x32(const std::byte* row, std::int64_t k) {
    const auto* h = reinterpret_cast<const __m256i*>(row + 2 * k);
    return to_bf16x32(_mm512_cvtph_ps(_mm256_loadu_si256(h)), _mm512_cvtph_ps(_mm256_loadu_si256(h + 1)));
  }
};
struct DirectF32 {
  static constexpr int kBytesPer32 = 128;
  static __m512i bf16x32(const std::byte* row, std::int64_t k) {
    const auto* f = reinterpret_cast<const float*>(row) + k;
    return to_bf16x32(_mm512_loadu_ps(f), _mm512_loadu_ps(f + 16));
  }
};
struct DirectBF16 {  // already bf16: copied
  static constexpr int kBytesPer32 = 64;
  static __m512i bf16x32(const std::byte* row, std::int64_t k) { return _mm512_loadu_si512(row + 2 * k); }
};

// Packs A tile `half` of weight rows first .. first + n - 1 (n <= 16; others zero), columns
// [k0, k0 + 32 steps), straight from the stored format: step s's tiles at
// packed + (2 s + half) * kTileElems, row l = weight row first + l.
template <typename D>
void pack_direct(const AmxGemmArgs& g, std::int64_t first, std::int64_t n, std::int64_t k0, std::int64_t steps,
                 int half, std::uint16_t* packed) {
  // The weights come from DRAM once per matmul, each row in short segments (kAmxBlockK columns)
  // that the hardware prefetcher barely ramps up on. So while a row's segment is packed, the
  // row's next segment is prefetched, or at its last one the same row of the next 32-row block
  // (beyond the matrix or this thread's blocks that is wasted, never a fault).
  const std::int64_t segment_bytes = steps * D::kBytesPer32;
  const bool last_segment = k0 + kAmxBlockK >= g.cols;
  for (std::int64_t l = 0; l < 16; ++l) {
    std::uint16_t* dst = packed + half * kTileElems + l * kTileK;
    if (l >= n) {
      for (std::int64_t s = 0; s < steps; ++s) _mm512_store_si512(dst + 2 * s * kTileElems, _mm512_setzero_si512());
      continue;
    }
    const std::byte* row = g.w + static_cast<std::size_t>(first + l) * g.w_row_stride;
    const std::uintptr_t next =
        reinterpret_cast<std::uintptr_t>(row) +
        (last_segment ? kBlockN * g.w_row_stride : static_cast<std::size_t>((k0 + kAmxBlockK) / kTileK * D::kBytesPer32));
    for (std::int64_t offset = 0; offset < segment_bytes + 64; offset += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(next + static_cast<std::uintptr_t>(offset)), _MM_HINT_T0);
    }
    for (std::int64_t s = 0; s < steps; ++s) _mm512_store_si512(dst + 2 * s * kTileElems, D::bf16x32(row, k0 + s * kTileK));
  }
}

// Any format: its dequant writes each row as fp32 into `tile` (zero padded to whole steps),
// which is then rounded and packed as pack_direct does.
void pack_dequantized(const AmxGemmArgs& g, std::int64_t first, std::int64_t n, std::int64_t k0, std::int64_t kc,
                      std::int64_t steps, int half, std::uint16_t* packed, float* tile) {
  const std::size_t byte_offset = static_cast<std::size_t>(k0 / g.block_size * g.block_bytes);
  for (std::int64_t l = 0; l < 16; ++l) {
    std::uint16_t* dst = packed + half * kTileElems + l * kTileK;
    if (l < n) {
      g.dequant(g.w + static_cast<std::size_t>(first + l) * g.w_row_stride + byte_offset, tile, kc);
      for (std::int64_t c = kc; c < steps * kTileK; ++c) tile[c] = 0.0f;
    }
    for (std::int64_t s = 0; s < steps; ++s) {
      const float* src = tile + s * kTileK;
      _mm512_store_si512(dst + 2 * s * kTileElems,
                         l < n ? to_bf16x32(_mm512_load_ps(src), _mm512_load_ps(src + 16)) : _mm512_setzero_si512());
    }
  }
}

// The y^T stage (NH weight halves x NG x groups of 16 x 16 fp32 at stage, row stride lds
// floats) (+)= A B over `steps` 32-column steps. A: the packed block; B: x group g0's tiles of
// these steps at b (consecutive 1 KiB tiles), the next group's at b + group_stride.
template <int NH, int NG>
void tile_block(const std::uint16_t* packed, const std::uint16_t* b, std::int64_t group_stride, std::int64_t steps,
                float* stage, std::int64_t lds, bool accumulate) {
  const std::int64_t stride = lds * 4;  // bytes
  float* c1 = stage + kAmxTile * lds;   // weight half 1
  if (accumulate) {
    _tile_loadd(0, stage, stride);
    if constexpr (NG > 1) _tile_loadd(1, stage + kAmxTile, stride);
    if constexpr (NH > 1) _tile_loadd(2, c1, stride);
    if constexpr (NH > 1 && NG > 1) _tile_loadd(3, c1 + kAmxTile, stride);
  } else {
    _tile_zero(0);
    if constexpr (NG > 1) _tile_zero(1);
    if constexpr (NH > 1) _tile_zero(2);
    if constexpr (NH > 1 && NG > 1) _tile_zero(3);
  }
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::uint16_t* a = packed + 2 * s * kTileElems;
    const std::uint16_t* x = b + s * kTileElems;
    _tile_loadd(6, x, 64);
    if constexpr (NG > 1) _tile_loadd(7, x + group_stride, 64);
    _tile_loadd(4, a, 64);
    if constexpr (NH > 1) _tile_loadd(5, a + kTileElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NG > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (NH > 1) _tile_dpbf16ps(2, 5, 6);
    if constexpr (NH > 1 && NG > 1) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, stage, stride);
  if constexpr (NG > 1) _tile_stored(1, stage + kAmxTile, stride);
  if constexpr (NH > 1) _tile_stored(2, c1, stride);
  if constexpr (NH > 1 && NG > 1) _tile_stored(3, c1 + kAmxTile, stride);
}

using TileBlockFn = void (*)(const std::uint16_t*, const std::uint16_t*, std::int64_t, std::int64_t, float*,
                             std::int64_t, bool);
// kTileBlock[NH - 1][NG - 1]
constexpr TileBlockFn kTileBlock[2][2] = {{tile_block<1, 1>, tile_block<1, 2>}, {tile_block<2, 1>, tile_block<2, 2>}};

// y[i, n0 + j] = stage[j][i - m0] for the valid i < m rows of this pass and j < nb.
void write_transposed(const float* stage, std::int64_t lds, std::int64_t rows, std::int64_t nb, float* y,
                      std::int64_t ldy) {
  for (std::int64_t h = 0; h * kAmxTile < nb; ++h) {
    const __mmask16 cols = first_lanes(nb - h * kAmxTile);
    for (std::int64_t i0 = 0; i0 < rows; i0 += kAmxTile) {
      __m512i r[16];
      for (int j = 0; j < 16; ++j) r[j] = _mm512_load_si512(stage + (h * kAmxTile + j) * lds + i0);
      transpose16x32bit(r);
      const std::int64_t valid = smaller(kAmxTile, rows - i0);
      for (std::int64_t i = 0; i < valid; ++i) {
        _mm512_mask_storeu_ps(y + (i0 + i) * ldy + h * kAmxTile, cols, _mm512_castsi512_ps(r[i]));
      }
    }
  }
}

}  // namespace

void amx_convert_rows(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t cols, std::uint16_t* b,
                      std::int64_t group_begin, std::int64_t group_end) {
  const std::int64_t steps = (cols + kTileK - 1) / kTileK;
  for (std::int64_t grp = group_begin; grp < group_end; ++grp) {
    for (std::int64_t s = 0; s < steps; ++s) {
      __m512i r[16];
      const std::int64_t c = s * kTileK;
      const __mmask16 lo = first_lanes(cols - c), hi = first_lanes(cols - c - 16);
      for (int i = 0; i < 16; ++i) {
        const std::int64_t row = grp * kAmxTile + i;
        r[i] = _mm512_setzero_si512();
        if (row < m) {
          const float* src = x + row * ldx + c;
          r[i] = to_bf16x32(_mm512_maskz_loadu_ps(lo, src), _mm512_maskz_loadu_ps(hi, src + 16));
        }
      }
      transpose16x32bit(r);  // r[p] = pair p of each of the 16 rows
      std::uint16_t* dst = b + (grp * steps + s) * kTileElems;
      for (int p = 0; p < kPairs; ++p) _mm512_store_si512(dst + p * kTileK, r[p]);
    }
  }
}

void amx_gemm_rows(const AmxGemmArgs& g, std::int64_t row_begin, std::int64_t row_end, float* scratch) {
  // Scratch: the fp32 dequant row (kAmxBlockK), the packed bf16 block (kBlockN rows x
  // kAmxBlockK) and the y^T stage (kBlockN x kAmxPassM fp32).
  float* dequant_row = scratch;
  auto* packed = reinterpret_cast<std::uint16_t*>(scratch + kAmxBlockK);
  float* stage = scratch + kAmxBlockK + kBlockN * kAmxBlockK / 2;
  // Formats with a direct bf16 source skip the fp32 round trip (float formats only when K is
  // whole 32-column steps: the direct sources read 32 weights at a time).
  using PackFn = void (*)(const AmxGemmArgs&, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int,
                          std::uint16_t*);
  PackFn direct = nullptr;
  const bool whole_steps = g.cols % kTileK == 0;
  switch (g.layout) {
    case WeightLayout::kQ8_0: direct = pack_direct<DirectQ8_0>; break;
    case WeightLayout::kQ4_0: direct = pack_direct<DirectQ4_0>; break;
    case WeightLayout::kF16: direct = whole_steps ? pack_direct<DirectF16> : nullptr; break;
    case WeightLayout::kF32: direct = whole_steps ? pack_direct<DirectF32> : nullptr; break;
    case WeightLayout::kBF16: direct = whole_steps ? pack_direct<DirectBF16> : nullptr; break;
    default: break;
  }
  const std::int64_t all_steps = (g.cols + kTileK - 1) / kTileK;
  const std::int64_t group_stride = all_steps * kTileElems;  // bf16 between consecutive x groups
  configure_tiles();
  for (std::int64_t n0 = row_begin; n0 < row_end; n0 += kBlockN) {
    const std::int64_t nb = smaller(kBlockN, row_end - n0);
    const int nh = nb > kAmxTile ? 2 : 1;
    // x rows in passes of kAmxPassM (the stage's width); weights are packed again per pass.
    for (std::int64_t m0 = 0; m0 < g.m; m0 += kAmxPassM) {
      const std::int64_t pass_rows = smaller(kAmxPassM, g.m - m0);
      const std::int64_t groups = (pass_rows + kAmxTile - 1) / kAmxTile;
      for (std::int64_t k0 = 0; k0 < g.cols; k0 += kAmxBlockK) {
        const std::int64_t kc = smaller(kAmxBlockK, g.cols - k0);
        const std::int64_t steps = (kc + kTileK - 1) / kTileK;
        for (int half = 0; half < nh; ++half) {
          const std::int64_t first = n0 + half * kAmxTile, rows = smaller(kAmxTile, n0 + nb - first);
          if (direct != nullptr) {
            direct(g, first, rows, k0, steps, half, packed);
          } else {
            pack_dequantized(g, first, rows, k0, kc, steps, half, packed, dequant_row);
          }
        }
        for (std::int64_t grp = 0; grp < groups; grp += 2) {
          const int ng = grp + 1 < groups ? 2 : 1;
          const std::uint16_t* b = g.b + ((m0 / kAmxTile + grp) * all_steps + k0 / kTileK) * kTileElems;
          kTileBlock[nh - 1][ng - 1](packed, b, group_stride, steps, stage + grp * kAmxTile, kAmxPassM, k0 > 0);
        }
      }
      write_transposed(stage, kAmxPassM, pass_rows, nb, g.y + m0 * g.ldy + n0, g.ldy);
    }
  }
  _tile_release();
}

}  // namespace sitsrt::cpu::detail
