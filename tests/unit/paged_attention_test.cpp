// Paged and quantized KV caches: kv_store through random block tables (F16/INT8/INT4 rows
// against a scalar reference), attention over paged caches bit-identical to contiguous ones
// for every K/V type pair, INT8/INT4 attention against double references (over the
// dequantized values, and over the original values with a bound from the quantization step),
// Hadamard rotation on and off, and the batched entry bit-identical to per-sequence calls.
#include "core/half.hpp"
#include "cpu/attention/attention.hpp"
#include "cpu/cpu_context.hpp"
#include "support/isa.hpp"
#include "support/paged_kv_reference.hpp"
#include "support/random.hpp"
#include "support/sanitizer.hpp"
#include "support/tolerance.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

using namespace sitsrt;
using namespace sitsrt::test::paged_kv;
using cpu::KvType;

namespace {

// Paged (block_size) and contiguous caches of the same inputs, the paged one also stored by head
// (the same table; int4 where head_dim % 32 == 0): attention must agree bit for bit, the
// head-major bytes gathered must be the row-major ones; the paged result is then checked against
// both references.
void check_paged(cpu::Isa isa, int threads, const Layout& l, std::int64_t block_size, const Case& c,
                 bool check_reference = true) {
  CAPTURE(cpu::name(isa), threads, type_name(l.k), type_name(l.v), l.k_rotated, l.v_rotated, block_size, c.group,
          c.head_dim, c.pos0, c.rows, c.window, c.n_kv);
  const Inputs in(c, seed_of(c, l, block_size));
  test::Rng rng(seed_of(c, l, block_size) + 1);
  const std::int64_t capacity = c.pos0 + c.rows + 3;
  Cache contiguous(l, c.n_kv, c.head_dim, capacity, 0, rng), paged(l, c.n_kv, c.head_dim, capacity, block_size, rng);
  Cache head_major = paged;
  head_major.layout.head_major = true;
  cpu::CpuContext store_ctx(2, isa);
  in.store(store_ctx, contiguous);
  in.store(store_ctx, paged);
  in.store(store_ctx, head_major);
  const std::vector<float> a = run_attention(isa, threads, in, contiguous);
  const std::vector<float> b = run_attention(isa, threads, in, paged);
  const std::vector<float> h = run_attention(isa, threads, in, head_major);
  REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  REQUIRE(std::memcmp(a.data(), h.data(), a.size() * sizeof(float)) == 0);
  const Cache gathered = head_major.row_major();
  REQUIRE(gathered.k == paged.k);
  REQUIRE(gathered.v == paged.v);
  if (!check_reference) return;
  const Reference ref = reference(in, paged);
  const std::vector<float> actual = output_elements(in, b);
  test::check_close(ref.exact, actual, ref.tight, "paged attention vs the stored values");
  test::check_close(ref.original, actual, ref.loose, "paged attention vs the original values");
}

}  // namespace

SITSRT_ISA_TEST_CASE(isa, "paged attention equals contiguous bit for bit and matches the references, all K/V types",
                     "[attention][paged]", kIsas) {
  const KvType kt = GENERATE(from_range(std::begin(kTypes), std::end(kTypes)));
  const KvType vt = GENERATE(from_range(std::begin(kTypes), std::end(kTypes)));
  const Layout l{kt, vt};
  check_paged(isa, 2, l, 16, {4, 64, 37, 1});        // GQA decode
  check_paged(isa, 1, l, 16, {2, 128, 5, 9});        // prefill after stored positions
  check_paged(isa, 2, l, 5, {1, 72, 0, 11, 0, 4});   // block of 5, d not a power of two, 4 kv heads
  check_paged(isa, 2, l, 3, {2, 64, 40, 2, 16});     // sliding window over blocks of 3
  check_paged(isa, 2, l, 16, {2, 16, 20, 3, 0, 2});  // int4 groups span two heads of 16
  check_paged(isa, 2, l, 1, {1, 8, 12, 1, 0, 4});    // one position per block, d = 8
}

