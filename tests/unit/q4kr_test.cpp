// The repacked Q4_K layout (cpu::WeightLayout::kQ4_KR, cpu/repacked_blocks.hpp) and its AVX-512 VNNI + VBMI
// decode (cpu/qdot/qdot_q4kr_avx512vbmi.cpp): the documented bytes, lossless round trips, prefill and
// lookups bit-identical to stored Q4_K, and int8 decode against a double reference, extremes
// included.
#include "core/dtype.hpp"
#include "core/half.hpp"
#include "core/kquant_blocks.hpp"
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
#include <cstdint>
#include <cstring>
#include <vector>

using namespace sitsrt;
using cpu::WeightLayout;

namespace {

// Super-block counts: one, whole units, a last unit of one, rows of 1024 and 2816 elements.
constexpr std::int64_t kBlockCounts[] = {1, 2, 3, 4, 5, 11};

// Random stored super-blocks: every qs byte, scale and min drawn at random, d and dmin random
// fp16 in [2^-10, 2^-6).
std::vector<BlockQ4_K> random_blocks(std::int64_t count, test::Rng& rng) {
  std::vector<BlockQ4_K> blocks(static_cast<std::size_t>(count));
  for (BlockQ4_K& b : blocks) {
    b.d = fp32_to_fp16(std::ldexp(rng.uniform(1.0f, 2.0f), rng.uniform_int(-10, -7)));
    b.dmin = fp32_to_fp16(std::ldexp(rng.uniform(1.0f, 2.0f), rng.uniform_int(-10, -7)));
    for (auto& v : b.scales) v = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
    for (auto& v : b.qs) v = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
  }
  return blocks;
}

const std::byte* bytes_of(const std::vector<BlockQ4_K>& blocks) {
  return reinterpret_cast<const std::byte*>(blocks.data());
}

// Level of element e (0..31) of sub-block s in a stored block.
int stored_level(const BlockQ4_K& b, int s, int e) {
  return (b.qs[32 * (s / 2) + e] >> (4 * (s % 2))) & 15;
}

}  // namespace

TEST_CASE("q4_kr bytes are where docs/quantization.md puts them", "[q4kr]") {
  constexpr std::int64_t nb = 5;  // units of 2, 2 and 1 super-blocks
  test::Rng rng(3);
  const std::vector<BlockQ4_K> blocks = random_blocks(nb, rng);
  std::vector<std::uint8_t> packed(nb * 144, 0xAB);
  cpu::repack_row_q4_k(blocks.data(), reinterpret_cast<std::byte*>(packed.data()), nb);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int64_t unit = b / 2, k = b % 2, n = std::min<std::int64_t>(2, nb - 2 * unit);
    const std::size_t at = static_cast<std::size_t>(288 * unit);
    CAPTURE(b, n);
    // Levels: sub-block i = 8 k + s of the unit, element e in the low nibble of byte e % 16 of
    // its 16 (high nibble for e >= 16), word j of them at 4 (8 n j + i).
    for (int s = 0; s < 8; ++s) {
      const std::int64_t i = 8 * k + s;
      for (int e = 0; e < 32; ++e) {
        const int byte = e % 16, j = byte / 4;
        const std::uint8_t v = packed[at + static_cast<std::size_t>(4 * (8 * n * j + i) + byte % 4)];
        CHECK(((e < 16 ? v : v >> 4) & 15) == stored_level(blocks[static_cast<std::size_t>(b)], s, e));
      }
    }
    // Scales, then mins: 6 bytes per super-block, value s at bits 6 s .. 6 s + 5.
    std::uint64_t sc_bits = 0, m_bits = 0;
    for (int byte = 0; byte < 6; ++byte) {
      sc_bits |= static_cast<std::uint64_t>(packed[at + static_cast<std::size_t>(128 * n + 6 * k + byte)]) << (8 * byte);
      m_bits |= static_cast<std::uint64_t>(packed[at + static_cast<std::size_t>(134 * n + 6 * k + byte)]) << (8 * byte);
    }
    for (int s = 0; s < 8; ++s) {
      const ScaleMin sm = unpack_scale_min_k4(blocks[static_cast<std::size_t>(b)].scales, s);
      CHECK(static_cast<int>((sc_bits >> (6 * s)) & 63) == sm.scale);
      CHECK(static_cast<int>((m_bits >> (6 * s)) & 63) == sm.min);
    }
    std::uint16_t d, dmin;
    std::memcpy(&d, &packed[at + static_cast<std::size_t>(140 * n + 2 * k)], 2);
    std::memcpy(&dmin, &packed[at + static_cast<std::size_t>(142 * n + 2 * k)], 2);
    CHECK(d == blocks[static_cast<std::size_t>(b)].d);
    CHECK(dmin == blocks[static_cast<std::size_t>(b)].dmin);
  }
}

