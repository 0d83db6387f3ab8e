// The exact recent window of int8/int4 KV caches (cpu::KvLayerView::recent_window): a query
// reads its latest positions from f16 copies of the rows as they were quantized, the older ones
// quantized. Against the double reference of paged_attention_test with those rows in place of
// the cache's; bit-identical however the positions are cut into calls (a whole prefill, chunks,
// one-row decode steps: staged rows and the ring must agree) and on 1 or 3 threads; positions
// before exact_from read quantized; the ring holds the latest copies; bad views are refused.
#include "core/half.hpp"
#include "cpu/attention/attention.hpp"
#include "cpu/cpu_context.hpp"
#include "support/isa.hpp"
#include "support/paged_kv_reference.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <span>
#include <vector>

using namespace sitsrt;
using namespace sitsrt::test::paged_kv;
using cpu::KvType;

namespace {

bool quantized(KvType t) {
  return t == KvType::kInt8 || t == KvType::kInt4;
}

// One sequence run call by call as the CPU backend runs a step's attention: kv_store_batch with
// staging, attention_batch, kv_commit_recent. `in` holds positions 0 .. in.c.rows - 1 as query
// rows (pos0 = 0).
struct WindowRun {
  std::int64_t window, exact_from;
  std::vector<float> out;              // every row's output (in.ldq apart)
  std::vector<std::uint16_t> k_exact;  // the staged f16 row of every position (width apart)
  std::vector<std::uint16_t> v_exact;
  std::vector<std::uint16_t> k_ring, v_ring;

  WindowRun(cpu::Isa isa, int threads, const Inputs& in, Cache& cache, std::int64_t window_, std::int64_t exact_from_,
            const std::vector<std::int64_t>& sizes)
      : window(window_), exact_from(exact_from_) {
    const std::int64_t total = in.c.rows, width = in.width;
    const bool kw = quantized(cache.layout.k), vw = quantized(cache.layout.v);
    out.assign(in.q.size(), kSentinel);
    k_exact.assign(static_cast<std::size_t>(total * width), 0xFFFF);
    v_exact.assign(k_exact.size(), 0xFFFF);
    k_ring.assign(static_cast<std::size_t>(window * width), 0xFFFF);  // NaN until written
    v_ring.assign(k_ring.size(), 0xFFFF);
    cpu::CpuContext ctx(threads, isa);
    ctx.reserve_scratch(cpu::attention_scratch_floats(cache.capacity, in.shape));
    std::int64_t b = 0;
    for (std::size_t c = 0; b < total; ++c) {
      const std::int64_t n = std::min(sizes[std::min(c, sizes.size() - 1)], total - b);
      cpu::KvLayerView view = cache.view();
      view.recent_window = window;
      view.exact_from = exact_from;
      view.k_recent = kw ? reinterpret_cast<std::byte*>(k_ring.data()) : nullptr;
      view.v_recent = vw ? reinterpret_cast<std::byte*>(v_ring.data()) : nullptr;
      std::vector<std::uint16_t> sk(static_cast<std::size_t>(n * width)), sv(sk.size());
      const cpu::KvStaging staging{kw ? sk.data() : nullptr, vw ? sv.data() : nullptr};
      const cpu::KvStoreSequence store{
          view, in.k.data() + b * in.ldkv, in.ldkv, in.v.data() + b * in.ldkv, in.ldkv, n, b, staging};
      const cpu::AttentionSequence attend{in.q.data() + b * in.ldq, in.ldq, n,      b, view,
                                          out.data() + b * in.ldq,  in.ldq, staging};
      cpu::kv_store_batch(ctx, std::span(&store, 1), in.c.n_kv, in.c.head_dim);
      cpu::attention_batch(ctx, std::span(&attend, 1), in.shape);
      cpu::kv_commit_recent(std::span(&store, 1), in.c.n_kv, in.c.head_dim);
      std::copy(sk.begin(), sk.end(), k_exact.begin() + b * width);
      std::copy(sv.begin(), sv.end(), v_exact.begin() + b * width);
      b += n;
    }
  }