SITSRT_ISA_TEST_CASE(isa, "paged attention over long contexts split over threads equals contiguous",
                     "[attention][paged]", kIsas) {
  const KvType kt = GENERATE(KvType::kF32, KvType::kF16, KvType::kInt8, KvType::kInt4);
  const KvType vt = GENERATE(KvType::kF16, KvType::kInt8, KvType::kInt4);
  const int threads = GENERATE(1, 3);
  if (test::kSanitized && threads == 1) return;  // support/sanitizer.hpp
  const Layout l{kt, vt};
  check_paged(isa, threads, l, 16, {4, 64, 2999, 1, 0, 1}, kt == vt);  // decode at 3000 positions, split
  check_paged(isa, threads, l, 16, {2, 64, 2050, 3, 1500, 1}, false);  // window not chunk aligned
  check_paged(isa, threads, l, 7, {1, 128, 1030, 2, 0, 2}, false);     // block edges off the chunk edges
}

SITSRT_ISA_TEST_CASE(isa, "rotated K and V caches match the references, rotation on and off", "[attention][paged]",
                     kIsas) {
  const KvType kt = GENERATE(KvType::kF16, KvType::kInt8, KvType::kInt4);
  const KvType vt = GENERATE(KvType::kF16, KvType::kInt8, KvType::kInt4);
  const bool k_rotated = GENERATE(false, true);
  const bool v_rotated = GENERATE(false, true);
  const Layout l{kt, vt, k_rotated, v_rotated};
  check_paged(isa, 2, l, 16, {4, 64, 300, 1});
  check_paged(isa, 2, l, 16, {2, 128, 3, 6, 0, 2});
  check_paged(isa, 2, l, 16, {2, 16, 33, 2, 0, 2});  // head_dim 16: int4 groups of 32 hold two rotated heads
}

TEST_CASE("rotation needs a power-of-two head_dim; int4 needs widths in groups of 32", "[attention][paged]") {
  test::Rng rng(5);
  cpu::CpuContext ctx(1, cpu::Isa::kGeneric);
  std::vector<float> x(96, 1.0f);
  Cache odd({KvType::kInt8, KvType::kInt8, true, false}, 1, 48, 4, 0, rng);
  CHECK_THROWS_AS(cpu::kv_store(ctx, odd.view(), x.data(), 48, x.data(), 48, 1, 1, 48, 0), Error);
  // 3 x 12 values per position cannot be cut into int4 groups of 32.
  CHECK(cpu::kv_row_bytes(KvType::kInt4, 3, 12) == 0);
  // A block table shorter than the positions stored.
  Cache paged({KvType::kF16, KvType::kF16}, 1, 32, 64, 16, rng);
  cpu::KvLayerView view = paged.view();
  view.block_table = view.block_table.subspan(0, 1);
  try {
    cpu::kv_store(ctx, view, x.data(), 32, x.data(), 32, 2, 1, 32, 15);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
  }
  // An int4 side is stored by head only when its scale groups of 32 fall within heads.
  Cache int4({KvType::kInt4, KvType::kF16}, 2, 16, 16, 16, rng);
  cpu::KvLayerView flagged = int4.view();
  flagged.k_head_major = true;
  try {
    cpu::kv_store(ctx, flagged, x.data(), 32, x.data(), 32, 1, 2, 16, 0);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kUnsupported);
    CHECK_THAT(e.what(), Catch::Contains("head-major int4") && Catch::Contains("16"));
  }
}

// One int4 group (32 values x, their packed indices, the scale code) against the rule of
// docs/architecture.md, computed here in double: for each sign of the scale (the side of larger
// magnitude sent to the -127 level first), the smallest code whose levels reach every value and
// the code below it; the group takes the candidate of least squared error (up to float
// rounding of the sums), every value the level nearest to x / scale. A group of zeros: code 0.
void check_int4_group(const float* x, const std::byte* packed, std::byte code_byte) {
  const auto code = static_cast<unsigned>(code_byte);
  const auto index = [&](int i) { return static_cast<int>((static_cast<unsigned>(packed[i / 2]) >> (4 * (i % 2))) & 15u); };
  double pos = 0.0, neg = 0.0;
  for (int i = 0; i < 32; ++i) {
    pos = std::max(pos, double{x[i]});
    neg = std::max(neg, -double{x[i]});
  }
  if (pos == 0.0 && neg == 0.0) {
    REQUIRE(code == 0);
    return;
  }
  const auto nearest = [](double v) {
    int best = 0;
    for (int l = 1; l < 16; ++l) {
      if (std::fabs(v - kInt4Levels[l]) < std::fabs(v - kInt4Levels[best])) best = l;
    }
    return best;
  };
  const auto error = [&](unsigned c) {
    const double s = int4_scale(static_cast<std::byte>(c));
    double e = 0.0;
    for (int i = 0; i < 32; ++i) e += std::pow(x[i] - kInt4Levels[nearest(x[i] / s)] * s, 2);
    return e;
  };
  double least = HUGE_VAL;
  for (const bool wide_to_low : {true, false}) {
    const bool negative_scale = (pos >= neg) == wide_to_low;
    const double to_low = negative_scale ? pos : neg, to_high = negative_scale ? neg : pos;
    unsigned c0 = 1;
    while (c0 < 0x7B && int4_scale(static_cast<std::byte>(c0)) < std::max(to_low / 127, to_high / 113)) ++c0;
    for (const unsigned c : {c0 - 1, c0}) {
      if (c >= 1 && c <= 0x7B) least = std::min(least, error(c | (negative_scale ? 0x80u : 0u)));
    }
  }
  CAPTURE(code, least);
  REQUIRE(error(code) <= least * (1 + 1e-5));
  const double s = int4_scale(code_byte);
  for (int i = 0; i < 32; ++i) REQUIRE(index(i) == nearest(x[i] / s));
}

