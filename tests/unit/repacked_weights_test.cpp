// Repacked Q8_0 / Q4_0 layouts (cpu/repacked_blocks.hpp) and the CPU backend's resident
// weights (cpu/weight_layout.hpp): the documented bytes, lossless round trips, and decode,
// prefill and row lookups that give the stored layout's results bit for bit.
#include "core/dtype.hpp"
#include "core/half.hpp"
#include "core/quant_blocks.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/matmul/matmul.hpp"
#include "cpu/qdot/qdot_kernels.hpp"
#include "cpu/repacked_blocks.hpp"
#include "cpu/weight_layout.hpp"
#include "support/isa.hpp"
#include "support/random.hpp"
#include "support/same_layout_results.hpp"
#include "support/tolerance.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

using namespace sitsrt;
using cpu::WeightLayout;

namespace {

// Rows of random blocks in the stored format (normal values with a per-block scale), row
// stride = the row's bytes.
std::vector<std::byte> stored_rows(DType type, std::int64_t rows, std::int64_t cols, test::Rng& rng) {
  const std::size_t stride = row_bytes(type, cols);
  std::vector<std::byte> bytes(stride * static_cast<std::size_t>(rows));
  std::vector<float> src(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    float scale = 1.0f;
    for (std::int64_t c = 0; c < cols; ++c) {
      if (c % 32 == 0) scale = std::exp2(rng.uniform(-4.0f, 2.0f));
      const float v = rng.normal() * scale;
      src[static_cast<std::size_t>(c)] = v == 0.0f ? scale : v;
    }
    quantize_row(type, src.data(), bytes.data() + static_cast<std::size_t>(r) * stride, cols);
  }
  return bytes;
}

// Block counts that exercise one and several groups, partial last groups, and every remainder
// of a last group's blocks mod 4.
constexpr std::int64_t kBlockCounts[] = {1, 2, 3, 4, 5, 7, 31, 32, 33, 35, 36, 38, 64, 88, 97};

}  // namespace

TEST_CASE("repacked rows round-trip the stored blocks and decode to the same values", "[repacked]") {
  const DType stored = GENERATE(DType::kQ8_0, DType::kQ4_0);
  const WeightLayout repacked = cpu::repacked_layout(stored);
  REQUIRE(cpu::is_repacked(repacked));
  CHECK(cpu::stored_type(repacked) == stored);
  CHECK(cpu::row_bytes(repacked, 32) == row_bytes(stored, 32));
  test::Rng rng(7);
  for (const std::int64_t nb : kBlockCounts) {
    CAPTURE(name(stored), nb);
    const std::int64_t cols = nb * 32;
    const std::vector<std::byte> blocks = stored_rows(stored, 1, cols, rng);
    std::vector<std::byte> packed(blocks.size(), std::byte{0xAB}), back(blocks.size());
    if (stored == DType::kQ8_0) {
      cpu::repack_row_q8_0(reinterpret_cast<const BlockQ8_0*>(blocks.data()), packed.data(), nb);
      cpu::unpack_row_q8_0r(packed.data(), reinterpret_cast<BlockQ8_0*>(back.data()), nb);
    } else {
      cpu::repack_row_q4_0(reinterpret_cast<const BlockQ4_0*>(blocks.data()), packed.data(), nb);
      cpu::unpack_row_q4_0r(packed.data(), reinterpret_cast<BlockQ4_0*>(back.data()), nb);
    }
    CHECK(back == blocks);
    CHECK(packed != blocks);  // it is a different layout

    std::vector<float> want(static_cast<std::size_t>(cols)), got(static_cast<std::size_t>(cols));
    dequantize_row(stored, blocks.data(), want.data(), cols);
    cpu::dequantize_row(repacked, packed.data(), got.data(), cols);
    CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);

    // quantize_row of the repacked format = the stored quantizer, repacked.
    std::vector<float> x = rng.normals(static_cast<std::size_t>(cols));
    std::vector<std::byte> q_stored(blocks.size()), q_repacked(blocks.size());
    quantize_row(stored, x.data(), q_stored.data(), cols);
    cpu::quantize_row(repacked, x.data(), q_repacked.data(), cols);
    std::vector<std::byte> expect(blocks.size());
    if (stored == DType::kQ8_0) {
      cpu::repack_row_q8_0(reinterpret_cast<const BlockQ8_0*>(q_stored.data()), expect.data(), nb);
    } else {
      cpu::repack_row_q4_0(reinterpret_cast<const BlockQ4_0*>(q_stored.data()), expect.data(), nb);
    }
    CHECK(q_repacked == expect);
  }
}

