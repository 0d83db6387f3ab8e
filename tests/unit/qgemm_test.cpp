// The int8-activation GEMM (cpu::matmul with m > 1 and int8 activations, cpu/qdot/qgemm_*.cpp and
// matmul.cpp's qgemm) on every ISA level: each output bit for bit equal to the decode (m == 1)
// result of its activation row, whatever m, the companion rows and the thread count (batch
// invariance), and close to a double reference built from the raw block levels and the quantized
// activation row (only the kernels' float rounding may differ). Outside batch-invariant mode the
// int8 GEMM takes up to qgemm_max_m rows (any m with the AVX-512 VNNI kernels, decode batches
// otherwise); beyond, the float GEMM (matmul_test). Batch-invariant mode takes it at every m.
#include "core/dtype.hpp"
#include "core/half.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/matmul/matmul.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/repacked_blocks.hpp"
#include "support/isa.hpp"
#include "support/random.hpp"
#include "support/sanitizer.hpp"
#include "support/tolerance.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace sitsrt;

namespace {

const cpu::Isa kIsas[] = {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni};

// Q8_0/Q4_0 and their repacked layouts (the register-blocked kernels at avx512vnni; Q8_0P's
// 16-row tiles there), Q4_1, Q5_0,
// Q5_1, Q4_K, Q5_K, Q6_K (register-blocked at avx2), and formats that take the per-row decode
// kernel inside the GEMM (Q4_KR with VBMI; Q4_1, Q5, the K-quants at avx512vnni).
constexpr cpu::WeightLayout kLayouts[] = {
    cpu::WeightLayout::kQ8_0,  cpu::WeightLayout::kQ8_0R, cpu::WeightLayout::kQ4_0, cpu::WeightLayout::kQ4_0R,
    cpu::WeightLayout::kQ4_1,  cpu::WeightLayout::kQ5_0,  cpu::WeightLayout::kQ5_1, cpu::WeightLayout::kQ4_K,
    cpu::WeightLayout::kQ4_KR, cpu::WeightLayout::kQ5_K,  cpu::WeightLayout::kQ6_K, cpu::WeightLayout::kQ8_0P};

// rows x cols weights in `layout` (rows of row_bytes + 64 bytes: not the packed stride).
struct Weights {
  std::vector<std::byte> bytes;
  std::vector<std::byte> stored;  // the same rows in the stored layout, for the reference
  std::size_t stride = 0, stored_stride = 0;
  cpu::WeightMatrix matrix(cpu::WeightLayout layout, std::int64_t rows, std::int64_t cols) {
    return {layout, bytes.data(), rows, cols, stride};
  }
};
Weights make_weights(test::Rng& rng, cpu::WeightLayout layout, std::int64_t rows, std::int64_t cols) {
  Weights w;
  const DType type = cpu::stored_type(layout);
  w.stride = cpu::row_bytes(layout, cols) + 64;
  w.stored_stride = row_bytes(type, cols);
  w.bytes.assign(w.stride * static_cast<std::size_t>(rows), std::byte{0xA5});
  w.stored.resize(w.stored_stride * static_cast<std::size_t>(rows));
  std::vector<float> src(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float scale = std::exp2(rng.uniform(-4.0f, 2.0f));
    for (auto& v : src) v = rng.normal() * scale;
    if (!cpu::is_tiled(layout))
      cpu::quantize_row(layout, src.data(), w.bytes.data() + static_cast<std::size_t>(r) * w.stride, cols);
    quantize_row(type, src.data(), w.stored.data() + static_cast<std::size_t>(r) * w.stored_stride, cols);
  }
  if (cpu::is_tiled(layout)) {  // rows interleaved in tiles: converted as a whole matrix
    cpu::CpuContext ctx(1, cpu::Isa::kGeneric, true);
    cpu::copy_to_layout(ctx, {cpu::stored_layout(type), w.stored.data(), rows, cols, w.stored_stride}, layout,
                        w.bytes.data(), w.stride);
  }
  return w;
}

// 2^-3 .. 2^3, the block magnitudes make_activations cycles through (exp2 per element was a
// tenth of this file's run time).
constexpr float kBlockScales[7] = {0.125f, 0.25f, 0.5f, 1.0f, 2.0f, 4.0f, 8.0f};

// m activation rows of `cols`, block scales spread over 2^-3 .. 2^3, a few large outliers, no
// all-zero block.
std::vector<float> make_activations(test::Rng& rng, std::int64_t m, std::int64_t cols) {
  std::vector<float> x(static_cast<std::size_t>(m * cols));
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = rng.paired_normal() * kBlockScales[static_cast<std::size_t>((i / 32) % 7)];
    if (rng.uniform(0.0f, 1.0f) < 0.004f) x[i] = rng.uniform(20.0f, 60.0f) * (rng.uniform(0.0f, 1.0f) < 0.5f ? -1.0f : 1.0f);
  }
  return x;
}

