// The AVX-512 table's prefill tile kernel (MatmulKernels::gemm_tile, listed in matmul_avx512.cpp):
// y[i, j] (+)= x[i, :k] . w[j, :k] in outer-product form, over a tile dequantized by the table's
// dequant kernels. Only gemm_tile_avx512 is external (the ODR note of matmul_kernels.hpp).
// The dequantized tile (up to 32 weight rows) is transposed into panels of 16 rows,
// panel[c][0..15] = w[0..15][c], so one aligned load gives 16 output columns at input c. The
// micro-kernel then broadcasts x[i][c] for kMr rows and FMAs it into kMr x 2 accumulators
// holding y[i][0..31] directly: 2 panel loads + 12 broadcasts feed 24 FMAs per c, no horizontal
// sums, and each x element is read once per 32 outputs. (The dot-product form, x rows against
// w rows, reloaded every x vector for each 4 weight rows and spent the rest on reductions.)
#include "cpu/matmul/matmul_kernels.hpp"
#include "cpu/qdot/transpose16_avx512.hpp"

#include "cpu/simd_intrinsics.hpp"

#include <cstddef>
#include <cstdint>
#include <utility>

namespace sitsrt::cpu::detail {
namespace {

constexpr int kMr = 12;     // x rows per micro-kernel: 24 accumulators + 2 panel vectors + 1 broadcast
constexpr int kPanel = 16;  // weight rows per panel (one zmm of output columns)

// r[c] := column c of the 16 x 16 block r[0..15] (the 32-bit lane transpose, on floats).
inline void transpose16(__m512 (&r)[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; ++i) t[i] = _mm512_castps_si512(r[i]);
  transpose16x32bit(t);
  for (int i = 0; i < 16; ++i) r[i] = _mm512_castsi512_ps(t[i]);
}

// panel[p][c * 16 + l] = w[(16 p + l) * ldw + c] for c < ldw; rows >= n read as zero.
inline void pack_panels(const float* w, std::int64_t ldw, std::int64_t n, float* panel) {
  for (std::int64_t p = 0; p * kPanel < n; ++p) {
    float* dst = panel + p * kPanel * ldw;
    for (std::int64_t c = 0; c < ldw; c += 16) {
      __m512 r[16];
      for (int l = 0; l < 16; ++l) {
        const std::int64_t row = p * kPanel + l;
        r[l] = row < n ? _mm512_load_ps(w + row * ldw + c) : _mm512_setzero_ps();
      }
      transpose16(r);
      for (int l = 0; l < 16; ++l) _mm512_store_ps(dst + (c + l) * kPanel, r[l]);
    }
  }
}

// y[i, 0..16 NP) (+)= sum_c x[i, c] * panel[c] for i < MR; mask0/mask1 select the valid columns.
template <int MR, int NP>
void gemm_micro_avx512(const float* x, std::int64_t ldx, const float* panel, std::int64_t ldw, std::int64_t k, float* y,
                       std::int64_t ldy, __mmask16 mask0, __mmask16 mask1, bool accumulate) {
  __m512 acc[MR][NP];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 2
    for (int j = 0; j < NP; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const float* p1 = panel + kPanel * ldw;
  for (std::int64_t c = 0; c < k; ++c) {
    const __m512 w0 = _mm512_load_ps(panel + c * kPanel);
    const __m512 w1 = NP > 1 ? _mm512_load_ps(p1 + c * kPanel) : w0;
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const __m512 xb = _mm512_set1_ps(x[i * ldx + c]);
      acc[i][0] = _mm512_fmadd_ps(xb, w0, acc[i][0]);
      if constexpr (NP > 1) acc[i][NP - 1] = _mm512_fmadd_ps(xb, w1, acc[i][NP - 1]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    float* out = y + i * ldy;
    const __mmask16 masks[2] = {mask0, mask1};
#pragma GCC unroll 2
    for (int j = 0; j < NP; ++j) {
      __m512 v = acc[i][j];
      if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(masks[j], out + 16 * j));
      _mm512_mask_storeu_ps(out + 16 * j, masks[j], v);
    }
  }
}

using GemmMicroFn = void (*)(const float*, std::int64_t, const float*, std::int64_t, std::int64_t, float*, std::int64_t,
                             __mmask16, __mmask16, bool);

// kMicro.fn[NP - 1][MR - 1]: the micro-kernel for MR x rows and NP panels (remainders
// included). A plain array in a local type, so nothing here is shared with other files.
struct MicroTable {
  GemmMicroFn fn[2][kMr];
};
template <std::size_t... I>
constexpr MicroTable make_micro_table(std::index_sequence<I...>) {
  return {{{gemm_micro_avx512<static_cast<int>(I) + 1, 1>...}, {gemm_micro_avx512<static_cast<int>(I) + 1, 2>...}}};
}
constexpr MicroTable kMicro = make_micro_table(std::make_index_sequence<kMr>{});

inline __mmask16 first_lanes(std::int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1u);
}

}  // namespace

void gemm_tile_avx512(const float* x, std::int64_t ldx, std::int64_t m, const float* w, std::int64_t ldw,
                      std::int64_t n, std::int64_t k, float* y, std::int64_t ldy, bool accumulate, float* work) {
  pack_panels(w, ldw, n, work);
  for (std::int64_t j0 = 0; j0 < n; j0 += 2 * kPanel) {
    const std::int64_t cols = n - j0 < 2 * kPanel ? n - j0 : 2 * kPanel;
    const int np = cols > kPanel ? 2 : 1;
    const __mmask16 mask0 = first_lanes(cols), mask1 = first_lanes(cols - kPanel);
    const float* panel = work + j0 * ldw;
    for (std::int64_t i = 0; i < m; i += kMr) {
      const std::int64_t rows = m - i < kMr ? m - i : kMr;
      kMicro.fn[np - 1][rows - 1](x + i * ldx, ldx, panel, ldw, k, y + i * ldy + j0, ldy, mask0, mask1, accumulate);
    }
  }
}

}  // namespace sitsrt::cpu::detail