TEST_CASE("repacked bytes are where docs/quantization.md puts them", "[repacked]") {
  // 53 blocks: one whole group and a last group of 21 (Q4_0R: units of 16 and 5 blocks).
  constexpr std::int64_t nb = 53;
  test::Rng rng(11);
  std::vector<BlockQ4_0> q4(nb);
  std::vector<BlockQ8_0> q8(nb);
  for (std::int64_t b = 0; b < nb; ++b) {
    q4[b].d = q8[b].d = static_cast<std::uint16_t>(0x3000 + b);
    for (auto& v : q4[b].qs) v = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
    for (auto& v : q8[b].qs) v = static_cast<std::int8_t>(rng.uniform_int(-128, 127));
  }
  std::vector<std::uint8_t> p4(nb * 18), p8(nb * 34);
  cpu::repack_row_q4_0(q4.data(), reinterpret_cast<std::byte*>(p4.data()), nb);
  cpu::repack_row_q8_0(q8.data(), reinterpret_cast<std::byte*>(p8.data()), nb);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int64_t g = b / 32, i = b % 32, t = g == 0 ? 32 : nb - 32;
    // Q8_0R: levels q ^ 0x80 at 32 i of the group, scales after the group's levels.
    for (int e = 0; e < 32; ++e) CHECK(p8[g * 32 * 34 + 32 * i + e] == (static_cast<std::uint8_t>(q8[b].qs[e]) ^ 0x80));
    std::uint16_t d8, d4;
    std::memcpy(&d8, &p8[g * 32 * 34 + 32 * t + 2 * i], 2);
    std::memcpy(&d4, &p4[g * 32 * 18 + 16 * t + 2 * i], 2);
    CHECK(d8 == q8[b].d);
    CHECK(d4 == q4[b].d);
    // Q4_0R: units of n blocks (16, and the rest at the row's end) at 256 bytes per 16 blocks,
    // word j (qs bytes 4j..4j+3) of the unit's block k at 4 (n j + k).
    const std::int64_t unit = i / 16, n = std::min<std::int64_t>(16, t - 16 * unit), k = i % 16;
    for (int e = 0; e < 16; ++e) CHECK(p4[g * 32 * 18 + 256 * unit + 4 * (n * (e / 4) + k) + e % 4] == q4[b].qs[e]);
  }
}

TEST_CASE("resident layout: repacked only for matmuls with an integer kernel for it", "[repacked]") {
  const cpu::CpuContext generic(1, cpu::Isa::kGeneric, true);
  CHECK(cpu::resident_layout(generic, DType::kQ8_0, true) == WeightLayout::kQ8_0);
  CHECK(cpu::resident_row_stride(WeightLayout::kQ8_0, 2816) == 88 * 34);
  CHECK(cpu::resident_row_stride(WeightLayout::kQ4_0R, 2816) == 1600);  // 1584 rounded to a cache line
}

TEST_CASE("resident layout at avx512vnni: repacked for matmuls with int8 activations", "[repacked][gated]") {
  SITSRT_REQUIRE_ISA(cpu::Isa::kAvx512Vnni);
  const cpu::CpuContext vnni(1, cpu::Isa::kAvx512Vnni, true), vnni_float(1, cpu::Isa::kAvx512Vnni, false);
  CHECK(cpu::resident_layout(vnni, DType::kQ8_0, true) == WeightLayout::kQ8_0P);  // 16-row tiles
  CHECK(cpu::resident_layout(vnni, DType::kQ4_0, true) == WeightLayout::kQ4_0R);
  CHECK(cpu::resident_layout(vnni, DType::kQ4_0, false) == WeightLayout::kQ4_0);  // a lookup-only table
  CHECK(cpu::resident_layout(vnni, DType::kQ4_1, true) == WeightLayout::kQ4_1);
  CHECK(cpu::resident_layout(vnni, DType::kF16, true) == WeightLayout::kF16);
  CHECK(cpu::resident_layout(vnni_float, DType::kQ8_0, true) == WeightLayout::kQ8_0);  // float activations
  if (test::isa_supported(cpu::Isa::kAmx)) {  // the tiles take a Q8_0P block as their B operand
    const cpu::CpuContext amx(1, cpu::Isa::kAmx, true);
    CHECK(cpu::resident_layout(amx, DType::kQ8_0, true) == WeightLayout::kQ8_0P);
  }
}

