// Internal: decode matvec with int8-quantized activations (integer dot products).
// The input row x is quantized once per matmul, per 32-element block, Q8_0-style but with an
// fp32 scale: d = max|x| / 127, q = round_to_nearest_even(x * (1 / d)) in [-127, 127] (d = 0 and
// q = 0 for an all-zero block). The weight block's integer levels are dotted against q exactly
// in int32, and each block contributes fl(d_w * d_x) * dot [+ m_w * fl(d_x * sum q)] in float.
// One table per ISA level (qdot_{generic,avx2,avx512vnni}.cpp; the AVX2 one also built with
// AVX-VNNI, qdot_avxvnni.cpp); a null entry means the format
// has no integer path and matmul falls back to the float-activation kernel.
#pragma once

#include "cpu/cpu_context.hpp"
#include "cpu/weight_layout.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu::detail {

// A quantized activation row in the context's shared scratch, blocks padded to an even count
// (the pad block is all zeros, scale 0) so pair kernels may read two blocks at a time.
// Per-block values are also stored repeated 8 times (one per 32-bit lane of a 32-byte block)
// so SIMD kernels load them as vectors.
struct QuantizedRow {
  const std::int8_t* qs = nullptr;      // padded_blocks * 32 levels
  const float* d8 = nullptr;            // padded_blocks * 8: d of block b at [8b, 8b + 8)
  const std::int32_t* neg_sum8 = nullptr;  // padded_blocks * 8: -sum(q of block b), repeated
  const float* ds = nullptr;            // padded_blocks: fl(d * sum(q))
  const float* ds8 = nullptr;           // padded_blocks * 8: ds / 8, repeated (sums to ds)
  const float* d = nullptr;             // padded_blocks: d of block b at [b] (16 blocks per vector)
  const std::int32_t* sum = nullptr;    // padded_blocks: sum(q of block b)
  // The levels again, block per 32-bit lane, as the Q4_0R and Q4_KR kernels read them: units of
  // 16 blocks (512 bytes; the last one zero-padded), word m (levels 4m .. 4m + 3) of the unit's
  // block i at 64 m + 4 i of its unit. Written only by write_block_lanes, which decode calls
  // when a product has such a kernel (DecodeKernel::lanes).
  const std::int8_t* lanes = nullptr;
  std::int64_t blocks = 0;              // real blocks (cols / 32)
};

// Bytes of shared scratch a row of `cols` elements needs (0 if cols is not whole blocks).
std::size_t quantized_row_bytes(std::int64_t cols) noexcept;
// Quantizes x[0, cols) (whole blocks) into `buffer` (64-byte aligned, quantized_row_bytes).
// The portable version; the ISA tables carry SIMD versions with bit-identical output.
QuantizedRow quantize_row_q8_act(const float* x, std::int64_t cols, std::byte* buffer) noexcept;
using QuantizeRowFn = QuantizedRow (*)(const float* x, std::int64_t cols, std::byte* buffer) noexcept;

// Where each array of a quantized row starts in its buffer (shared by every quantizer).
struct QuantizedRowLayout {
  std::int8_t* qs;
  float* d8;
  std::int32_t* neg_sum8;
  float* ds8;
  float* ds;
  float* d;
  std::int32_t* sum;
  std::int8_t* lanes;
  std::int64_t blocks, padded_blocks;
};
QuantizedRowLayout quantized_row_layout(std::int64_t cols, std::byte* buffer) noexcept;
// Writes block b's per-block values (d8, neg_sum8, ds, ds8, d, sum) from its scale d and level sum;
// every quantizer ends each block with it. (Out of line and compiled for the baseline target:
// the ISA files may call it, see the ODR note in matmul_kernels.hpp.)
void store_block_scales(const QuantizedRowLayout& l, std::int64_t b, float d, std::int32_t sum) noexcept;
QuantizedRow quantized_row(const QuantizedRowLayout& l) noexcept;
// Fills QuantizedRow::lanes of the row quantized into `buffer` from its levels (cols / 4 word
// copies: a few hundred nanoseconds per product).
void write_block_lanes(std::int64_t cols, std::byte* buffer) noexcept;

// y[r] = sum_b W-block(r, b) . x-block(b) as described above, for r < n_rows.
using QdotFn = void (*)(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                        std::int64_t n_rows);

// m > 1 activation rows (cpu::matmul with int8 activations): y[i * ldy + r] for i < m, r < n_rows,
// each bit-identical to the QdotFn result of weight row r against x[i] (same float operations in
// the same order; see qgemm_avx512vnni.cpp), so results depend neither on m nor on the other rows.
// (Q8_0 / Q8_0R at the AVX-512 VNNI level: to batch-invariant mode's QdotFn, qdot_q8_block_sums.)
using QgemmFn = void (*)(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, std::int64_t m, float* y,
                         std::int64_t ldy, std::int64_t n_rows);