  // The reference's rows: position p's staged copy where row i's window covers it.
  [[nodiscard]] RowOverride rows(const Inputs& in, const Cache& cache) const {
    const auto pick = [this, &in](const std::vector<std::uint16_t>& exact, bool windowed) {
      return [this, &in, &exact, windowed](std::int64_t i, std::int64_t p) -> const std::byte* {
        if (!windowed || p < std::max(exact_from, i - window + 1)) return nullptr;
        return reinterpret_cast<const std::byte*>(exact.data() + p * in.width);
      };
    };
    return {pick(k_exact, quantized(cache.layout.k)), pick(v_exact, quantized(cache.layout.v))};
  }
};

struct WindowCase {
  Layout layout;
  Case c;  // pos0 = 0: every position is a query row
  std::int64_t window, exact_from = 0, block_size = 16;
  std::int64_t checked_from = 0;  // rows compared with the reference (all are compared across runs)
};

// Runs the case cut into calls several ways and on 1 and 3 threads; all must agree bit for bit
// and match the reference over the staged rows (tight) and the original values (loose).
void check_window(cpu::Isa isa, const WindowCase& w, const std::vector<std::vector<std::int64_t>>& cuts) {
  const Layout& l = w.layout;
  const Case& c = w.c;
  CAPTURE(cpu::name(isa), type_name(l.k), type_name(l.v), l.k_rotated, l.v_rotated, l.head_major, w.window,
          w.exact_from, w.block_size, c.group, c.head_dim, c.rows, c.window, c.n_kv);
  const Inputs in(c, seed_of(c, l, w.block_size) + static_cast<std::uint64_t>(w.window * 13 + w.exact_from));
  std::vector<float> first_out;
  for (const int threads : {3, 1}) {
    for (const auto& sizes : cuts) {
      if (threads == 3 && &sizes != &cuts.front()) continue;  // threads change nothing else
      CAPTURE(threads, sizes);
      test::Rng rng(seed_of(c, l, w.block_size) + 1);
      Cache cache(l, c.n_kv, c.head_dim, c.rows + 3, w.block_size, rng);
      const WindowRun run(isa, threads, in, cache, w.window, w.exact_from, sizes);
      if (first_out.empty()) {
        first_out = run.out;
        const RowOverride rows = run.rows(in, cache);
        const Reference ref = reference(in, cache, &rows, w.checked_from);
        std::vector<float> actual = output_elements(in, run.out);
        actual.erase(actual.begin(), actual.begin() + w.checked_from * in.n_heads * c.head_dim);
        test::check_close(ref.exact, actual, ref.tight, "windowed attention vs the rows it reads");
        test::check_close(ref.original, actual, ref.loose, "windowed attention vs the original values");
        // The ring ends with the latest copies; the copies are the stored values in f16.
        for (std::int64_t p = std::max<std::int64_t>(0, c.rows - w.window); p < c.rows; ++p) {
          const auto slot = static_cast<std::size_t>((p % w.window) * in.width);
          const auto at = static_cast<std::size_t>(p * in.width);
          if (quantized(l.k)) REQUIRE(std::memcmp(&run.k_ring[slot], &run.k_exact[at], 2 * in.width) == 0);
          if (quantized(l.v)) REQUIRE(std::memcmp(&run.v_ring[slot], &run.v_exact[at], 2 * in.width) == 0);
        }
        for (std::int64_t p = 0; p < c.rows && quantized(l.k); ++p) {
          for (std::int64_t g = 0; g < c.n_kv; ++g) {
            std::vector<double> x(static_cast<std::size_t>(c.head_dim));
            for (std::int64_t e = 0; e < c.head_dim; ++e)
              x[static_cast<std::size_t>(e)] = in.k[static_cast<std::size_t>(p * in.ldkv + g * c.head_dim + e)];
            double norm = 0.0;
            for (double v : x) norm += std::fabs(v);
            if (l.k_rotated) hadamard(x);
            double worst = 0.0;  // over the bound: f16 rounding plus the rotation's float butterflies
            for (std::int64_t e = 0; e < c.head_dim; ++e) {
              const double got = fp16_to_fp32(run.k_exact[static_cast<std::size_t>(p * in.width + g * c.head_dim + e)]);
              const double want = x[static_cast<std::size_t>(e)];
              worst = std::max(worst, std::fabs(got - want) / (std::ldexp(std::fabs(want), -11) + 1e-6 * norm));
            }
            CAPTURE(p, g);
            REQUIRE(worst <= 1.0);
          }
        }
      } else {
        REQUIRE(std::memcmp(first_out.data(), run.out.data(), first_out.size() * sizeof(float)) == 0);
      }
    }
  }
}

const cpu::Isa kWindowIsas[] = {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni};

}  // namespace

