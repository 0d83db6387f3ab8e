// AMX-INT8 tiles for the int8-activation GEMM of Q8_0 / Q8_0R weights (m > 1 rows outside
// batch-invariant mode, Isa::kAmx): TDPBSSD forms each (weight row, activation row) block's exact
// int32 sum over 32 levels, 16 x 16 pairs per instruction, and the float step applies the block's
// scale product once per block: y = sum_b float(isum_b) * fl(d_w d_x), in block order.
//
// Why: with VNNI the float step (convert, scale product, FMA) runs once per 4-level partial and
// costs three vector operations per vpdpbusd, so a 16-row decode step costs 5-6 one-row steps
// (docs/performance.md). Here it runs once per 32-level block sum, and the integer work goes to
// the tile unit.
//
// Numerics: each output differs from the one-row decode kernel's (which scales 4-level partials)
// by float rounding only, so this path is not taken in batch-invariant (--deterministic) mode;
// it is deterministic itself (fixed block order, no split of K).
//
// Tiles (palette 1): A = 16 weight rows x one block (32 bytes each, straight from the weights,
// row stride apart); B = one block of 16 activation rows in the VNNI layout (8 rows of 64 bytes:
// row p holds levels 4p .. 4p + 3 of each activation row), packed per call; C = 16 x 16 int32,
// weight rows by activation rows. Only reached at Isa::kAmx; everything is in an anonymous
// namespace but the table accessor (ODR note in matmul_kernels.hpp).
#include "core/quant_blocks.hpp"
#include "cpu/matmul/amx_tiles.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/repacked_blocks.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <cstddef>
#include <cstdint>
#include <new>