TEST_CASE("Q8_0P tiles hold the stored rows where docs/quantization.md puts them", "[repacked]") {
  test::Rng rng(13);
  for (const std::int64_t nb : {1, 3, 32, 53, 88}) {
    CAPTURE(nb);
    // 16 rows of blocks with distinct scales, stride = row bytes + 6 (rows need not be aligned).
    const std::size_t row = static_cast<std::size_t>(nb) * sizeof(BlockQ8_0), stride = row + 6;
    std::vector<std::byte> src(16 * stride, std::byte{0x5A});
    for (int r = 0; r < 16; ++r) {
      auto* blocks = reinterpret_cast<BlockQ8_0*>(src.data() + static_cast<std::size_t>(r) * stride);
      for (std::int64_t b = 0; b < nb; ++b) {
        const auto d = static_cast<std::uint16_t>(0x3000 + 97 * r + b);
        std::memcpy(&blocks[b].d, &d, 2);
        for (auto& v : blocks[b].qs) v = static_cast<std::int8_t>(rng.uniform_int(-128, 127));
      }
    }
    std::vector<std::uint8_t> tile(16 * row);
    cpu::repack_tile_q8_0p(src.data(), stride, reinterpret_cast<std::byte*>(tile.data()), nb);
    for (int r = 0; r < 16; ++r) {
      const auto* blocks = reinterpret_cast<const BlockQ8_0*>(src.data() + static_cast<std::size_t>(r) * stride);
      for (std::int64_t b = 0; b < nb; ++b) {
        // group g of t blocks at 16 * 32 * 34 g: t x 512 level bytes, then t x 32 scale bytes
        const std::int64_t g = b / 32, i = b % 32, t = std::min<std::int64_t>(32, nb - 32 * g);
        const std::size_t at = static_cast<std::size_t>(16 * 32 * 34 * g);
        for (int e = 0; e < 32; ++e) {
          CHECK(tile[at + 512 * i + 64 * (e / 4) + 4 * r + e % 4] ==
                (static_cast<std::uint8_t>(blocks[b].qs[e]) ^ 0x80));
        }
        std::uint16_t d;
        std::memcpy(&d, &tile[at + 512 * t + 32 * i + 2 * r], 2);
        CHECK(d == blocks[b].d);
      }
      std::vector<BlockQ8_0> back(static_cast<std::size_t>(nb));
      cpu::unpack_tile_row_q8_0p(reinterpret_cast<const std::byte*>(tile.data()), r, back.data(), nb);
      CHECK(std::memcmp(back.data(), blocks, row) == 0);
    }
  }
  // Its rows have no bytes of their own: the row-wise conversions refuse it by name.
  std::vector<float> x(64, 1.0f);
  std::vector<std::byte> out(68);
  CHECK_THROWS_WITH(cpu::quantize_row(WeightLayout::kQ8_0P, x.data(), out.data(), 64), Catch::Contains("q8_0p"));
}