// kv_store's quantized rows against a scalar quantizer written from the layout's description,
// through a random block table, and the error property |dequantized - x| <= |scale| / 2.
SITSRT_ISA_TEST_CASE(isa, "kv_store writes int8 and int4 rows as the scalar reference does", "[attention][paged]",
                     kIsas) {
  const KvType type = GENERATE(KvType::kInt8, KvType::kInt4, KvType::kF16);
  const std::int64_t n_kv = 3, d = 32, width = n_kv * d, rows = 21, pos0 = 6;
  CAPTURE(cpu::name(isa), type_name(type));
  test::Rng rng(11 + static_cast<int>(type));
  Cache cache({type, type}, n_kv, d, pos0 + rows, 4, rng);
  std::vector<float> x(static_cast<std::size_t>(rows * width));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = rng.normal() * std::exp2(rng.uniform(-8.0f, 6.0f));
  for (std::int64_t e = 0; e < width; ++e) x[static_cast<std::size_t>(2 * width + e)] = 0.0f;  // an all-zero row
  cpu::CpuContext ctx(2, isa);
  cpu::kv_store(ctx, cache.view(), x.data(), width, x.data(), width, rows, n_kv, d, pos0);
  // Scalar reference: per head the smallest f16 scale >= amax / 127 and q = nearest-even(x /
  // scale) clamped to the levels (int8); int4: int4_group_matches_reference.
  const bool int4 = type == KvType::kInt4;
  const std::int64_t span = int4 ? 32 : d;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::byte* row = cache.k_row(pos0 + r);
    REQUIRE(std::memcmp(row, cache.v_row(pos0 + r), cache.kb - 8) == 0);
    const float* xr = x.data() + r * width;
    if (type == KvType::kF16) {
      for (std::int64_t e = 0; e < width; ++e) {
        std::uint16_t h;
        std::memcpy(&h, row + 2 * e, 2);
        REQUIRE(h == fp32_to_fp16(xr[e]));
      }
      continue;
    }
    for (std::int64_t j = 0; j < width / span; ++j) {
      if (int4) {
        check_int4_group(xr + j * span, row + j * span / 2, row[width / 2 + j]);
        for (std::int64_t e = j * span; e < (j + 1) * span; ++e) {
          REQUIRE(std::fabs(stored_value(type, row, width, d, e) - xr[e]) <= value_error(type, row, width, d, e, xr[e]));
        }
        continue;
      }
      float pos = 0.0f, neg = 0.0f;
      for (std::int64_t e = 0; e < span; ++e) {
        pos = std::max(pos, xr[j * span + e]);
        neg = std::max(neg, -xr[j * span + e]);
      }
      const float amax = std::max(pos, neg);
      const float magnitude = amax / 127.0f;
      std::uint16_t want = 0;
      if (amax > 0.0f) {
        want = fp32_to_fp16(magnitude);
        if (fp16_to_fp32(want) < magnitude) ++want;
      }
      const std::byte* scale_at = row + width + 2 * j;
      std::uint16_t got;
      std::memcpy(&got, scale_at, 2);
      REQUIRE(got == want);
      const float scale = fp16_to_fp32(want);
      for (std::int64_t e = j * span; e < (j + 1) * span; ++e) {
        const int q = scale != 0.0f ? std::clamp(static_cast<int>(std::nearbyint(xr[e] / scale)), -127, 127) : 0;
        const double stored = stored_value(type, row, width, d, e);
        CAPTURE(r, e, xr[e], scale, q, stored);
        REQUIRE(stored == static_cast<double>(static_cast<float>(q) * scale));
        REQUIRE(std::fabs(stored - xr[e]) <= 0.5 * std::fabs(scale) * (1 + 0x1p-20));
      }
    }
  }
  // Rows outside pos0 .. pos0 + rows - 1 were not written.
  for (std::int64_t p = 0; p < pos0; ++p) {
    for (std::size_t b = 0; b < cache.kb; ++b) REQUIRE(cache.k_row(p)[b] == std::byte{0xFF});
  }
}

