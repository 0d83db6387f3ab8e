// Matrix products against weights kept in their stored (possibly block-quantized) format.
// Weights are dequantized block by block inside the kernels, never as a whole tensor.
#pragma once

#include "cpu/cpu_context.hpp"
#include "cpu/weight_layout.hpp"

#include <cstddef>
#include <cstdint>

namespace sitsrt::cpu {

// W: `rows` output rows of `cols` input elements in `layout`, row r at data + r * row_stride
// bytes (row_stride >= row_bytes(layout, cols)). GGUF order: cols = dims[0], rows = dims[1].
struct WeightMatrix {
  WeightLayout layout = WeightLayout::kF32;
  const std::byte* data = nullptr;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::size_t row_stride = 0;
};

// y[i, r] = sum_c x[i, c] * W[r, c] for i < m, r < W.rows.
// x: m rows of W.cols floats, row stride ldx; y: m rows of W.rows floats, row stride ldy.
// m == 1 is the decode matvec; m > 1 the prefill GEMM. Output rows split across threads.
// Throws kInvalidArgument for negative shapes, cols that are not whole blocks, or a row_stride
// below the row's bytes. ldx / ldy are only read when m > 1.
void matmul(CpuContext& ctx, const WeightMatrix& w, const float* x, std::int64_t ldx, std::int64_t m, float* y,
            std::int64_t ldy);

// Whether a one-row matmul of w runs the decode kernel, as the one-row fusions (matvec_group.hpp)
// do: always outside batch-invariant mode; in it, only where the decode kernel rounds as the
// batched one does (int8 activations), float rows taking the GEMM.
bool matvec_fusable(const CpuContext& ctx, const WeightMatrix& w) noexcept;

// Per-thread scratch (in floats) matmul needs for this weight and batch size: 0 for m <= 1
// (decode needs none), otherwise two weight tiles of at most 32 rows x 1024 columns (256 KiB),
// or the AMX gemm's 100 KiB when that is more (small cols), independent of m. Reserve the
// maximum over a plan's matmuls with CpuContext::reserve_scratch; matmul throws kInternal when
// less is reserved.
//
// Numerics: float accumulation with FMA in a fixed per-ISA order that does not depend on the
// thread count (each output is computed by one thread); m == 1 and m > 1 use different orders,
// so decode and prefill of the same token may differ in the last bits. At Isa::kAmx, m > 1 rounds
// x and W to bf16 and sums in fp32 (see cpu/matmul/amx_prefill.hpp): relative error <= 2^-7 per term.
std::size_t matmul_scratch_floats(const WeightMatrix& w, std::int64_t m) noexcept;

// Shared scratch bytes (CpuContext::reserve_shared_bytes) matmul needs for this weight and
// batch size in this context: the int8-quantized input row when the context uses int8
// activations and the format has an integer-dot kernel at its ISA level (decode, m == 1); for
// m > 1, enough for every batch of 2..m rows: the int8 GEMM's m quantized rows (at most
// qgemm_max_m outside batch-invariant mode) and/or the bf16 copy of x at
// Isa::kAmx; else 0.
// With int8 activations, decode of Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 computes
// sum_b fl(d_w d_x) * int_dot_b [+ m_w fl(d_x sum q)] (see cpu/qdot/qdot_kernels.hpp): the error
// versus the float path is that of rounding x to 8 bits per 32-block.
std::size_t matmul_shared_bytes(const CpuContext& ctx, const WeightMatrix& w, std::int64_t m) noexcept;

// out[i, :] = dequantized row ids[i] of `table` (embedding lookup), bit-identical to
// dequantize_row. Throws kInvalidArgument, naming the id and the row count, when an id is
// outside [0, table.rows); nothing is written then.
void get_rows(CpuContext& ctx, const WeightMatrix& table, const std::int32_t* ids, std::int64_t n, float* out,
              std::int64_t ldo);

}  // namespace sitsrt::cpu
