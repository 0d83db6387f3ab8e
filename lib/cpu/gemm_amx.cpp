// AMX prefill tiles (AMX-TILE/AMX-BF16 + AVX512-BF16): y (+)= bf16(x) bf16(W)^T, fp32 sums.
//
// Per block of 32 weight rows and kAmxBlockK columns, each row is dequantized to fp32 by the
// format's AVX-512 dequant (bit-identical to dequantize_row), rounded to bf16 and packed into the
// VNNI layout TDPBF16PS reads for B: tile row p holds, for each of 16 weight rows n, the pair
// (w[n][2p], w[n][2p + 1]), i.e. the 16 x 16 transpose of the rows seen as 32-bit pairs. The
// activations were converted to bf16 rows once per matmul (amx_convert_rows) and are read as A
// tiles straight from that buffer. A 2 x 2 block of fp32 C tiles (32 x rows x 32 weight rows)
// uses the remaining 4 tile registers: per 32 columns 2 A + 2 B loads feed 4 TDPBF16PS.
//
// Only reached at Isa::kAmx (see amx_prefill.hpp); everything but the declared entry points is
// in an anonymous namespace (ODR note in matmul_kernels.hpp), and no std:: templates are used.
#include "cpu/amx_prefill.hpp"

#include "core/quant_blocks.hpp"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

namespace sitsrt::cpu::detail {
namespace {

constexpr int kPairs = 16;                     // bf16 pairs per tile row (64 bytes)
constexpr int kTileK = 2 * kPairs;             // bf16 columns per A tile row / B tile
constexpr int kTileElems = kAmxTile * kTileK;  // bf16 per tile (1 KiB)
constexpr std::int64_t kBlockN = kAmxBlockN;

// Palette 1, all 8 tiles 16 rows x 64 bytes: C00, C01, C10, C11 = 0..3, A0, A1 = 4, 5, B0, B1 = 6, 7.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = kAmxTile;
  }
  _tile_loadconfig(&cfg);
}

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