// The batched entry: each sequence's result bit-identical to attention on it alone, whatever
// its companions (types, lengths, rows, windows none here: one shape per call) and threads.
SITSRT_ISA_TEST_CASE(isa, "attention_batch equals per-sequence attention bit for bit", "[attention][paged]", kIsas) {
  CAPTURE(cpu::name(isa));
  struct Seq {
    Layout layout;
    Case c;
    std::int64_t block_size;
  };
  // All share n_kv = 2, head_dim = 64, group 2; different lengths, rows and caches.
  const Seq seqs[] = {
      {{KvType::kF16, KvType::kF16}, {2, 64, 100, 1}, 16},
      {{KvType::kInt8, KvType::kInt8}, {2, 64, 2100, 1}, 16},
      {{KvType::kInt4, KvType::kInt8}, {2, 64, 7, 1}, 16},
      {{KvType::kF32, KvType::kInt4}, {2, 64, 30, 5}, 3},
      {{KvType::kInt8, KvType::kInt4, true, true}, {2, 64, 900, 1}, 16},
      {{KvType::kF16, KvType::kF16}, {2, 64, 0, 4}, 0},
      {{KvType::kF16, KvType::kF16, false, false, true}, {2, 64, 700, 1}, 16},  // head-major beside row-major
      {{KvType::kInt8, KvType::kF32, false, true, true}, {2, 64, 40, 3}, 5},
  };
  std::vector<Inputs> inputs;
  std::vector<Cache> caches;
  test::Rng rng(99);
  cpu::CpuContext store_ctx(2, isa);
  for (const Seq& s : seqs) {
    inputs.emplace_back(s.c, seed_of(s.c, s.layout, s.block_size));
    caches.emplace_back(s.layout, 2, 64, s.c.pos0 + s.c.rows, s.block_size, rng);
    inputs.back().store(store_ctx, caches.back());
  }
  const cpu::AttentionShape shape = inputs[0].shape;
  std::vector<std::vector<float>> alone;
  for (std::size_t i = 0; i < inputs.size(); ++i) alone.push_back(run_attention(isa, 1, inputs[i], caches[i]));
  // Companion sets: all, every other one, the long one alone with a short one, reversed.
  const std::vector<std::vector<std::size_t>> sets = {{0, 1, 2, 3, 4, 5}, {0, 2, 4}, {1, 2}, {5, 4, 3, 2, 1, 0}, {3}};
  for (const auto& set : sets) {
    for (int threads : {1, 2, 3, 5}) {
      CAPTURE(threads, set.size(), set[0]);
      cpu::CpuContext ctx(threads, isa);
      ctx.reserve_scratch(cpu::attention_scratch_floats(2101, shape));
      std::vector<std::vector<float>> outs;
      std::vector<cpu::AttentionSequence> batch;
      for (std::size_t i : set) outs.emplace_back(inputs[i].q.size(), kSentinel);
      for (std::size_t j = 0; j < set.size(); ++j) {
        const Inputs& in = inputs[set[j]];
        batch.push_back({in.q.data(), in.ldq, in.c.rows, in.c.pos0, caches[set[j]].view(), outs[j].data(), in.ldq});
      }
      cpu::attention_batch(ctx, batch, shape);
      for (std::size_t j = 0; j < set.size(); ++j) {
        CAPTURE(set[j]);
        REQUIRE(std::memcmp(outs[j].data(), alone[set[j]].data(), outs[j].size() * sizeof(float)) == 0);
      }
    }
  }
}