TEST_CASE("q4_kr rows round-trip the stored blocks and dequantize to the same values", "[q4kr]") {
  CHECK(cpu::repacked_layout(DType::kQ4_K) == WeightLayout::kQ4_KR);
  CHECK(cpu::stored_type(WeightLayout::kQ4_KR) == DType::kQ4_K);
  CHECK(cpu::row_bytes(WeightLayout::kQ4_KR, kSuperBlock) == row_bytes(DType::kQ4_K, kSuperBlock));
  test::Rng rng(5);
  for (const std::int64_t nb : kBlockCounts) {
    CAPTURE(nb);
    const std::int64_t cols = nb * kSuperBlock;
    const std::vector<BlockQ4_K> blocks = random_blocks(nb, rng);
    std::vector<std::byte> packed(blocks.size() * sizeof(BlockQ4_K), std::byte{0xAB});
    std::vector<BlockQ4_K> back(blocks.size());
    cpu::repack_row_q4_k(blocks.data(), packed.data(), nb);
    cpu::unpack_row_q4_kr(packed.data(), back.data(), nb);
    CHECK(std::memcmp(back.data(), blocks.data(), packed.size()) == 0);

    std::vector<float> want(static_cast<std::size_t>(cols)), got(want.size());
    dequantize_row(DType::kQ4_K, blocks.data(), want.data(), cols);
    cpu::dequantize_row(WeightLayout::kQ4_KR, packed.data(), got.data(), cols);
    CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);

    // quantize_row of the repacked format = the stored quantizer, repacked.
    const std::vector<float> x = rng.normals(static_cast<std::size_t>(cols));
    std::vector<BlockQ4_K> q_stored(blocks.size());
    std::vector<std::byte> q_repacked(packed.size()), expect(packed.size());
    quantize_row(DType::kQ4_K, x.data(), q_stored.data(), cols);
    cpu::quantize_row(WeightLayout::kQ4_KR, x.data(), q_repacked.data(), cols);
    cpu::repack_row_q4_k(q_stored.data(), expect.data(), nb);
    CHECK(q_repacked == expect);
  }
}

SITSRT_ISA_TEST_CASE(isa, "q4_kr resident layout: only with its integer decode kernel", "[q4kr]", test::kAllIsas) {
  const bool native = cpu::detail::q4_kr_decode_native(isa);
  CHECK((native && isa < cpu::Isa::kAvx512Vnni) == false);
  const cpu::CpuContext int8(1, isa, true), float_acts(1, isa, false);
  CHECK(cpu::resident_layout(int8, DType::kQ4_K, true) == (native ? WeightLayout::kQ4_KR : WeightLayout::kQ4_K));
  CHECK(cpu::resident_layout(int8, DType::kQ4_K, false) == WeightLayout::kQ4_K);  // a lookup-only table
  CHECK(cpu::resident_layout(float_acts, DType::kQ4_K, true) == WeightLayout::kQ4_K);
}

// With int8 activations prefill is the decode kernels' per row (the int8 GEMM), which for Q4_KR
// and Q4_K sum in different orders (qgemm_test checks each against its own decode); with float
// activations both dequantize to the same tiles.
SITSRT_ISA_TEST_CASE(isa, "q4_kr float prefill and row lookups are bit-identical to stored q4_k at every level", "[q4kr]",
                     test::kAllIsas) {
  const int threads = GENERATE(1, 3);
  test::Rng rng(29);
  for (const std::int64_t rows : {1, 5, 18}) {
    for (const std::int64_t nb : kBlockCounts) {
      const std::int64_t cols = nb * kSuperBlock;
      CAPTURE(cpu::name(isa), threads, rows, cols);
      const std::vector<BlockQ4_K> blocks = random_blocks(rows * nb, rng);
      cpu::CpuContext ctx(threads, isa, /*int8_activations=*/false);
      const cpu::WeightMatrix w{WeightLayout::kQ4_K, bytes_of(blocks), rows, cols, row_bytes(DType::kQ4_K, cols)};
      const std::size_t stride = cpu::resident_row_stride(WeightLayout::kQ4_KR, cols);
      std::vector<std::byte> packed(stride * static_cast<std::size_t>(rows));
      CHECK(cpu::copy_to_layout(ctx, w, WeightLayout::kQ4_KR, packed.data(), stride) == WeightLayout::kQ4_KR);
      const cpu::WeightMatrix r{WeightLayout::kQ4_KR, packed.data(), rows, cols, stride};
      test::check_same_results(ctx, w, r, {2, 9}, rng);
    }
  }
}

