// The repacked FP8 layout (cpu::WeightLayout::kFP8_E4M3R, cpu/repacked_blocks.hpp) and its AVX512-FP16
// decode (cpu/matmul/matvec_fp8r_avx512fp16.cpp): the documented bytes, exact scale splits (and the
// fallback to stored FP8 where none exists), prefill and lookups bit-identical to stored FP8,
// and decode against a double reference within the fp16 bound, at the extremes of its range.
#include "core/dtype.hpp"
#include "core/half.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/matmul/matmul.hpp"
#include "cpu/matmul/matmul_kernels.hpp"
#include "cpu/matmul/matvec_group.hpp"
#include "cpu/repacked_blocks.hpp"
#include "cpu/weight_layout.hpp"
#include "support/isa.hpp"
#include "support/random.hpp"
#include "support/same_layout_results.hpp"
#include "support/tolerance.hpp"

#include <catch2/catch.hpp>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace sitsrt;
using cpu::WeightLayout;

namespace {

// Encoder rows (FP8, 11-bit scales) of random normals with a per-block scale spanning 2^-8..2^4
// (an exact split needs a group's scales within fp16's normal range, 2^14, of its largest), one
// all-zero block per row when there are several.
std::vector<BlockFP8_E4M3> encoded_rows(std::int64_t rows, std::int64_t nb, test::Rng& rng) {
  const std::int64_t cols = nb * kFp8Block;
  std::vector<BlockFP8_E4M3> blocks(static_cast<std::size_t>(rows * nb));
  std::vector<float> src(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    float scale = 1.0f;
    for (std::int64_t c = 0; c < cols; ++c) {
      if (c % kFp8Block == 0) scale = std::exp2(rng.uniform(-8.0f, 4.0f));
      const float v = rng.normal() * scale;
      src[static_cast<std::size_t>(c)] = v == 0.0f ? scale : v;
    }
    if (nb > 2) std::fill(src.begin() + kFp8Block, src.begin() + 2 * kFp8Block, 0.0f);
    quantize_row(DType::kFP8_E4M3, src.data(), blocks.data() + r * nb, cols);
  }
  return blocks;
}

const std::byte* bytes_of(const std::vector<BlockFP8_E4M3>& blocks) {
  return reinterpret_cast<const std::byte*>(blocks.data());
}

// Block counts: one block, partial and whole groups, a last group of one block.
constexpr std::int64_t kBlockCounts[] = {1, 2, 3, 15, 16, 17, 18, 31, 44, 45, 64};

}  // namespace

TEST_CASE("fp8r bytes are where docs/quantization.md puts them", "[fp8r]") {
  for (const std::int64_t nb : {18, 17}) {  // a last group of 2 blocks, and of 1
    CAPTURE(nb);
    test::Rng rng(5);
    std::vector<BlockFP8_E4M3> blocks(static_cast<std::size_t>(nb));
    for (BlockFP8_E4M3& b : blocks) {
      b.d = std::ldexp(static_cast<float>(rng.uniform_int(1024, 2047)), rng.uniform_int(-30, -18));  // 11 bits
      for (auto& q : b.qs) q = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
    }
    std::vector<std::uint8_t> packed(blocks.size() * sizeof(BlockFP8_E4M3), 0xAB);
    REQUIRE(cpu::repack_row_fp8(blocks.data(), reinterpret_cast<std::byte*>(packed.data()), nb));
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t g = b / 16, i = b % 16, t = std::min<std::int64_t>(16, nb - 16 * g);
      const std::size_t group = static_cast<std::size_t>(g) * 1088;
      CAPTURE(b, t);
      // Each code s e3 e2 e1 e0 m2 m1 m0 stored as s m0 e3 e2 e1 e0 m2 m1.
      for (int e = 0; e < 64; ++e) {
        const unsigned c = blocks[b].qs[e];
        CHECK(packed[group + 64 * i + e] == ((c & 0x80u) | (c & 1u) << 6 | (c & 0x7Eu) >> 1));
      }
      float s;
      std::memcpy(&s, &packed[group + 64 * t], 4);
      if (t == 1) {
        CHECK(std::bit_cast<std::uint32_t>(s) == std::bit_cast<std::uint32_t>(blocks[b].d));
        continue;
      }
      std::uint16_t r;
      std::memcpy(&r, &packed[group + 64 * t + 4 + 2 * i], 2);
      CHECK(s * fp16_to_fp32(r) == blocks[b].d);
      CHECK(std::fabs(fp16_to_fp32(r)) <= 1.0f);
      int e = 0;
      CHECK(std::frexp(s, &e) == 0.5f);  // encoder scales: s is a power of two
      for (std::int64_t z = 64 * t + 4 + 2 * t; z < 68 * t; ++z) CHECK(packed[group + z] == 0);
    }
  }
}

