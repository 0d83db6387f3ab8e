// AMX-INT8 tiles for the int8-activation GEMM of Q8_0 / Q8_0R / Q8_0P weights (Isa::kAmx; 8+ rows, or
// 2+ in batch-invariant mode): TDPBSSD forms each (weight row, activation row) block's exact int32
// sum over 32 levels, 16 x 16 pairs per instruction, and the float step applies the block's scale
// product once per block: y = sum_b float(isum_b) * fl(d_w d_x), in block order.
//
// Why: with VNNI the float step (convert, scale product, FMA) runs once per 4-level partial and
// costs three vector operations per vpdpbusd, so a 16-row decode step costs 5-6 one-row steps
// (docs/performance.md). Here it runs once per 32-level block sum, and the integer work goes to
// the tile unit.
//
// Numerics: each output differs from the one-row decode kernel's (which scales 4-level partials)
// by float rounding only. It depends on its own activation row alone (fixed block order, no split
// of K, the weight rows' last partial tile always on the VNNI kernel), so batch-invariant
// (--deterministic) mode sends every batch here and decodes one row by qdot_amx_numerics: for
// stored Q8_0 a one-column tile here, for Q8_0R the VNNI block-sum kernel
// (qgemm_q8_block_sums_avx512vnni.cpp, whose batches at 2-7 rows also give these bits).
//
// Tiles (palette 1; Q8_0P swaps the operands, q8_panel_tiles): A = 16 weight rows x one block (32
// bytes each, straight from the weights,
// row stride apart); B = one block of 16 activation rows in the VNNI layout (8 rows of 64 bytes:
// row p holds levels 4p .. 4p + 3 of each activation row), packed once per matmul; C = 16 x 16 int32,
// weight rows by activation rows. Only reached at Isa::kAmx; everything is in an anonymous
// namespace but the table accessor (ODR note in matmul_kernels.hpp).
#include "core/quant_blocks.hpp"
#include "cpu/matmul/amx_tiles.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/qdot/qdot_prefetch_avx512.hpp"
#include "cpu/repacked_blocks.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {
namespace {

constexpr int kTile = 16;
constexpr std::int64_t kPrefetchBlocks = 8;  // how far ahead each weight row is requested

// tmm0: A (16 x 32 bytes), tmm1: B (8 x 4n bytes), tmm2: C (16 x 4n bytes) for n activation
// columns (16, or 1 for a single row). (Four blocks in flight on four C tiles was tried and was
// not faster on a busy machine; this is the simpler.)
void configure_tiles(int n) {
  TileConfig cfg;
  cfg.colsb[0] = 32;
  cfg.rows[0] = kTile;
  cfg.colsb[1] = static_cast<std::uint16_t>(4 * n);
  cfg.rows[1] = 8;
  cfg.colsb[2] = static_cast<std::uint16_t>(4 * n);
  cfg.rows[2] = kTile;
  load_tile_config(cfg);
}

// Where group g's arrays lie in the packed activations: per block b the B tile (512 bytes), then
// per block the 16 rows' scales and 128 times their level sums (16 floats, 16 int32).
struct Group {
  const std::int8_t* tiles;
  const float* dx;
  const std::int32_t* offset;
};
inline std::int64_t padded_blocks(std::int64_t blocks) {
  return (blocks + 1) / 2 * 2;  // quantized rows are padded to an even block count
}
inline Group group_at(const AmxQ8Activations& a, std::int64_t g) {
  const std::int64_t padded = padded_blocks(a.blocks);
  std::byte* base = a.data + static_cast<std::size_t>(g * padded * (512 + 64 + 64));
  return {reinterpret_cast<const std::int8_t*>(base), reinterpret_cast<const float*>(base + padded * 512),
          reinterpret_cast<const std::int32_t*>(base + padded * 576)};
}

// Where block b of a weight row starts (its 32 levels) and where its f16 scale lies, relative
// to the row.
struct StoredBlocks {
  static std::size_t levels(std::int64_t /*nb*/, std::int64_t b) {
    return static_cast<std::size_t>(b) * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, qs);
  }
  // A 32-bit word whose low half is the scale: d and the first two levels (inside the block).
  static std::size_t scale_word(std::int64_t /*nb*/, std::int64_t b) {
    return static_cast<std::size_t>(b) * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, d);
  }
  static constexpr int kScaleShift = 0;
  static constexpr bool kUnsigned = false;  // levels q as signed bytes
};
struct RepackedBlocks {
  static std::size_t levels(std::int64_t nb, std::int64_t b) {
    const RepackGroup group = repack_group(b / kRepackGroupBlocks, nb, sizeof(BlockQ8_0));
    return group.offset + static_cast<std::size_t>(b % kRepackGroupBlocks) * kQBlock;
  }
  // The word ending with the scale (the previous scale or the group's last levels precede it).
  static std::size_t scale_word(std::int64_t nb, std::int64_t b) {
    const RepackGroup group = repack_group(b / kRepackGroupBlocks, nb, sizeof(BlockQ8_0));
    return group.offset + static_cast<std::size_t>(group.blocks) * kQBlock +
           2 * static_cast<std::size_t>(b % kRepackGroupBlocks) - 2;
  }
  static constexpr int kScaleShift = 16;
  static constexpr bool kUnsigned = true;  // levels stored as q + 128
};