SITSRT_ISA_TEST_CASE(isa, "an exact recent window reads f16 copies of the latest rows, however the calls are cut",
                     "[attention][paged][window]", kWindowIsas) {
  const Layout layout = GENERATE(
      Layout{KvType::kInt4, KvType::kInt4, true, true}, Layout{KvType::kInt8, KvType::kInt4, true, true},
      Layout{KvType::kInt4, KvType::kF16, true, false}, Layout{KvType::kF16, KvType::kInt8, false, false},
      Layout{KvType::kInt4, KvType::kF16, true, false, true},  // stored by head
      Layout{KvType::kF32, KvType::kInt8, false, true, true}, Layout{KvType::kInt8, KvType::kInt4, true, true, true});
  const std::int64_t window = GENERATE(1, 32);
  const std::vector<std::vector<std::int64_t>> cuts = {{1000}, {7}, {40, 1}, {1}};
  check_window(isa, {layout, {2, 64, 0, 70}, window}, cuts);
  check_window(isa, {layout, {1, 32, 0, 45, 0, 3}, window, 0, 5}, cuts);          // 3 kv heads, blocks of 5
  check_window(isa, {layout, {2, 64, 0, 60, 24}, window}, cuts);                  // sliding window of 24
  check_window(isa, {layout, {2, 64, 0, 50}, window, 20}, {{25, 1}, {3}, {50}});  // exact from 20
}

SITSRT_ISA_TEST_CASE(isa, "an exact window after a long context split over threads", "[attention][paged][window]",
                     kWindowIsas) {
  // One decode row at 1100 positions: its chunks are split over threads; the exact one is last.
  const Layout layout =
      GENERATE(Layout{KvType::kInt4, KvType::kInt4, true, true}, Layout{KvType::kInt8, KvType::kInt8, false, false},
               Layout{KvType::kInt4, KvType::kInt8, true, false, true});
  check_window(isa, {layout, {4, 64, 0, 1100, 0, 1}, 32, 0, 16, 1090}, {{1099, 1}, {256, 300, 1}});
}

TEST_CASE("a windowed side needs its ring and staging rows, a window of at most 256", "[attention][paged][window]") {
  test::Rng rng(5);
  const Layout l{KvType::kInt4, KvType::kF16, false, false};
  Cache cache(l, 1, 32, 16, 16, rng);
  std::vector<float> k(32, 0.5f), v(32, 0.25f), q(32, 1.0f), out(32);
  std::vector<std::uint16_t> ring(4 * 32), staged(32);
  cpu::CpuContext ctx(1, cpu::Isa::kGeneric);
  ctx.reserve_scratch(cpu::attention_scratch_floats(16, {1, 1, 32, 0.2f, 0}));
  cpu::KvLayerView view = cache.view();
  view.recent_window = 4;
  const auto store = [&](const cpu::KvLayerView& vw, std::uint16_t* stage) {
    const cpu::KvStoreSequence s{vw, k.data(), 32, v.data(), 32, 1, 0, {stage, nullptr}};
    cpu::kv_store_batch(ctx, std::span(&s, 1), 1, 32);
  };
  REQUIRE_THROWS_WITH(store(view, staged.data()), Catch::Contains("without its f16 rows"));
  view.k_recent = reinterpret_cast<std::byte*>(ring.data());
  REQUIRE_THROWS_WITH(store(view, nullptr), Catch::Contains("without staging rows"));
  store(view, staged.data());
  const cpu::AttentionShape shape{1, 1, 32, 0.2f, 0};
  const cpu::AttentionSequence bare{q.data(), 32, 1, 0, view, out.data(), 32, {}};
  REQUIRE_THROWS_WITH(cpu::attention_batch(ctx, std::span(&bare, 1), shape), Catch::Contains("staged rows"));
  view.recent_window = 257;
  REQUIRE_THROWS_WITH(store(view, staged.data()), Catch::Contains("recent window 257"));
  view.recent_window = 4;
  view.exact_from = -1;
  REQUIRE_THROWS_WITH(store(view, staged.data()), Catch::Contains("from position -1"));
}