// 32 fp32 -> 32 bf16 (round to nearest even), element order kept.
inline __m512i to_bf16x32(__m512 lo, __m512 hi) {
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// Stores the 16 rows r (32 bf16 each, as 16 pairs) as B tile `half` (0 or 1) of 32-column step
// s of the packed block: step s's tiles at packed + s * 2 * kTileElems.
inline void store_b_tile(__m512i (&r)[16], std::int64_t s, int half, std::uint16_t* packed) {
  transpose16x32bit(r);
  std::uint16_t* dst = packed + (2 * s + half) * kTileElems;
  for (int p = 0; p < kPairs; ++p) _mm512_store_si512(dst + p * kTileK, r[p]);
}

// Weight sources for one B tile row: 32 consecutive weights of a row as bf16, each the bf16
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

// Packs B tile `half` of weight rows first .. first + n - 1 (n <= 16; others zero), columns
// [k0, k0 + 32 steps), straight from the stored format.
template <typename D>
void pack_direct(const AmxGemmArgs& g, std::int64_t first, std::int64_t n, std::int64_t k0, std::int64_t steps,
                 int half, std::uint16_t* packed) {
  // The weights come from DRAM once per matmul, 16 rows at a time: more streams than the hardware
  // prefetcher follows, so each row is prefetched kPrefetchSteps steps ahead (past a row's end
  // that is the next row, or harmless).
  constexpr std::int64_t kPrefetchSteps = 8;
  for (std::int64_t s = 0; s < steps; ++s) {
    __m512i r[16];
    const std::size_t ahead = static_cast<std::size_t>((k0 / kTileK + s + kPrefetchSteps) * D::kBytesPer32);
    for (int l = 0; l < 16; ++l) {
      const std::byte* row = g.w + static_cast<std::size_t>(first + l) * g.w_row_stride;
      if (l < n) _mm_prefetch(reinterpret_cast<const char*>(row + ahead), _MM_HINT_T0);
      r[l] = l < n ? D::bf16x32(row, k0 + s * kTileK) : _mm512_setzero_si512();
    }
    store_b_tile(r, s, half, packed);
  }
}

// Any format: its dequant writes the rows as fp32 into `tile` (stride kAmxBlockK, zero padded
// to whole steps), which is then rounded and packed.
void pack_dequantized(const AmxGemmArgs& g, std::int64_t first, std::int64_t n, std::int64_t k0, std::int64_t kc,
                      std::int64_t steps, int half, std::uint16_t* packed, float* tile) {
  const std::size_t byte_offset = static_cast<std::size_t>(k0 / g.block_size * g.block_bytes);
  for (std::int64_t j = 0; j < n; ++j) {
    float* dst = tile + j * kAmxBlockK;
    g.dequant(g.w + static_cast<std::size_t>(first + j) * g.w_row_stride + byte_offset, dst, kc);
    for (std::int64_t c = kc; c < steps * kTileK; ++c) dst[c] = 0.0f;
  }
  for (std::int64_t s = 0; s < steps; ++s) {
    __m512i r[16];
    for (int l = 0; l < 16; ++l) {
      const float* src = tile + l * kAmxBlockK + s * kTileK;
      r[l] = l < n ? to_bf16x32(_mm512_load_ps(src), _mm512_load_ps(src + 16)) : _mm512_setzero_si512();
    }
    store_b_tile(r, s, half, packed);
  }
}

// C (MT x NT tiles of 16 x 16 fp32 at c, row stride ldc floats) (+)= A B over `steps` 32-column
// steps. A: MT x 16 bf16 rows at a (stride lda elements); B: the packed block.
template <int MT, int NT>
void tile_block(const std::uint16_t* a, std::int64_t lda, const std::uint16_t* packed, std::int64_t steps, float* c,
                std::int64_t ldc, bool accumulate) {
  const std::int64_t a_stride = lda * 2, c_stride = ldc * 4;  // bytes
  float* c1 = c + kAmxTile * ldc;
  if (accumulate) {
    _tile_loadd(0, c, c_stride);
    if constexpr (NT > 1) _tile_loadd(1, c + kAmxTile, c_stride);
    if constexpr (MT > 1) _tile_loadd(2, c1, c_stride);
    if constexpr (MT > 1 && NT > 1) _tile_loadd(3, c1 + kAmxTile, c_stride);
  } else {
    _tile_zero(0);
    if constexpr (NT > 1) _tile_zero(1);
    if constexpr (MT > 1) _tile_zero(2);
    if constexpr (MT > 1 && NT > 1) _tile_zero(3);
  }
  const std::uint16_t* a1 = a + kAmxTile * lda;
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::uint16_t* b = packed + 2 * s * kTileElems;
    _tile_loadd(6, b, 64);
    if constexpr (NT > 1) _tile_loadd(7, b + kTileElems, 64);
    _tile_loadd(4, a + s * kTileK, a_stride);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NT > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MT > 1) {
      _tile_loadd(5, a1 + s * kTileK, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NT > 1) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, c_stride);
  if constexpr (NT > 1) _tile_stored(1, c + kAmxTile, c_stride);
  if constexpr (MT > 1) _tile_stored(2, c1, c_stride);
  if constexpr (MT > 1 && NT > 1) _tile_stored(3, c1 + kAmxTile, c_stride);
}

using TileBlockFn = void (*)(const std::uint16_t*, std::int64_t, const std::uint16_t*, std::int64_t, float*,
                             std::int64_t, bool);
// kTileBlock[MT - 1][NT - 1]
constexpr TileBlockFn kTileBlock[2][2] = {{tile_block<1, 1>, tile_block<1, 2>}, {tile_block<2, 1>, tile_block<2, 2>}};

inline std::int64_t smaller(std::int64_t a, std::int64_t b) {
  return a < b ? a : b;
}

// A block of rows x cols outputs that does not fill its tiles: computed into the staging area
// (which receives y first when accumulating), then the valid part is copied back.
void partial_block(TileBlockFn block, const std::uint16_t* a, std::int64_t lda, const std::uint16_t* packed,
                   std::int64_t steps, float* y, std::int64_t ldy, std::int64_t rows, std::int64_t cols,
                   bool accumulate, float* stage) {
  const __mmask16 lo = static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1u);
  const __mmask16 hi = static_cast<__mmask16>(cols <= 16 ? 0 : cols >= 32 ? 0xFFFF : (1u << (cols - 16)) - 1u);
  if (accumulate) {
    for (std::int64_t i = 0; i < rows; ++i) {
      _mm512_store_ps(stage + i * kBlockN, _mm512_maskz_loadu_ps(lo, y + i * ldy));
      _mm512_store_ps(stage + i * kBlockN + 16, _mm512_maskz_loadu_ps(hi, y + i * ldy + 16));
    }
  }
  block(a, lda, packed, steps, stage, kBlockN, accumulate);
  for (std::int64_t i = 0; i < rows; ++i) {
    _mm512_mask_storeu_ps(y + i * ldy, lo, _mm512_load_ps(stage + i * kBlockN));
    _mm512_mask_storeu_ps(y + i * ldy + 16, hi, _mm512_load_ps(stage + i * kBlockN + 16));
  }
}

}  // namespace