TEST_CASE("fp8r rows round-trip encoder and per-channel scales exactly; others stay fp8", "[fp8r]") {
  test::Rng rng(7);
  CHECK(cpu::repacked_layout(DType::kFP8_E4M3) == WeightLayout::kFP8_E4M3R);
  CHECK(cpu::stored_type(WeightLayout::kFP8_E4M3R) == DType::kFP8_E4M3);
  CHECK(cpu::row_bytes(WeightLayout::kFP8_E4M3R, kFp8Block) == 68);
  for (const std::int64_t nb : kBlockCounts) {
    CAPTURE(nb);
    const std::int64_t cols = nb * kFp8Block;
    const std::size_t bytes = row_bytes(DType::kFP8_E4M3, cols);
    std::vector<BlockFP8_E4M3> blocks = encoded_rows(1, nb, rng);
    std::vector<std::byte> packed(bytes);
    std::vector<BlockFP8_E4M3> back(static_cast<std::size_t>(nb));
    REQUIRE(cpu::repack_row_fp8(blocks.data(), packed.data(), nb));
    cpu::unpack_row_fp8r(packed.data(), back.data(), nb);
    CHECK(std::memcmp(back.data(), blocks.data(), bytes) == 0);
    std::vector<float> want(static_cast<std::size_t>(cols)), got(want.size());
    dequantize_row(DType::kFP8_E4M3, blocks.data(), want.data(), cols);
    cpu::dequantize_row(WeightLayout::kFP8_E4M3R, packed.data(), got.data(), cols);
    CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);

    // quantize_row into FP8R = the stored encoding, repacked.
    std::vector<float> x = rng.normals(static_cast<std::size_t>(cols));
    std::vector<BlockFP8_E4M3> q(static_cast<std::size_t>(nb));
    std::vector<std::byte> direct(bytes), expect(bytes);
    quantize_row(DType::kFP8_E4M3, x.data(), q.data(), cols);
    cpu::quantize_row(WeightLayout::kFP8_E4M3R, x.data(), direct.data(), cols);
    CHECK(cpu::repack_row_fp8(q.data(), expect.data(), nb));
    CHECK(direct == expect);

    // Per-channel checkpoints repeat one arbitrary fp32 scale per block: exact with s = d.
    for (BlockFP8_E4M3& b : blocks) b.d = 0.0123456789f;
    REQUIRE(cpu::repack_row_fp8(blocks.data(), packed.data(), nb));
    cpu::unpack_row_fp8r(packed.data(), back.data(), nb);
    CHECK(std::memcmp(back.data(), blocks.data(), bytes) == 0);

    // Scales 2^15 apart in a group: the smaller one's r would be an fp16 subnormal.
    if (nb > 1) {
      for (BlockFP8_E4M3& b : blocks) b.d = 0x1p-3f;
      blocks[1].d = 0x1.234p-18f;
      CHECK_FALSE(cpu::repack_row_fp8(blocks.data(), packed.data(), nb));
    }
    // Different 24-bit scales within a group have no exact split (one-block rows always do).
    for (BlockFP8_E4M3& b : blocks) b.d = 0.0123456789f * rng.uniform(1.0f, 3.0f);
    CHECK(cpu::repack_row_fp8(blocks.data(), packed.data(), nb) == (nb == 1));
  }
}

SITSRT_ISA_TEST_CASE(isa, "fp8r resident layout: only with the fp16 decode kernel", "[fp8r]", test::kAllIsas) {
  const cpu::CpuContext ctx(2, isa);
  const bool native = cpu::detail::fp8r_decode_native(isa);
  CHECK(native == (isa >= cpu::Isa::kAvx512 && cpu::detail::avx512_fp16_supported()));
  CHECK(cpu::resident_layout(ctx, DType::kFP8_E4M3, true) ==
        (native ? WeightLayout::kFP8_E4M3R : WeightLayout::kFP8_E4M3));
  CHECK(cpu::resident_layout(ctx, DType::kFP8_E4M3, false) == WeightLayout::kFP8_E4M3);  // a lookup-only table
}