// Error of quantized caches against the unquantized double result on Gaussian data with outlier
// channels (K: channels 3 and d/2+1 eight times larger), rotation on and off. Printed for the
// record (docs/architecture.md quotes them); checks that rotation lowers the error where outliers
// set the scale (quantized K) and that every error is below the derived bound (check_paged).
TEST_CASE("rotation lowers the error of quantized K with outlier channels", "[attention][paged]") {
  const Case c{4, 128, 511, 1, 0, 2};
  struct Row {
    const char* side;
    KvType type;
    double off = 0.0, on = 0.0;
  };
  Row rows[] = {{"K", KvType::kInt8}, {"K", KvType::kInt4}, {"V", KvType::kInt8}, {"V", KvType::kInt4}};
  for (Row& r : rows) {
    for (bool rotated : {false, true}) {
      const bool k_side = std::string(r.side) == "K";
      Layout l{k_side ? r.type : KvType::kF32, k_side ? KvType::kF32 : r.type, k_side && rotated, !k_side && rotated};
      const Inputs in(c, 4242);
      test::Rng rng(1);
      Cache cache(l, c.n_kv, c.head_dim, c.pos0 + c.rows, 16, rng);
      cpu::CpuContext ctx(2, cpu::Isa::kGeneric);
      in.store(ctx, cache);
      const std::vector<float> out = output_elements(in, run_attention(cpu::Isa::kGeneric, 2, in, cache));
      const Reference ref = reference(in, cache);
      double err = 0.0, norm = 0.0;
      for (std::size_t i = 0; i < out.size(); ++i) {
        err += (out[i] - ref.original[i]) * (out[i] - ref.original[i]);
        norm += ref.original[i] * ref.original[i];
      }
      (rotated ? r.on : r.off) = std::sqrt(err / norm);
    }
    std::printf("  %s %-4s relative RMS error of the output: rotation off %.3e, on %.3e\n", r.side, type_name(r.type),
                r.off, r.on);
  }
  CHECK(rows[0].on < rows[0].off);
  CHECK(rows[1].on < rows[1].off);
}

// kv_store_batch writes the bytes kv_store writes for each sequence alone (few rows: inline;
// a prefill-sized batch: split over the pool), and refuses the whole batch when one sequence is bad.
SITSRT_ISA_TEST_CASE(isa, "kv_store_batch equals per-sequence kv_store", "[attention][paged]", kIsas) {
  const int threads = GENERATE(1, 3);
  const std::int64_t rows_each = GENERATE(1, 150);  // 150 x 3 x 128 values: split over the pool
  CAPTURE(cpu::name(isa), threads, rows_each);
  const Layout layouts[] = {{KvType::kInt8, KvType::kInt4},
                            {KvType::kF16, KvType::kF16, true, true},
                            {KvType::kInt4, KvType::kF32, true, false}};
  const std::int64_t n_kv = 2, d = 64, width = n_kv * d;
  test::Rng rng(static_cast<std::uint64_t>(31 + rows_each));
  std::vector<Cache> one, batch;
  std::vector<std::vector<float>> k, v;
  for (const Layout& l : layouts) {
    const std::uint64_t seed = rng.next();
    test::Rng a(seed), b(seed);  // the same block tables
    one.emplace_back(l, n_kv, d, 3 + rows_each, 16, a);
    batch.emplace_back(l, n_kv, d, 3 + rows_each, 16, b);
    k.push_back(rng.normals(static_cast<std::size_t>(rows_each * width)));
    v.push_back(rng.normals(static_cast<std::size_t>(rows_each * width)));
  }
  cpu::CpuContext ctx(threads, isa);
  std::vector<cpu::KvStoreSequence> seqs;
  for (std::size_t i = 0; i < one.size(); ++i) {
    cpu::kv_store(ctx, one[i].view(), k[i].data(), width, v[i].data(), width, rows_each, n_kv, d, 3);
    seqs.push_back({batch[i].view(), k[i].data(), width, v[i].data(), width, rows_each, 3});
  }
  cpu::kv_store_batch(ctx, seqs, n_kv, d);
  for (std::size_t i = 0; i < one.size(); ++i) {
    CHECK(one[i].k == batch[i].k);
    CHECK(one[i].v == batch[i].v);
  }
  seqs[1].pos0 = 100;  // past its capacity: nothing of the batch is written
  const std::vector<std::byte> before = batch[0].k;
  CHECK_THROWS_AS(cpu::kv_store_batch(ctx, seqs, n_kv, d), Error);
  CHECK(batch[0].k == before);
}