// Whether decode takes an integer kernel for w at ctx's level (the repacked layouts have them only
// where the resident weights use them: Q8_0R / Q4_0R at avx512vnni, Q4_KR with VBMI); the others
// stay float, m == 1 and m > 1 alike, and are matmul_test's.
bool has_int8_decode(const cpu::CpuContext& ctx, const cpu::WeightMatrix& w) {
  return cpu::matmul_shared_bytes(ctx, w, 1) > 0;
}

// The largest m the int8 GEMM takes for `layout` in ctx.
std::int64_t int8_max_m(const cpu::CpuContext& ctx, cpu::WeightLayout layout) {
  return ctx.batch_invariant() ? std::int64_t{1} << 30 : cpu::detail::qgemm_max_m(ctx.isa(), layout);
}

// Q8_0 / Q8_0R at avx512vnni: batches scale whole-block sums over whole 16-row tiles
// (qgemm_q8_block_sums_avx512vnni.cpp), as batch-invariant mode's one-row kernel does, while the
// default mode's one row keeps the decode kernel's 4-level partials. So there the m-row outputs
// equal the batch-invariant one-row result bit for bit, not the default one's. (Q8_0P's one row
// scales block sums in both modes.)
bool block_sum_batches(cpu::Isa isa, cpu::WeightLayout layout) {
  return isa == cpu::Isa::kAvx512Vnni && (layout == cpu::WeightLayout::kQ8_0 || layout == cpu::WeightLayout::kQ8_0R);
}

cpu::CpuContext int8_context(cpu::Isa isa, int threads, bool batch_invariant = false) {
  cpu::CpuContext ctx(threads, isa, /*int8_activations=*/true);
  REQUIRE(ctx.isa() == isa);
  ctx.set_batch_invariant(batch_invariant);
  return ctx;
}

// y (m x rows, ldy = rows + 3) of x (m x cols) through cpu::matmul.
std::vector<float> run(cpu::CpuContext& ctx, const cpu::WeightMatrix& w, const float* x, std::int64_t m) {
  const std::int64_t ldy = w.rows + 3;
  ctx.reserve_shared_bytes(cpu::matmul_shared_bytes(ctx, w, m));
  ctx.reserve_scratch(cpu::matmul_scratch_floats(w, m));
  std::vector<float> y(static_cast<std::size_t>(m * ldy), -7.0f);
  cpu::matmul(ctx, w, x, w.cols, m, y.data(), ldy);
  return y;
}

// Bitwise: row i of the m-row product against the m == 1 product of x row i.
void require_rows_equal_decode(cpu::CpuContext& ctx, const cpu::WeightMatrix& w, const std::vector<float>& x,
                               std::int64_t m, const std::vector<float>& y) {
  const std::int64_t ldy = w.rows + 3;
  for (std::int64_t i = 0; i < m; ++i) {
    const std::vector<float> one = run(ctx, w, x.data() + i * w.cols, 1);
    for (std::int64_t r = 0; r < w.rows; ++r) {
      const float got = y[static_cast<std::size_t>(i * ldy + r)], want = one[static_cast<std::size_t>(r)];
      if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want)) {
        CAPTURE(i, r, got, want);
        FAIL("m-row int8 GEMM output differs from the m == 1 decode result");
      }
    }
    for (std::int64_t r = w.rows; r < ldy; ++r) REQUIRE(y[static_cast<std::size_t>(i * ldy + r)] == -7.0f);
  }
}