TEST_CASE("q4_kr integer decode matches a double reference, extremes included", "[q4kr][gated]") {
  // Per sub-block s of a block the kernel adds float(u . q) * fl(fl(d sc_s) d_x) and subtracts
  // fl(dmin m_s) * ds_x, with u . q summed exactly in int32 from the low nibbles and 16 x the
  // high ones. A wrong lane order, word offset, 6-bit field, d/dmin lane or shift shows here.
  SITSRT_REQUIRE_ISA(cpu::Isa::kAvx512Vnni);
  if (!cpu::detail::q4_kr_decode_native(cpu::Isa::kAvx512Vnni)) SITSRT_SKIP("this CPU lacks AVX512-VBMI");
  test::Rng rng(41);
  constexpr std::int64_t kRows = 5;  // one 4-row pass and one single row
  cpu::CpuContext ctx(1, cpu::Isa::kAvx512Vnni, /*int8_activations=*/true);
  for (std::int64_t nb = 1; nb <= 12; ++nb) {
    const std::int64_t cols = nb * kSuperBlock;
    CAPTURE(nb);
    std::vector<BlockQ4_K> blocks = random_blocks(kRows * nb, rng);
    // Row 1: every level 15, scale and min 63 (the largest sums, all lanes saturated).
    for (std::int64_t b = 0; b < nb; ++b) {
      BlockQ4_K& blk = blocks[static_cast<std::size_t>(nb + b)];
      std::memset(blk.qs, 0xFF, sizeof(blk.qs));
      std::memset(blk.scales, 0xFF, sizeof(blk.scales));
    }
    std::vector<float> x = rng.normals(static_cast<std::size_t>(cols), 2.0f);
    for (std::int64_t c = 0; c < std::min<std::int64_t>(cols, 64); ++c) x[static_cast<std::size_t>(c)] = c % 2 ? 3.0f : -3.0f;
    const cpu::WeightMatrix w{WeightLayout::kQ4_K, bytes_of(blocks), kRows, cols, row_bytes(DType::kQ4_K, cols)};
    const test::DecodedBothLayouts y = test::decode_both_layouts(ctx, w, WeightLayout::kQ4_KR, x);
    const cpu::detail::QuantizedRow& q = y.q;
    std::vector<double> want(kRows), tol(kRows);
    for (std::int64_t row = 0; row < kRows; ++row) {
      double sum = 0.0, mag = 0.0;
      for (std::int64_t b = 0; b < nb; ++b) {
        const BlockQ4_K& blk = blocks[static_cast<std::size_t>(row * nb + b)];
        const float d = fp16_to_fp32(blk.d), dmin = fp16_to_fp32(blk.dmin);
        for (int s = 0; s < 8; ++s) {
          const std::int64_t xb = 8 * b + s;  // the activation block
          const ScaleMin sm = unpack_scale_min_k4(blk.scales, s);
          std::int64_t dot = 0;
          for (int e = 0; e < 32; ++e) dot += static_cast<std::int64_t>(stored_level(blk, s, e)) * q.qs[32 * xb + e];
          const double scale = static_cast<double>(d * static_cast<float>(sm.scale) * q.d[xb]);
          const double min = static_cast<double>(dmin * static_cast<float>(sm.min)) * static_cast<double>(q.ds[xb]);
          sum += scale * static_cast<double>(dot) - min;
          mag += std::fabs(scale * static_cast<double>(dot)) + std::fabs(min);
        }
      }
      want[static_cast<std::size_t>(row)] = sum;
      // Per sub-block: the scale product, the FMA and the min's product and FMA round once each;
      // then each of 16 lanes sums ceil(8 nb / 16) terms, and two 16-lane reductions.
      tol[static_cast<std::size_t>(row)] = test::dot_tolerance((8 * nb + 15) / 16 + 1 + 5, mag, 2);
    }
    test::check_close(want, y.repacked, tol, "Q4_KR int8 decode vs double reference");
    test::check_close(want, y.stored, tol, "Q4_K int8 decode vs double reference");
  }
}