// The 16 weight rows at `rows` against a B tile: block b's sums into c (c_stride bytes a row), and
// the rows' scales (f16 -> float, lanes = weight rows). With `prefetch`, each row's line
// kPrefetchBlocks ahead and its scale's line are requested first: the A tile reads 16 rows a row
// stride apart, 32 bytes each, 16 streams that the hardware prefetchers do not follow (the load
// took half the kernel's samples).
template <typename Blocks>
inline __m512 tile_block_sums(const std::byte* rows, std::size_t row_stride, __m512i row_offsets, std::int64_t nb,
                              std::int64_t b, const void* b_tile, long b_stride, std::int32_t* c, long c_stride,
                              bool prefetch) {
  if (prefetch) {
    const std::size_t ahead = Blocks::levels(nb, b + kPrefetchBlocks), scale = Blocks::scale_word(nb, b + kPrefetchBlocks);
    for (int r = 0; r < kTile; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(rows + static_cast<std::size_t>(r) * row_stride + ahead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(rows + static_cast<std::size_t>(r) * row_stride + scale), _MM_HINT_T0);
    }
  }
  _tile_loadd(0, rows + Blocks::levels(nb, b), static_cast<long>(row_stride));
  _tile_loadd(1, b_tile, b_stride);
  _tile_zero(2);
  if constexpr (Blocks::kUnsigned) {
    _tile_dpbusd(2, 0, 1);
  } else {
    _tile_dpbssd(2, 0, 1);
  }
  _tile_stored(2, c, c_stride);
  const __m512i words = _mm512_i32gather_epi32(row_offsets, rows + Blocks::scale_word(nb, b), 1);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, Blocks::kScaleShift)));
}