TEST_CASE("fp8r resident layout: only when exact", "[fp8r]") {
  CHECK(cpu::resident_row_stride(WeightLayout::kFP8_E4M3R, 2816) == 3008);  // 44 * 68 = 2992 rounded to a line

  test::Rng rng(9);
  cpu::CpuContext ctx(3, cpu::Isa::kGeneric);
  constexpr std::int64_t kRows = 37, nb = 44, cols = nb * kFp8Block;
  std::vector<BlockFP8_E4M3> blocks = encoded_rows(kRows, nb, rng);
  const cpu::WeightMatrix w{WeightLayout::kFP8_E4M3, bytes_of(blocks), kRows, cols, row_bytes(DType::kFP8_E4M3, cols)};
  const std::size_t stride = cpu::resident_row_stride(WeightLayout::kFP8_E4M3R, cols);
  std::vector<std::byte> dst(stride * kRows, std::byte{0xCD});
  CHECK(cpu::copy_to_layout(ctx, w, WeightLayout::kFP8_E4M3R, dst.data(), stride) == WeightLayout::kFP8_E4M3R);
  // One row with a scale that has no exact split: the whole weight is copied as stored.
  blocks[static_cast<std::size_t>(20 * nb + 3)].d *= 1.00001f;
  CHECK(cpu::copy_to_layout(ctx, w, WeightLayout::kFP8_E4M3R, dst.data(), stride) == WeightLayout::kFP8_E4M3);
  for (std::int64_t r = 0; r < kRows; ++r) {
    CHECK(std::memcmp(dst.data() + static_cast<std::size_t>(r) * stride, bytes_of(blocks) + static_cast<std::size_t>(r) * w.row_stride,
                      w.row_stride) == 0);
    for (std::size_t z = w.row_stride; z < stride; ++z) CHECK(dst[static_cast<std::size_t>(r) * stride + z] == std::byte{0});
  }
}

SITSRT_ISA_TEST_CASE(isa, "fp8r prefill and row lookups are bit-identical to stored fp8", "[fp8r]",
                     cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAmx) {
  test::Rng rng(23);
  for (const std::int64_t rows : {1, 5, 18}) {
    for (const std::int64_t nb : {1, 17, 44}) {
      const std::int64_t cols = nb * kFp8Block;
      CAPTURE(cpu::name(isa), rows, cols);
      const std::vector<BlockFP8_E4M3> blocks = encoded_rows(rows, nb, rng);
      cpu::CpuContext ctx(2, isa);
      const cpu::WeightMatrix w{WeightLayout::kFP8_E4M3, bytes_of(blocks), rows, cols,
                                row_bytes(DType::kFP8_E4M3, cols)};
      const std::size_t stride = cpu::resident_row_stride(WeightLayout::kFP8_E4M3R, cols);
      std::vector<std::byte> packed(stride * static_cast<std::size_t>(rows));
      REQUIRE(cpu::copy_to_layout(ctx, w, WeightLayout::kFP8_E4M3R, packed.data(), stride) == WeightLayout::kFP8_E4M3R);
      const cpu::WeightMatrix r{WeightLayout::kFP8_E4M3R, packed.data(), rows, cols, stride};
      test::check_same_results(ctx, w, r, {2, 9}, rng);
    }
  }
}

namespace {

// y = W x through cpu::matmul at the AVX-512 level, checked against the double reference of the
// dequantized FP8R rows within float's bound plus the fp16 decode's (tolerance.hpp).
void check_fp16_decode(const std::vector<BlockFP8_E4M3>& blocks, std::int64_t rows, std::int64_t nb,
                       const std::vector<float>& x) {
  const std::int64_t cols = nb * kFp8Block;
  cpu::CpuContext ctx(1, cpu::Isa::kAvx512);
  const cpu::WeightMatrix w{WeightLayout::kFP8_E4M3, bytes_of(blocks), rows, cols, row_bytes(DType::kFP8_E4M3, cols)};
  const std::size_t stride = cpu::resident_row_stride(WeightLayout::kFP8_E4M3R, cols);
  std::vector<std::byte> packed(stride * static_cast<std::size_t>(rows));
  REQUIRE(cpu::copy_to_layout(ctx, w, WeightLayout::kFP8_E4M3R, packed.data(), stride) == WeightLayout::kFP8_E4M3R);
  const cpu::WeightMatrix r{WeightLayout::kFP8_E4M3R, packed.data(), rows, cols, stride};
  ctx.reserve_shared_bytes(cpu::matmul_shared_bytes(ctx, r, 1));
  ctx.reserve_scratch(cpu::matmul_scratch_floats(r, 1));
  std::vector<float> y(static_cast<std::size_t>(rows), -1.0f);
  cpu::matmul(ctx, r, x.data(), cols, 1, y.data(), rows);

  std::vector<double> expected, tolerance;
  std::vector<float> values(static_cast<std::size_t>(cols));
  for (std::int64_t row = 0; row < rows; ++row) {
    const std::byte* bytes = packed.data() + static_cast<std::size_t>(row) * stride;
    cpu::dequantize_row(WeightLayout::kFP8_E4M3R, bytes, values.data(), cols);
    double sum = 0.0, abs_sum = 0.0;
    for (std::int64_t c = 0; c < cols; ++c) {
      sum += static_cast<double>(values[static_cast<std::size_t>(c)]) * x[static_cast<std::size_t>(c)];
      abs_sum += std::fabs(static_cast<double>(values[static_cast<std::size_t>(c)]) * x[static_cast<std::size_t>(c)]);
    }
    expected.push_back(sum);
    tolerance.push_back(test::dot_tolerance(cols, abs_sum, 4) + test::fp8r_fp16_tolerance(bytes, cols, x.data(), abs_sum));
  }
  test::check_close(expected, y, tolerance, "fp8r fp16 decode");
}

}  // namespace