// Double reference from the stored levels and the quantized rows: sum_b d_w d_x sum_k w_k q_k,
// with the exact integer block sums; tolerance for the kernels' float steps (the scale products
// and one FMA per block, accumulated over nb blocks) on the magnitudes qdot_test uses (levels plus
// twice the largest offset a kernel may fold into its lanes).
void check_reference(cpu::Isa isa, cpu::WeightLayout layout, const Weights& wts, std::int64_t rows, std::int64_t cols,
                     const std::vector<float>& x, std::int64_t m, const std::vector<float>& y) {
  const DType type = cpu::stored_type(layout);
  if (type != DType::kQ8_0 && type != DType::kQ4_0) return;  // Q4_1 / Q4_K: qdot_test covers their decode
  const std::int64_t nb = cols / kQBlock, ldy = rows + 3;
  std::vector<std::byte> buffer(cpu::detail::quantized_row_bytes(cols) + 64);
  auto* aligned = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(buffer.data()) + 63) / 64 * 64);
  std::vector<double> want(static_cast<std::size_t>(rows)), tol(want.size());
  std::vector<float> got(want.size());
  for (std::int64_t i = 0; i < m; ++i) {
    const cpu::detail::QuantizedRow q = cpu::detail::qdot_kernels_for(isa).quantize(x.data() + i * cols, cols, aligned);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::byte* row = wts.stored.data() + static_cast<std::size_t>(r) * wts.stored_stride;
      double sum = 0.0, mag = 0.0;
      for (std::int64_t b = 0; b < nb; ++b) {
        std::int64_t dot = 0, dot_mag = 0;  // dot_mag: sum |w_k + 128| |q_k| (any ISA's offset folding)
        std::uint16_t dh;
        if (type == DType::kQ8_0) {
          const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
          std::memcpy(&dh, &blk->d, 2);
          for (int k = 0; k < kQBlock; ++k) {
            dot += std::int64_t{blk->qs[k]} * q.qs[b * kQBlock + k];
            dot_mag += (std::abs(int{blk->qs[k]}) + 256) * std::abs(int{q.qs[b * kQBlock + k]});
          }
        } else {
          const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
          std::memcpy(&dh, &blk->d, 2);
          for (int k = 0; k < kQBlock; ++k) {
            const int u = k < 16 ? blk->qs[k] & 15 : blk->qs[k - 16] >> 4;
            dot += std::int64_t{u - 8} * q.qs[b * kQBlock + k];
            dot_mag += (std::abs(u - 8) + 16) * std::abs(int{q.qs[b * kQBlock + k]});
          }
        }
        const double scale = static_cast<double>(fp16_to_fp32(dh)) * static_cast<double>(q.d[b]);
        sum += scale * static_cast<double>(dot);
        mag += std::fabs(scale) * static_cast<double>(dot_mag);
      }
      want[static_cast<std::size_t>(r)] = sum;
      tol[static_cast<std::size_t>(r)] = test::dot_tolerance(2 * nb, mag, 4);
      got[static_cast<std::size_t>(r)] = y[static_cast<std::size_t>(i * ldy + r)];
    }
    CAPTURE(i);
    test::check_close(want, got, tol, "int8 GEMM vs its exact integer reference");
  }
}

}  // namespace