// Whole 16-row weight tiles [row_begin, row_end) against every activation group.
//
// The 16 rows of a tile are one contiguous region (16 row strides), read by the A tiles 32 bytes
// per row and block: 16 streams a row stride apart, which the hardware prefetchers do not follow,
// and which per-row software prefetches could not keep fed either (16 x 4 lines in flight
// against the core's L1 miss buffers). So while a tile runs, the next tile's region is requested
// in address order, a few lines per block (the L2 streamer then runs ahead of it): 2816 x 1024 at
// m = 16, one thread, weights from DRAM, 345-355 -> 266-271 us in a standalone test. The first
// tile of a range keeps per-row prefetches (nothing requested it yet); the last one's requests
// run past the range into what the owning thread usually claims next.
template <typename Blocks>
void q8_tiles(const std::byte* w, std::size_t row_stride, const AmxQ8Activations& a, float* y, std::int64_t ldy,
              std::int64_t row_begin, std::int64_t row_end) {
  const std::int64_t nb = a.blocks, groups = (a.m + kTile - 1) / kTile;
  alignas(64) std::int32_t c_tile[kTile * kTile];
  const __m512i row_offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                 _mm512_set1_epi32(static_cast<int>(row_stride)));
  const std::size_t tile_bytes = kTile * row_stride;
  const auto tile_lines = static_cast<std::int64_t>((tile_bytes + 63) / 64);
  const std::int64_t lines_per_block = (tile_lines + nb - 1) / nb;
  configure_tiles(kTile);
  for (std::int64_t r0 = row_begin; r0 + kTile <= row_end; r0 += kTile) {
    const std::byte* rows = w + static_cast<std::size_t>(r0) * row_stride;
    const std::byte* next = rows + tile_bytes;
    // The tile's 16 weight rows (16 x 32 bytes per block) stay in L1/L2 across the groups.
    for (std::int64_t g = 0; g < groups; ++g) {
      const Group grp = group_at(a, g);
      const std::int64_t c0 = g * kTile, n = a.m - c0 < kTile ? a.m - c0 : kTile;
      __m512 acc[kTile];
      for (auto& v : acc) v = _mm512_setzero_ps();
      for (std::int64_t b = 0; b < nb; ++b) {
        if (g == 0) {
          const std::int64_t end = (b + 1) * lines_per_block < tile_lines ? (b + 1) * lines_per_block : tile_lines;
          for (std::int64_t l = b * lines_per_block; l < end; ++l) prefetch_l2(next + 64 * l);
        }
        const __m512 dw = tile_block_sums<Blocks>(rows, row_stride, row_offsets, nb, b, grp.tiles + 512 * b, 64, c_tile,
                                                  64, b % 2 == 0 && g == 0 && r0 == row_begin);
        // The float step: acc[r] += float(sum) * fl(d_w d_x), lanes = activation rows.
        alignas(64) float dws[kTile];
        _mm512_store_ps(dws, dw);
        const __m512 dx = _mm512_load_ps(grp.dx + 16 * b);
        const __m512i offset = _mm512_load_si512(grp.offset + 16 * b);
        for (int r = 0; r < kTile; ++r) {
          __m512i isum = _mm512_load_si512(c_tile + kTile * r);
          if constexpr (Blocks::kUnsigned) isum = _mm512_sub_epi32(isum, offset);
          const __m512 sums = _mm512_cvtepi32_ps(isum);
          acc[r] = _mm512_fmadd_ps(sums, _mm512_mul_ps(_mm512_set1_ps(dws[r]), dx), acc[r]);
        }
      }
      __m512i t[kTile];
      for (int r = 0; r < kTile; ++r) t[r] = _mm512_castps_si512(acc[r]);
      transpose16x32bit(t);  // t[c]: activation row c's outputs for the 16 weight rows
      for (std::int64_t c = 0; c < n; ++c) _mm512_storeu_ps(y + (c0 + c) * ldy + r0, _mm512_castsi512_ps(t[c]));
    }
  }
  _tile_release();
}

// One activation row of stored Q8_0 weights (batch-invariant decode of a single sequence,
// --mmap): a one-column B tile read straight from the quantized row (its rows of 4 bytes are the
// block's 32 levels in order) and a one-column C tile, whose 16 sums are one vector with lanes =
// weight rows. The same operations per output as q8_tiles (fl(d_w d_x), then one FMA per block in
// block order), hence the same bits.
template <typename Blocks>
void q8_tiles_one_row(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) {
  const std::int64_t nb = x.blocks;
  alignas(64) std::int32_t c_tile[kTile];
  const __m512i row_offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                 _mm512_set1_epi32(static_cast<int>(row_stride)));
  configure_tiles(1);
  for (std::int64_t r0 = 0; r0 + kTile <= n_rows; r0 += kTile) {
    const std::byte* rows = w + static_cast<std::size_t>(r0) * row_stride;
    __m512 acc = _mm512_setzero_ps();
    for (std::int64_t b = 0; b < nb; ++b) {
      const __m512 dw = tile_block_sums<Blocks>(rows, row_stride, row_offsets, nb, b, x.qs + 32 * b, 4, c_tile, 4, b % 2 == 0);
      __m512i isum = _mm512_load_si512(c_tile);
      if constexpr (Blocks::kUnsigned) isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(128 * x.sum[b]));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(x.d[b])), acc);
    }
    _mm512_storeu_ps(y + r0, acc);
  }
  _tile_release();
}

// Whole 16-row tiles by `tiles`, a last partial tile by the VNNI decode kernel (as amx_q8_gemm_rows).
template <void (*tiles)(const std::byte*, std::size_t, const QuantizedRow&, float*, std::int64_t), WeightLayout kLayout>
void qdot_one_row(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y, std::int64_t n_rows) noexcept {
  const std::int64_t whole = n_rows / kTile * kTile;
  tiles(w, row_stride, x, y, whole);
  if (whole < n_rows) {
    qdot_kernels_avx512vnni().matvec[static_cast<int>(kLayout)](w + static_cast<std::size_t>(whole) * row_stride,
                                                                 row_stride, x, y + whole, n_rows - whole);
  }
}