// Weight rows of one panel of a QgemmFn's tiling (a multiple of the tile's tile_rows, at least
// one tile): the kernels run every activation tile over a panel's weight rows before the next
// panel, so the panel (~256 KiB) stays in L2 while one activation tile (a few rows of codes and
// scales) stays in L1. Ordering weight-row tiles outermost instead re-reads every activation row
// from L2 or beyond for each pair of weight rows, which bounds a 16-row decode step by cache
// bandwidth (docs/performance.md). Only the order of the tiles changes, never their contents.
inline std::int64_t qgemm_panel_rows(std::size_t row_stride, int tile_rows) noexcept {
  constexpr std::size_t kPanelBytes = std::size_t{256} << 10;
  const auto rows = static_cast<std::int64_t>(kPanelBytes / (row_stride > 0 ? row_stride : 1));
  return rows < tile_rows ? tile_rows : rows / tile_rows * tile_rows;
}

struct QdotKernels {
  QdotFn matvec[kWeightLayoutCount];  // indexed by WeightLayout; nullptr: no integer path for it
  QuantizeRowFn quantize;      // bit-identical to quantize_row_q8_act
};

const QdotKernels& qdot_kernels_for(Isa isa) noexcept;
// The register-blocked multi-row kernel of `layout` at `isa` (Q8_0, Q8_0R, Q8_0P, Q4_0, Q4_0R with
// AVX-512 VNNI; Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K with AVX2), or nullptr: matmul then
// runs the decode kernel once per activation row over the same cache-resident weight rows (also
// bit-identical to m == 1).
QgemmFn qgemm_kernel_for(Isa isa, WeightLayout layout) noexcept;
// The largest m the int8 GEMM takes outside batch-invariant mode (which sends it every m): any
// with an AVX-512 VNNI kernel; else kQgemmPerRowMaxM, the largest decode batch of the serving
// core. Beyond that (prefill) the float GEMM is faster: than m decode passes (~1.4-1.6x at m = 64
// for Q4_1, Q6_K and the AVX2 level) and than the AVX2 kernels, which without vpdpbusd spend as
// many vector operations per block pair as the float GEMM's FMAs (Zen 3: float 1.0-1.4x faster at
// m = 128-256 for Q4_0/Q4_1, docs/performance.md).
std::int64_t qgemm_max_m(Isa isa, WeightLayout layout) noexcept;
inline constexpr std::int64_t kQgemmPerRowMaxM = 64;
// True when `isa`'s table has the Q4_KR kernel and the CPU can run it (AVX512_VBMI): only then
// does Q4_K repack (weight_layout.cpp) and decode take the table's Q4_KR entry.
bool q4_kr_decode_native(Isa isa) noexcept;
const QdotKernels& qdot_kernels_generic() noexcept;
// Outside batch-invariant mode, the fewest rows that take the AMX-INT8 tiles (below). Fewer rows
// take the VNNI GEMM on the same Q8_0R rows, whose tile transposes cost less than the AMX path
// spends on a 16-row tile mostly empty: serving the 0.35B Q8_0 model at 2 threads, tok/s at
// 4 / 6 streams 170-172 / 235-245 with the tiles from 4 rows, 195-202 / 256-263 from 8; at 8 and
// more the tiles win (16 streams: 491-499 against 406-410 with the VNNI GEMM).
inline constexpr std::int64_t kQgemmAmxMinM = 8;
// The AVX2 decode table and int8 GEMM (qdot_avx2.cpp, qgemm_avx2.cpp), and the same kernels
// built with AVX-VNNI (qdot_avxvnni.cpp, qgemm_avxvnni.cpp): bit-identical; the latter only where
// avx_vnni_supported() (CPUID 7.1 EAX bit 4, asked once), and then the AVX2 and plain AVX-512
// levels take them. Named here for the tests, which see no SITSRT_X86_KERNELS: defined on x86-64
// only (avx_vnni_supported everywhere, false off x86).
bool avx_vnni_supported() noexcept;
const QdotKernels& qdot_kernels_avx2() noexcept;
QgemmFn qgemm_avx2(WeightLayout layout) noexcept;
const QdotKernels& qdot_kernels_avxvnni() noexcept;
QgemmFn qgemm_avxvnni(WeightLayout layout) noexcept;
#if defined(SITSRT_X86_KERNELS)
const QdotKernels& qdot_kernels_avx512vnni() noexcept;
QgemmFn qgemm_avx512vnni(WeightLayout layout) noexcept;  // qgemm_avx512vnni.cpp
// AMX-INT8 tiles for Q8_0 / Q8_0R (qgemm_amx.cpp). Not bit-identical to the decode kernel (it
// scales whole-block sums, decode scales 4-level partials): matmul takes them at Isa::kAmx for
// kQgemmAmxMinM rows or more, and in batch-invariant mode for every batch of 2+ (each activation
// row is its own lane, so its outputs do not depend on the batch; one row: qdot_amx_numerics). The activations are packed into
// tiles once per matmul: per 16-row group, per block, the B tile (512 bytes), then the groups'
// block scales and 128 x level sums (16 floats and 16 int32 per block).
struct AmxQ8Activations {
  const QuantizedRow* rows = nullptr;  // the m quantized rows
  std::byte* data = nullptr;           // amx_q8_activation_bytes(m, blocks), 64-byte aligned
  std::int64_t m = 0, blocks = 0;      // rows; real blocks per row
};
// For matmul.cpp (baseline code) only: an inline function also used by the AMX file could be
// emitted with its flags (ODR note in matmul_kernels.hpp).
inline std::size_t amx_q8_activation_bytes(std::int64_t m, std::int64_t blocks) noexcept {
  return static_cast<std::size_t>((m + 15) / 16 * ((blocks + 1) / 2 * 2) * (512 + 64 + 64));
}
inline bool amx_q8_layout(WeightLayout layout) noexcept {
  return layout == WeightLayout::kQ8_0 || layout == WeightLayout::kQ8_0R;
}
// The layouts amx_q8_gemm_rows takes: those, and the Q8_0P tiles, whose blocks are B tiles
// already (no packed activations; their one-row kernels already have the tiles' numerics).
inline bool amx_q8_gemm_layout(WeightLayout layout) noexcept {
  return amx_q8_layout(layout) || layout == WeightLayout::kQ8_0P;
}
// One activation row of Q8_0 / Q8_0R weights with the numerics of amx_q8_gemm_rows (bit for bit its
// result for that row whatever the batch): the decode kernel of batch-invariant mode at Isa::kAmx.
// Whole 16-row tiles (counted from w) by block sums, a last partial tile by the VNNI decode kernel.
QdotFn qdot_amx_numerics(WeightLayout layout) noexcept;
// Q8_0 / Q8_0R with the tiles' block-sum numerics on AVX-512 VNNI alone
// (qgemm_q8_block_sums_avx512vnni.cpp), or nullptr for other layouts: the whole 16-row tiles of
// n_rows against m rows (the Q8 entries of qgemm_avx512vnni run them, and their pair kernels the
// rows past them), and one row (whole tiles by block sums, a last partial tile by the VNNI decode
// kernel): batch-invariant decode at avx512vnni, and qdot_amx_numerics(kQ8_0R).
QgemmFn qgemm_q8_block_sum_tiles(WeightLayout layout) noexcept;
QdotFn qdot_q8_block_sums(WeightLayout layout) noexcept;
// Q8_0P (16-row tiles, qdot_q8_panels_avx512vnni.cpp): the avx512vnni table's decode entry and its
// GEMM, both with the block-sum numerics above (bit-identical to them on the same Q8_0 weights);
// rows past the last whole tile take the Q8_0R pair kernels.
void qdot_q8_0p_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                           std::int64_t n_rows);
void qgemm_q8_0p_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow* x, std::int64_t m, float* y,
                            std::int64_t ldy, std::int64_t n_rows);