void amx_convert_rows(const float* x, std::int64_t ldx, std::int64_t m, std::int64_t cols, std::uint16_t* a,
                      std::int64_t lda, std::int64_t row_begin, std::int64_t row_end) {
  for (std::int64_t i = row_begin; i < row_end; ++i) {
    std::uint16_t* dst = a + i * lda;
    std::int64_t c = 0;
    if (i < m) {
      const float* src = x + i * ldx;
      for (; c + 32 <= cols; c += 32) {
        _mm512_storeu_si512(dst + c, to_bf16x32(_mm512_loadu_ps(src + c), _mm512_loadu_ps(src + c + 16)));
      }
      for (; c < cols; c += 16) {  // tail: masked loads, zeros past cols
        const std::int64_t left = cols - c;
        const __mmask16 k = static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1u);
        const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, src + c));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), reinterpret_cast<__m256i>(h));
      }
    }
    for (; c < lda; c += 16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c), _mm256_setzero_si256());
  }
}

void amx_gemm_rows(const AmxGemmArgs& g, std::int64_t row_begin, std::int64_t row_end, float* scratch) {
  // Scratch: the fp32 dequant tile (16 rows x kAmxBlockK), the packed bf16 block (kBlockN rows x
  // kAmxBlockK) and a kBlockN x kBlockN fp32 staging area for partial C blocks.
  float* dequant_tile = scratch;
  auto* packed = reinterpret_cast<std::uint16_t*>(scratch + kAmxTile * kAmxBlockK);
  float* stage = scratch + kAmxTile * kAmxBlockK + kBlockN * kAmxBlockK / 2;
  // Formats with a direct bf16 source skip the fp32 round trip (float formats only when K is
  // whole 32-column steps: the direct sources read 32 weights at a time).
  using PackFn = void (*)(const AmxGemmArgs&, std::int64_t, std::int64_t, std::int64_t, std::int64_t, int,
                          std::uint16_t*);
  PackFn direct = nullptr;
  const bool whole_steps = g.cols % kTileK == 0;
  switch (g.type) {
    case DType::kQ8_0: direct = pack_direct<DirectQ8_0>; break;
    case DType::kQ4_0: direct = pack_direct<DirectQ4_0>; break;
    case DType::kF16: direct = whole_steps ? pack_direct<DirectF16> : nullptr; break;
    case DType::kF32: direct = whole_steps ? pack_direct<DirectF32> : nullptr; break;
    case DType::kBF16: direct = whole_steps ? pack_direct<DirectBF16> : nullptr; break;
    default: break;
  }
  configure_tiles();
  for (std::int64_t n0 = row_begin; n0 < row_end; n0 += kBlockN) {
    const std::int64_t nb = smaller(kBlockN, row_end - n0);
    const int nt = nb > kAmxTile ? 2 : 1;
    for (std::int64_t k0 = 0; k0 < g.cols; k0 += kAmxBlockK) {
      const std::int64_t kc = smaller(kAmxBlockK, g.cols - k0);
      const std::int64_t steps = (kc + kTileK - 1) / kTileK;
      for (int half = 0; half < nt; ++half) {
        const std::int64_t first = n0 + half * kAmxTile, rows = smaller(kAmxTile, n0 + nb - first);
        if (direct != nullptr) {
          direct(g, first, rows, k0, steps, half, packed);
        } else {
          pack_dequantized(g, first, rows, k0, kc, steps, half, packed, dequant_tile);
        }
      }
      const bool accumulate = k0 > 0;
      for (std::int64_t m0 = 0; m0 < g.m; m0 += kBlockN) {
        const std::int64_t mb = smaller(kBlockN, g.m - m0);
        const int mt = mb > kAmxTile ? 2 : 1;
        const TileBlockFn block = kTileBlock[mt - 1][nt - 1];
        const std::uint16_t* a = g.a + m0 * g.lda + k0;
        float* y = g.y + m0 * g.ldy + n0;
        if (mb == mt * kAmxTile && nb == nt * kAmxTile) {
          block(a, g.lda, packed, steps, y, g.ldy, accumulate);
        } else {
          partial_block(block, a, g.lda, packed, steps, y, g.ldy, mb, nb, accumulate, stage);
        }
      }
    }
  }
  _tile_release();
}

}  // namespace sitsrt::cpu::detail