TEST_CASE("fp8r AVX512-FP16 decode matches a double reference within the fp16 bound", "[fp8r][gated]") {
  // Without AVX512-FP16, FP8 stays in its stored layout (matmul_test covers it).
  SITSRT_REQUIRE_ISA(cpu::Isa::kAvx512);
  if (!cpu::detail::fp8r_decode_native(cpu::Isa::kAvx512)) SITSRT_SKIP("this CPU lacks AVX512-FP16");
  test::Rng rng(31);
  for (const std::int64_t nb : {1, 2, 16, 17, 18, 44, 528}) {  // 528 blocks: two 32768-column stretches
    for (const int kind : {0, 1, 2}) {
      CAPTURE(nb, kind);
      const std::int64_t cols = nb * kFp8Block, rows = 13;  // an 8-row pass, a 4-row pass and a single row
      const std::vector<BlockFP8_E4M3> blocks = encoded_rows(rows, nb, rng);
      std::vector<float> x(static_cast<std::size_t>(cols));
      for (std::int64_t c = 0; c < cols; ++c) {
        const float v = rng.normal();
        // 0: normals; 1: values 1e-8 of one 1e4 outlier (about 2^-19 after scaling: fp16
        // subnormals); 2: a scale far from 1 (2^-40)
        x[static_cast<std::size_t>(c)] = kind == 0 ? v : kind == 1 ? v * 1e-4f : v * 0x1p-40f;
      }
      if (kind == 1) x[static_cast<std::size_t>(cols / 3)] = 1e4f;
      check_fp16_decode(blocks, rows, nb, x);
    }
  }
}

TEST_CASE("fp8r AVX512-FP16 decode: largest codes against the largest activations do not overflow", "[fp8r][gated]") {
  SITSRT_REQUIRE_ISA(cpu::Isa::kAvx512);
  if (!cpu::detail::fp8r_decode_native(cpu::Isa::kAvx512)) SITSRT_SKIP("this CPU lacks AVX512-FP16");
  // Every code +-448 against x just under its scaled maximum (0.999 -> 255.75) with r = 1: a
  // group's fp16 lanes reach 16 * 2 * 1.75 * 255.75 = 14322 of fp16's 65504 (a kernel scaling x
  // 8x higher overflows here). Row 0 has every r = 1; row 1 alternates signs, row 2 is all
  // negative, row 3 has subnormal codes in some blocks.
  for (const std::int64_t nb : {16, 44}) {
    const std::int64_t cols = nb * kFp8Block, rows = 4;
    std::vector<BlockFP8_E4M3> blocks(static_cast<std::size_t>(rows * nb));
    for (std::int64_t i = 0; i < rows * nb; ++i) {
      BlockFP8_E4M3& b = blocks[static_cast<std::size_t>(i)];
      const std::int64_t row = i / nb;
      b.d = row == 0 || i % 3 == 0 ? 1.0f : 0.5f;
      for (int j = 0; j < 64; ++j) {
        const std::uint8_t code = row == 3 && (i % 5 == 0) ? static_cast<std::uint8_t>(j % 8) : 0x7E;  // subnormals
        b.qs[j] = static_cast<std::uint8_t>(code | (row == 1 && j % 2 ? 0x80 : 0) | (row == 2 ? 0x80 : 0));
      }
    }
    std::vector<float> x(static_cast<std::size_t>(cols), 0.999f);
    CAPTURE(nb);
    check_fp16_decode(blocks, rows, nb, x);
  }
}