// Q8_0P weights (repacked_blocks.hpp): a 16-row tile's block is already the B tile of those 16
// rows (8 rows of 64 bytes, levels + 128), its 16 f16 scales beside it. So the operands swap:
// A = up to 16 activation rows x one block (packed once per matmul as 512 bytes in a row: read
// from the quantized rows in place, 16 lines a row stride apart, the loads took a quarter of a
// prefill), B = the weight block, C = activation rows x weight rows, TDPBSUD (signed
// activations, unsigned levels); no transpose of either operand, no scale gather. The same
// integers and float step as q8_tiles (float(isum - 128 sum(x)) * fl(d_w d_x), one FMA per block
// in block order), and as the VNNI panel kernels, so the one-row decode needs no kernel of its own.
void configure_panel_tiles(int n) {
  TileConfig cfg;
  cfg.colsb[0] = 32;
  cfg.rows[0] = static_cast<std::uint8_t>(n);
  cfg.colsb[1] = 64;
  cfg.rows[1] = 8;
  cfg.colsb[2] = 64;
  cfg.rows[2] = static_cast<std::uint8_t>(n);
  for (int t = 3; t < 6; ++t) {  // a second block in flight: tmm3-5 as tmm0-2
    cfg.colsb[t] = cfg.colsb[t - 3];
    cfg.rows[t] = cfg.rows[t - 3];
  }
  load_tile_config(cfg);
}

void q8_panel_tiles(const std::byte* w, std::size_t row_stride, const AmxQ8Activations& a, float* y, std::int64_t ldy,
                    std::int64_t row_begin, std::int64_t row_end) {
  const std::int64_t nb = a.blocks;
  alignas(64) std::int32_t c_tile[2 * kTile * kTile];
  int configured = 0;
  // As q8_tiles: the next tile's bytes requested towards L2 a few lines per block.
  const std::size_t tile_bytes = kTile * row_stride;
  const auto tile_lines = static_cast<std::int64_t>((tile_bytes + 63) / 64);
  const std::int64_t lines_per_block = (tile_lines + nb - 1) / nb;
  for (std::int64_t r0 = row_begin; r0 + kTile <= row_end; r0 += kTile) {
    const std::byte* tile = w + static_cast<std::size_t>(r0) * row_stride;
    const std::byte* next = tile + tile_bytes;
    for (std::int64_t c0 = 0; c0 < a.m; c0 += kTile) {
      const int n = static_cast<int>(a.m - c0 < kTile ? a.m - c0 : kTile);
      if (n != configured) {
        configure_panel_tiles(n);
        configured = n;
      }
      const Group packed = group_at(a, c0 / kTile);  // the rows' levels as A tiles, scales, 128 x level sums
      __m512 acc[kTile];
      for (auto& v : acc) v = _mm512_setzero_ps();
      for (std::int64_t g = 0; g * kRepackGroupBlocks < nb; ++g) {
        const Q8PanelGroup group = q8_0p_group(g, nb);
        // Two blocks at a time (the second on tmm3-5) so one product runs while the other's sums
        // are stored; the float steps still run in block order.
        for (int i = 0; i < group.blocks; i += 2) {
          const std::int64_t b = g * kRepackGroupBlocks + i;
          const int pair = i + 1 < group.blocks ? 2 : 1;
          if (c0 == 0) {
            const std::int64_t last = b + pair;
            const std::int64_t end = last * lines_per_block < tile_lines ? last * lines_per_block : tile_lines;
            for (std::int64_t l = b * lines_per_block; l < end; ++l) prefetch_l2(next + 64 * l);
          }
          _tile_loadd(0, packed.tiles + 512 * b, 32);
          _tile_loadd(1, tile + group.levels + 512 * static_cast<std::size_t>(i), 64);
          _tile_zero(2);
          _tile_dpbsud(2, 0, 1);
          if (pair == 2) {
            _tile_loadd(3, packed.tiles + 512 * (b + 1), 32);
            _tile_loadd(4, tile + group.levels + 512 * static_cast<std::size_t>(i + 1), 64);
            _tile_zero(5);
            _tile_dpbsud(5, 3, 4);
          }
          _tile_stored(2, c_tile, 64);
          if (pair == 2) _tile_stored(5, c_tile + kTile * kTile, 64);
          for (int k = 0; k < pair; ++k) {
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(tile + group.scales + 32 * static_cast<std::size_t>(i + k))));
            const float* dx = packed.dx + 16 * (b + k);
            const std::int32_t* offset = packed.offset + 16 * (b + k);
            const std::int32_t* sums = c_tile + kTile * kTile * k;
            for (int c = 0; c < n; ++c) {
              const __m512i isum = _mm512_sub_epi32(_mm512_load_si512(sums + kTile * c), _mm512_set1_epi32(offset[c]));
              acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(dx[c])), acc[c]);
            }
          }
        }
      }
      for (int c = 0; c < n; ++c) _mm512_storeu_ps(y + (c0 + c) * ldy + r0, acc[c]);
    }
  }
  if (configured != 0) _tile_release();
}

}  // namespace