namespace sitsrt::cpu::detail {
namespace {

constexpr int kTile = 16;

// tmm0: A (16 x 32 bytes), tmm1: B (8 x 64 bytes), tmm2: C (16 x 64 bytes). (Four blocks in
// flight on four C tiles was tried and was not faster on a busy machine; this is the simpler.)
void configure_tiles() {
  TileConfig cfg;
  cfg.colsb[0] = 32;
  cfg.rows[0] = kTile;
  cfg.colsb[1] = 64;
  cfg.rows[1] = 8;
  cfg.colsb[2] = 64;
  cfg.rows[2] = kTile;
  _tile_loadconfig(&cfg);
}

// Activation rows x[0 .. n) (n <= 16) as B tiles, one per block (512 bytes at packed + 512 b; rows
// at or past n zero), their block scales as vectors over the rows (dx + 16 b) and 128 times their
// level sums (offset + 16 b: what unsigned weight levels q + 128 add to a block's sum).
void pack_activations(const QuantizedRow* x, int n, std::int64_t nb, std::int8_t* packed, float* dx,
                      std::int32_t* offset) {
  for (std::int64_t b = 0; b < nb; b += 2) {  // rows are padded to an even block count
    __m512i r[16];
    for (int c = 0; c < kTile; ++c) {
      r[c] = c < n ? _mm512_load_si512(x[c].qs + 32 * b) : _mm512_setzero_si512();
    }
    transpose16x32bit(r);  // r[p]: word p (levels 4p .. 4p + 3 of the pair of blocks) of every row
    for (int p = 0; p < kTile; ++p) _mm512_store_si512(packed + 512 * b + 64 * p, r[p]);
    for (std::int64_t k = b; k < b + 2 && k < nb; ++k) {
      for (int c = 0; c < kTile; ++c) {
        dx[16 * k + c] = c < n ? x[c].d[k] : 0.0f;
        offset[16 * k + c] = c < n ? 128 * x[c].sum[k] : 0;
      }
    }
  }
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

template <typename Blocks>
void q8_gemm_amx(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, std::int64_t m, float* y,
                 std::int64_t ldy, std::int64_t n_rows) {
  const std::int64_t nb = x[0].blocks;
  const std::int64_t padded = (nb + 1) / 2 * 2;
  // Per-call scratch: one group of 16 activation rows packed (512 bytes and 16 scales per block)
  // and the C tile's bounce buffer.
  thread_local struct Scratch {
    std::int8_t* packed = nullptr;
    float* dx = nullptr;
    std::int32_t* offset = nullptr;
    std::int64_t blocks = 0;
    void release() {
      ::operator delete[](packed, std::align_val_t{64});
      ::operator delete[](dx, std::align_val_t{64});
      ::operator delete[](offset, std::align_val_t{64});
    }
    ~Scratch() { release(); }
  } scratch;
  if (scratch.blocks < padded) {
    scratch.release();
    const auto n = static_cast<std::size_t>(padded);
    scratch.packed = static_cast<std::int8_t*>(::operator new[](n * 512, std::align_val_t{64}));
    scratch.dx = static_cast<float*>(::operator new[](n * 64, std::align_val_t{64}));
    scratch.offset = static_cast<std::int32_t*>(::operator new[](n * 64, std::align_val_t{64}));
    scratch.blocks = padded;
  }
  alignas(64) std::int32_t c_tile[kTile * kTile];
  const __m512i row_offsets = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                 _mm512_set1_epi32(static_cast<int>(row_stride)));
  configure_tiles();
  for (std::int64_t c0 = 0; c0 < m; c0 += kTile) {
    const int n = static_cast<int>(m - c0 < kTile ? m - c0 : kTile);
    pack_activations(x + c0, n, nb, scratch.packed, scratch.dx, scratch.offset);
    for (std::int64_t r0 = 0; r0 + kTile <= n_rows; r0 += kTile) {
      const std::byte* rows = w + static_cast<std::size_t>(r0) * row_stride;
      __m512 acc[kTile];
      for (auto& a : acc) a = _mm512_setzero_ps();
      for (std::int64_t b = 0; b < nb; ++b) {
        _tile_loadd(0, rows + Blocks::levels(nb, b), static_cast<long>(row_stride));
        _tile_loadd(1, scratch.packed + 512 * b, 64);
        _tile_zero(2);
        if constexpr (Blocks::kUnsigned) {
          _tile_dpbusd(2, 0, 1);
        } else {
          _tile_dpbssd(2, 0, 1);
        }
        _tile_stored(2, c_tile, 64);
        // The float step: acc[r] += float(sum) * fl(d_w d_x), lanes = activation rows.
        const __m512i words = _mm512_i32gather_epi32(row_offsets, rows + Blocks::scale_word(nb, b), 1);
        const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(words, Blocks::kScaleShift)));
        alignas(64) float dws[kTile];
        _mm512_store_ps(dws, dw);
        const __m512 dx = _mm512_load_ps(scratch.dx + 16 * b);
        const __m512i offset = _mm512_load_si512(scratch.offset + 16 * b);
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
      for (int c = 0; c < n; ++c) _mm512_storeu_ps(y + (c0 + c) * ldy + r0, _mm512_castsi512_ps(t[c]));
    }
  }
  _tile_release();
  // Weight rows past the last whole tile: the VNNI kernel (same sums, its own float order).
  const std::int64_t done = n_rows / kTile * kTile;
  if (done < n_rows) {
    const QgemmFn rest = qgemm_avx512vnni(Blocks::kScaleShift == 0 ? WeightLayout::kQ8_0 : WeightLayout::kQ8_0R);
    rest(w + static_cast<std::size_t>(done) * row_stride, row_stride, x, m, y + done, ldy, n_rows - done);
  }
}

}  // namespace

QgemmFn qgemm_amx_int8(WeightLayout layout) noexcept {
  switch (layout) {
    case WeightLayout::kQ8_0: return q8_gemm_amx<StoredBlocks>;
    case WeightLayout::kQ8_0R: return q8_gemm_amx<RepackedBlocks>;
    default: return nullptr;
  }
}

}  // namespace sitsrt::cpu::detail