SITSRT_ISA_TEST_CASE(isa, "int8 GEMM rows equal the m == 1 decode bit for bit and match the integer reference",
                     "[qdot][qgemm][matmul]", kIsas) {
  const cpu::WeightLayout layout = GENERATE(from_range(std::begin(kLayouts), std::end(kLayouts)));
  const int threads = GENERATE(1, 2);
  if (test::kSanitized && threads == 1) return;  // support/sanitizer.hpp
  CAPTURE(cpu::name(layout), cpu::name(isa), threads);
  cpu::CpuContext ctx = int8_context(isa, threads);
  // The one-row products the batches must equal (block_sum_batches).
  cpu::CpuContext one_row = int8_context(isa, threads, block_sum_batches(isa, layout));
  test::Rng rng(static_cast<std::uint64_t>(static_cast<int>(layout) * 131 + threads));
  // rows: below, at and past the 4-row tile and the 16-row grain; cols: 1, 3, 17, 33, 88 blocks
  // (not multiples of the 4-block quads or 16-block units) and a Q4_K multiple of 256.
  for (const std::int64_t rows : {1, 5, 18, 67}) {
    for (const std::int64_t cols : {32, 96, 544, 1056, 2816, 768}) {
      if (!cpu::fits_blocks(layout, cols) || (test::kSanitized && cols == 2816)) continue;
      Weights wts = make_weights(rng, layout, rows, cols);
      const cpu::WeightMatrix w = wts.matrix(layout, rows, cols);
      if (!has_int8_decode(ctx, w)) return;
      // m: every remainder of the 2 x 3 (avx2) and 2 x 4 / 4 x 4 (avx512vnni) tiles, around the
      // 32-row passes of matmul's qgemm and kQgemmPerRowMaxM.
      for (const std::int64_t m : {2, 3, 4, 5, 6, 7, 8, 9, 17, 33, 34, 63, 64, 65, 67, 100}) {
        if (m > int8_max_m(ctx, layout)) continue;
        CAPTURE(rows, cols, m);
        const std::vector<float> x = make_activations(rng, m, cols);
        const std::vector<float> y = run(ctx, w, x.data(), m);
        require_rows_equal_decode(one_row, w, x, m, y);
        check_reference(isa, layout, wts, rows, cols, x, m, y);
      }
    }
  }
}

SITSRT_ISA_TEST_CASE(isa, "int8 GEMM outputs do not depend on m, the companion rows or the thread count",
                     "[qdot][qgemm][matmul]", kIsas) {
  const cpu::WeightLayout layout = GENERATE(from_range(std::begin(kLayouts), std::end(kLayouts)));
  // Batch-invariant mode: every m takes the int8 GEMM (past qgemm_max_m too).
  const bool invariant = GENERATE(false, true);
  CAPTURE(cpu::name(layout), cpu::name(isa), invariant);
  cpu::CpuContext one = int8_context(isa, 1, invariant), two = int8_context(isa, 2, invariant);
  test::Rng rng(static_cast<std::uint64_t>(static_cast<int>(layout) * 977 + 5));
  const std::int64_t rows = 83, cols = 1280;  // 40 blocks: 2.5 Q4 units, 10 Q8 quads
  Weights wts = make_weights(rng, layout, rows, cols);
  const cpu::WeightMatrix w = wts.matrix(layout, rows, cols);
  if (!has_int8_decode(one, w)) return;
  const std::vector<float> probe = make_activations(rng, 1, cols);
  // With block_sum_batches outside batch-invariant mode, batches equal the invariant one-row
  // product (m == 1 itself differs by rounding and is skipped).
  const bool block_sums_only = block_sum_batches(isa, layout) && !invariant;
  cpu::CpuContext reference = int8_context(isa, 1, invariant || block_sums_only);
  const std::vector<float> alone = run(reference, w, probe.data(), 1);
  // The probe row at each position of batches of every size 1..67, with fresh companions, on 1
  // and 2 threads: always the same bits as alone.
  for (const std::int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33, 63, 64, 65, 67, 100}) {
    if (m > int8_max_m(one, layout) || (block_sums_only && m == 1)) continue;
    for (const std::int64_t at : {std::int64_t{0}, m / 2, m - 1}) {
      std::vector<float> x = make_activations(rng, m, cols);
      std::copy(probe.begin(), probe.end(), x.begin() + at * cols);
      for (cpu::CpuContext* ctx : {&one, &two}) {
        CAPTURE(m, at, ctx->threads());
        const std::vector<float> y = run(*ctx, w, x.data(), m);
        for (std::int64_t r = 0; r < rows; ++r) {
          const float got = y[static_cast<std::size_t>(at * (rows + 3) + r)], want = alone[static_cast<std::size_t>(r)];
          if (std::bit_cast<std::uint32_t>(got) != std::bit_cast<std::uint32_t>(want)) {
            CAPTURE(r, got, want);
            FAIL("the probe row's output changed with m, its companions or the thread count");
          }
        }
      }
    }
  }
}