TEST_CASE("Q8_0P needs the int8 AVX-512 VNNI kernels: elsewhere matmul refuses it by name", "[repacked]") {
  test::Rng rng(17);
  const std::int64_t rows = 20, cols = 64;
  const std::vector<std::byte> bytes = stored_rows(DType::kQ8_0, rows, cols, rng);
  cpu::CpuContext generic(1, cpu::Isa::kGeneric, true);
  const cpu::WeightMatrix w{WeightLayout::kQ8_0, bytes.data(), rows, cols, row_bytes(DType::kQ8_0, cols)};
  std::vector<std::byte> tiles(bytes.size());
  cpu::copy_to_layout(generic, w, WeightLayout::kQ8_0P, tiles.data(), w.row_stride);
  const cpu::WeightMatrix p{WeightLayout::kQ8_0P, tiles.data(), rows, cols, w.row_stride};
  std::vector<float> x(static_cast<std::size_t>(cols), 0.5f), y(static_cast<std::size_t>(rows));
  CHECK_THROWS_WITH(cpu::matmul(generic, p, x.data(), cols, 1, y.data(), rows),
                    Catch::Contains("q8_0p") && Catch::Contains("avx512vnni"));
  // Row lookups work at every level (a tied embedding and output head).
  std::vector<float> want(static_cast<std::size_t>(cols)), got(want.size());
  const std::int32_t id = 7;
  cpu::get_rows(generic, w, &id, 1, want.data(), cols);
  cpu::get_rows(generic, p, &id, 1, got.data(), cols);
  CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
}

SITSRT_ISA_TEST_CASE(isa, "repacked weights decode, prefill and look up rows bit-identically to the stored layout",
                     "[repacked]", cpu::Isa::kGeneric, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni, cpu::Isa::kAmx) {
  const WeightLayout repacked = GENERATE(WeightLayout::kQ8_0R, WeightLayout::kQ4_0R, WeightLayout::kQ8_0P);
  const DType stored = cpu::stored_type(repacked);
  const int threads = GENERATE(1, 3);
  test::Rng rng(23);
  for (const std::int64_t rows : {1, 5, 18, 67}) {
    for (const std::int64_t nb : {1, 3, 4, 33, 35, 88, 97}) {
      const std::int64_t cols = nb * 32;
      CAPTURE(cpu::name(isa), cpu::name(repacked), threads, rows, cols);
      const std::vector<std::byte> bytes = stored_rows(stored, rows, cols, rng);
      cpu::CpuContext ctx(threads, isa, /*int8_activations=*/true);
      const cpu::WeightMatrix w{cpu::stored_layout(stored), bytes.data(), rows, cols, row_bytes(stored, cols)};
      const std::size_t stride = cpu::resident_row_stride(repacked, cols);
      // A heap vector: 16-byte aligned, not 64 (the kernels' weight loads are unaligned ones).
      std::vector<std::byte> packed(stride * static_cast<std::size_t>(rows));
      std::byte* at = packed.data();
      cpu::copy_to_layout(ctx, w, repacked, at, stride);
      const cpu::WeightMatrix r{repacked, at, rows, cols, stride};

      // Decode and prefill are bit-identical where the repacked layout has the integer kernels (m == 1
      // and the int8 GEMM); at other levels Q8_0R / Q4_0R multiply with float activations
      // (matmul_test checks it against a double reference), unlike the stored one, whose int8
      // decode and GEMM qdot_test / qgemm_test check. Lookups, and prefill with float activations, are
      // identical everywhere.
      const bool int8_kernels = cpu::detail::qdot_kernels_for(isa).matvec[static_cast<int>(repacked)] != nullptr;
      if (repacked == WeightLayout::kQ8_0P) {
        if (!int8_kernels) continue;  // refused there (the test above)
        // Batches scale whole-block sums for both; one row too in batch-invariant mode, while the
        // stored layout's default one-row kernel keeps 4-level partials (qgemm_test).
        test::check_same_results(ctx, w, r, {2, 9, 33}, rng);
        cpu::CpuContext invariant(threads, isa, /*int8_activations=*/true);
        invariant.set_batch_invariant(true);
        test::check_same_results(invariant, w, r, {1, 3}, rng);
        continue;
      }
      if (int8_kernels) {
        test::check_same_results(ctx, w, r, {1, 2, 9}, rng);
      } else {
        test::check_same_results(ctx, w, r, {}, rng);
      }
      // With float activations prefill dequantizes both alike.
      cpu::CpuContext float_ctx(threads, isa, /*int8_activations=*/false);
      test::check_same_results(float_ctx, w, r, {2, 9}, rng);
    }
  }
}