// Packs the 16-row groups [group_begin, group_end) (disjoint ranges on any threads): the levels
// as B tiles (VNNI word layout), or `as_a` as A tiles (each row's block in a row: Q8_0P).
void amx_q8_pack(const AmxQ8Activations& a, std::int64_t group_begin, std::int64_t group_end,
                 bool as_a = false) noexcept;
// Outputs of weight rows [row_begin, row_end) for all m rows: whole 16-row tiles on the tile
// unit, a last partial tile through the VNNI kernel.
void amx_q8_gemm_rows(WeightLayout layout, const std::byte* w, std::size_t row_stride, const AmxQ8Activations& a,
                      float* y, std::int64_t ldy, std::int64_t row_begin, std::int64_t row_end) noexcept;
// The Q4_K entry of the avx512vnni table (qdot_q4k_avx512vnni.cpp).
void qdot_q4_k_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                          std::int64_t n_rows);
// Its Q4_KR entry (qdot_q4kr_avx512vbmi.cpp): only where the CPU has AVX512_VBMI, so decode
// takes it only when q4_kr_decode_native().
void qdot_q4_kr_avx512vbmi(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                           std::int64_t n_rows);
// Q4_0 (stored) and Q4_0R (repacked) entries of the avx512vnni table (qdot_q4_avx512vnni.cpp).
void qdot_q4_0_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                          std::int64_t n_rows);
void qdot_q4_0r_avx512vnni(const std::byte* w, std::size_t row_stride, const QuantizedRow& x, float* y,
                           std::int64_t n_rows);
#endif

}  // namespace sitsrt::cpu::detail