TEST_CASE("fp8r AVX512-FP16 decode propagates inf and NaN activations as float does", "[fp8r][gated]") {
  SITSRT_REQUIRE_ISA(cpu::Isa::kAvx512);
  if (!cpu::detail::fp8r_decode_native(cpu::Isa::kAvx512)) SITSRT_SKIP("this CPU lacks AVX512-FP16");
  test::Rng rng(3);
  constexpr std::int64_t nb = 17, cols = nb * kFp8Block, rows = 2;
  const std::vector<BlockFP8_E4M3> blocks = encoded_rows(rows, nb, rng);
  cpu::CpuContext ctx(1, cpu::Isa::kAvx512);
  const cpu::WeightMatrix w{WeightLayout::kFP8_E4M3, bytes_of(blocks), rows, cols, row_bytes(DType::kFP8_E4M3, cols)};
  const std::size_t packed_stride = row_bytes(WeightLayout::kFP8_E4M3R, cols);
  std::vector<std::byte> packed(packed_stride * rows);
  REQUIRE(cpu::copy_to_layout(ctx, w, WeightLayout::kFP8_E4M3R, packed.data(), packed_stride) ==
          WeightLayout::kFP8_E4M3R);
  const cpu::WeightMatrix r{WeightLayout::kFP8_E4M3R, packed.data(), rows, cols, packed_stride};
  ctx.reserve_shared_bytes(cpu::matmul_shared_bytes(ctx, r, 1));
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = rng.normals(static_cast<std::size_t>(cols));
    x[100] = bad;
    std::vector<float> y(rows);
    cpu::matmul(ctx, r, x.data(), cols, 1, y.data(), rows);
    for (const float v : y) CHECK_FALSE(std::isfinite(v));
  }
}

TEST_CASE("fp8r in a fused product with an int8-activation weight: each as alone", "[fp8r][gated]") {
  // One product may prepare both input rows (int8 for Q8_0R, fp16 for FP8R) in the shared
  // scratch that either weight alone reserves; each output equals its weight's own matmul.
  const cpu::Isa isa = cpu::Isa::kAvx512Vnni;
  SITSRT_REQUIRE_ISA(isa);
  if (!cpu::detail::fp8r_decode_native(isa)) SITSRT_SKIP("this CPU lacks AVX512-FP16");
  test::Rng rng(13);
  constexpr std::int64_t rows = 40, nb = 44, cols = nb * kFp8Block;
  cpu::CpuContext ctx(2, isa, /*int8_activations=*/true);
  const std::vector<BlockFP8_E4M3> fp8 = encoded_rows(rows, nb, rng);
  const std::size_t stride = cpu::resident_row_stride(WeightLayout::kFP8_E4M3R, cols);
  std::vector<std::byte> packed(stride * rows), q8(row_bytes(WeightLayout::kQ8_0R, cols) * rows);
  const cpu::WeightMatrix w{WeightLayout::kFP8_E4M3, bytes_of(fp8), rows, cols, row_bytes(DType::kFP8_E4M3, cols)};
  REQUIRE(cpu::copy_to_layout(ctx, w, WeightLayout::kFP8_E4M3R, packed.data(), stride) == WeightLayout::kFP8_E4M3R);
  const std::vector<float> src = rng.normals(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    cpu::quantize_row(WeightLayout::kQ8_0R, src.data() + r * cols, q8.data() + r * row_bytes(WeightLayout::kQ8_0R, cols),
                      cols);
  }
  const cpu::WeightMatrix a{WeightLayout::kFP8_E4M3R, packed.data(), rows, cols, stride};
  const cpu::WeightMatrix b{WeightLayout::kQ8_0R, q8.data(), rows, cols, row_bytes(WeightLayout::kQ8_0R, cols)};
  const std::array<const cpu::WeightMatrix*, 2> weights{&a, &b};
  ctx.reserve_shared_bytes(cpu::matvec_group_shared_bytes(ctx, weights));
  const std::vector<float> x = rng.normals(static_cast<std::size_t>(cols));
  std::vector<float> ya(rows), yb(rows), alone_a(rows), alone_b(rows);
  const std::array<cpu::MatvecTarget, 2> targets{{{&a, ya.data()}, {&b, yb.data()}}};
  cpu::matvec_group(ctx, targets, x.data());
  cpu::matmul(ctx, a, x.data(), cols, 1, alone_a.data(), rows);
  cpu::matmul(ctx, b, x.data(), cols, 1, alone_b.data(), rows);
  CHECK(ya == alone_a);
  CHECK(yb == alone_b);
}