TEST_CASE("Q4_0 integer decode (16-block reduction) matches a double reference, stored = repacked",
          "[repacked][gated]") {
  // The AVX-512 VNNI Q4_0 kernel sums 16 blocks' lanes in int16 pairs, the Q4_0R one sums each
  // block in its own lane (low nibbles + 16 x high nibbles >> 4); both subtract the offset
  // 8 sum(q) per block: a wrong block -> lane order, offset, shift or saturated pack shows here
  // against sum_b d_w d_x sum_i (u_i - 8) q_i in double, for every row length of 1..97 blocks.
  // Random qs bytes and scales per block, plus extreme blocks (all levels 15 or 0 against
  // q = +-127) that reach the int16 bounds.
  SITSRT_REQUIRE_ISA(cpu::Isa::kAvx512Vnni);
  test::Rng rng(41);
  constexpr std::int64_t kRows = 5;  // one 4-row pass and one single row
  cpu::CpuContext ctx(1, cpu::Isa::kAvx512Vnni, /*int8_activations=*/true);
  for (std::int64_t nb = 1; nb <= 97; ++nb) {
    const std::int64_t cols = nb * 32;
    CAPTURE(nb);
    std::vector<BlockQ4_0> blocks(static_cast<std::size_t>(kRows * nb));
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      blocks[i].d = fp32_to_fp16(std::exp2(rng.uniform(-6.0f, 2.0f)) * (rng.uniform(0.0f, 1.0f) < 0.5f ? -1.0f : 1.0f));
      const int kind = rng.uniform_int(0, 9);  // 0: all 15, 1: all 0, else random
      for (auto& q : blocks[i].qs) q = static_cast<std::uint8_t>(kind == 0 ? 0xFF : kind == 1 ? 0x00 : rng.uniform_int(0, 255));
    }
    std::vector<float> x(static_cast<std::size_t>(cols));
    for (std::int64_t b = 0; b < nb; ++b) {
      const int kind = rng.uniform_int(0, 9);  // 0: constant +, 1: constant - (q = +-127), else random
      const float scale = std::exp2(rng.uniform(-3.0f, 3.0f));
      for (int i = 0; i < 32; ++i) {
        x[static_cast<std::size_t>(b * 32 + i)] = kind == 0 ? scale : kind == 1 ? -scale : rng.normal() * scale;
      }
    }
    const auto* stored_bytes = reinterpret_cast<const std::byte*>(blocks.data());
    const cpu::WeightMatrix w{WeightLayout::kQ4_0, stored_bytes, kRows, cols, row_bytes(DType::kQ4_0, cols)};
    const test::DecodedBothLayouts y = test::decode_both_layouts(ctx, w, WeightLayout::kQ4_0R, x);
    CHECK(std::memcmp(y.stored.data(), y.repacked.data(), kRows * 4) == 0);
    const cpu::detail::QuantizedRow& q = y.q;
    std::vector<double> want(kRows), tol(kRows);
    for (std::int64_t row = 0; row < kRows; ++row) {
      double sum = 0.0, mag = 0.0;
      for (std::int64_t b = 0; b < nb; ++b) {
        const BlockQ4_0& blk = blocks[static_cast<std::size_t>(row * nb + b)];
        std::int64_t dot = 0;
        for (int i = 0; i < 32; ++i) {
          const int u = i < 16 ? blk.qs[i] & 15 : blk.qs[i - 16] >> 4;
          dot += static_cast<std::int64_t>(u - 8) * q.qs[b * 32 + i];
        }
        const double scale = static_cast<double>(fp16_to_fp32(blk.d)) * q.d[b];
        sum += scale * static_cast<double>(dot);
        mag += std::fabs(scale * static_cast<double>(dot));
      }
      want[static_cast<std::size_t>(row)] = sum;
      // Each block: the scale product and the FMA round once; then the lanes' accumulation
      // (nb / 16 terms each) and the 16-lane sum (4 levels).
      tol[static_cast<std::size_t>(row)] = test::dot_tolerance(nb / 16 + 1 + 4, mag, 2);
    }
    test::check_close(want, y.stored, tol, "Q4_0 int8 decode vs double reference");
  }
}