QdotFn qdot_amx_numerics(WeightLayout layout) noexcept {
  if (layout == WeightLayout::kQ8_0R) return qdot_q8_block_sums(layout);
  if (layout == WeightLayout::kQ8_0) return qdot_one_row<q8_tiles_one_row<StoredBlocks>, WeightLayout::kQ8_0>;
  return nullptr;
}

void amx_q8_pack(const AmxQ8Activations& a, std::int64_t group_begin, std::int64_t group_end, bool as_a) noexcept {
  for (std::int64_t g = group_begin; g < group_end; ++g) {
    const Group grp = group_at(a, g);
    const std::int64_t c0 = g * kTile;
    const int n = static_cast<int>(a.m - c0 < kTile ? a.m - c0 : kTile);
    const QuantizedRow* x = a.rows + c0;
    auto* tiles = const_cast<std::int8_t*>(grp.tiles);
    auto* dx = const_cast<float*>(grp.dx);
    auto* offset = const_cast<std::int32_t*>(grp.offset);
    for (std::int64_t b = 0; b < a.blocks; b += 2) {
      __m512i r[16];
      for (int c = 0; c < kTile; ++c) r[c] = c < n ? _mm512_load_si512(x[c].qs + 32 * b) : _mm512_setzero_si512();
      if (as_a) {  // A tiles: row c's 32 levels of block b at 32 c (a tile load reads 512 bytes in a row)
        for (int c = 0; c < kTile; ++c) {
          _mm256_store_si256(reinterpret_cast<__m256i*>(tiles + 512 * b + 32 * c), _mm512_castsi512_si256(r[c]));
          _mm256_store_si256(reinterpret_cast<__m256i*>(tiles + 512 * (b + 1) + 32 * c),
                             _mm512_extracti64x4_epi64(r[c], 1));
        }
        continue;
      }
      transpose16x32bit(r);  // r[p]: word p (levels 4p .. 4p + 3 of the pair of blocks) of every row
      for (int p = 0; p < kTile; ++p) _mm512_store_si512(tiles + 512 * b + 64 * p, r[p]);
    }
    for (std::int64_t b = 0; b < a.blocks; ++b) {
      for (int c = 0; c < kTile; ++c) {
        dx[16 * b + c] = c < n ? x[c].d[b] : 0.0f;
        offset[16 * b + c] = c < n ? 128 * x[c].sum[b] : 0;
      }
    }
  }
}

void amx_q8_gemm_rows(WeightLayout layout, const std::byte* w, std::size_t row_stride, const AmxQ8Activations& a,
                      float* y, std::int64_t ldy, std::int64_t row_begin, std::int64_t row_end) noexcept {
  const std::int64_t whole = row_begin + (row_end - row_begin) / kTile * kTile;
  if (layout == WeightLayout::kQ8_0P) {
    q8_panel_tiles(w, row_stride, a, y, ldy, row_begin, whole);
  } else if (layout == WeightLayout::kQ8_0R) {
    q8_tiles<RepackedBlocks>(w, row_stride, a, y, ldy, row_begin, whole);
  } else {
    q8_tiles<StoredBlocks>(w, row_stride, a, y, ldy, row_begin, whole);
  }
  if (whole < row_end) {  // a last partial tile: the VNNI kernel (same sums, its own float order)
    const QgemmFn rest = qgemm_avx512vnni(layout);
    for (std::int64_t i0 = 0; i0 < a.m; i0 += 32) {
      const std::int64_t mb = a.m - i0 < 32 ? a.m - i0 : 32;
      rest(w + static_cast<std::size_t>(whole) * row_stride, row_stride, a.rows + i0, mb, y + i0 * ldy + whole, ldy,
           row_end - whole);
    }
  }
}

}  // namespace sitsrt::cpu::detail