namespace {
const cpu::Isa kAmxOnly[] = {cpu::Isa::kAmx};
}

// At the amx level outside batch-invariant mode, Q8_0 / Q8_0R batches of kQgemmAmxMinM rows or
// more run on AMX-INT8 tiles (qgemm_amx.cpp): whole-block integer sums, so the outputs differ
// from the one-row decode by float rounding only and must meet the same integer reference;
// weight rows past the last 16-row tile take the VNNI kernel. Batch-invariant mode takes the tiles
// for every row count, one row included: each row's outputs equal its one-row product bit for bit,
// and the default mode's where that takes the tiles too.
SITSRT_ISA_TEST_CASE(isa, "AMX-INT8 GEMM of Q8_0 matches the integer reference; batch-invariant mode stays bitwise",
                     "[qdot][qgemm][matmul][amx]", kAmxOnly) {
  // Q8_0P: the tiles read its blocks as their B operand (activations as A, in place).
  const cpu::WeightLayout layout =
      GENERATE(cpu::WeightLayout::kQ8_0, cpu::WeightLayout::kQ8_0R, cpu::WeightLayout::kQ8_0P);
  const int threads = GENERATE(1, 2);
  CAPTURE(cpu::name(layout), threads);
  cpu::CpuContext ctx = int8_context(isa, threads), invariant = int8_context(isa, threads, true);
  test::Rng rng(static_cast<std::uint64_t>(static_cast<int>(layout) * 71 + threads));
  for (const std::int64_t rows : {5, 16, 18, 67}) {
    for (const std::int64_t cols : {32, 96, 1056, 2816}) {
      Weights wts = make_weights(rng, layout, rows, cols);
      const cpu::WeightMatrix w = wts.matrix(layout, rows, cols);
      for (const std::int64_t m : {1, 2, 3, 4, 5, 16, 17, 33, 64}) {
        CAPTURE(rows, cols, m);
        const std::vector<float> x = make_activations(rng, m, cols);
        const std::vector<float> y = run(ctx, w, x.data(), m);
        check_reference(isa, layout, wts, rows, cols, x, m, y);
        for (std::int64_t i = 0; i < m; ++i) {
          for (std::int64_t r = rows; r < rows + 3; ++r) REQUIRE(y[static_cast<std::size_t>(i * (rows + 3) + r)] == -7.0f);
        }
        if (m > 17) continue;
        const std::vector<float> yi = run(invariant, w, x.data(), m);
        check_reference(isa, layout, wts, rows, cols, x, m, yi);
        require_rows_equal_decode(invariant, w, x, m, yi);
        if (m >= 2) {  // (2-7 rows: the VNNI block-sum or panel kernels, with the same bits)
          for (std::size_t k = 0; k < y.size(); ++k) {
            if (std::bit_cast<std::uint32_t>(y[k]) != std::bit_cast<std::uint32_t>(yi[k])) {
              CAPTURE(k, y[k], yi[k]);
              FAIL("batch-invariant AMX-INT8 output differs from the default mode's tiles");
            }
          }
        }
      }
    }
  }
}
