// kv_store and causal GQA attention on every ISA level this CPU supports, F32 and F16 caches,
// against a naive double-precision reference that reads the cache back.
#include "cpu/attention/attention.hpp"
#include "core/half.hpp"
#include "cpu/cpu_context.hpp"
#include "support/isa.hpp"
#include "support/random.hpp"
#include "support/tolerance.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

using namespace sitsrt;

namespace {

const cpu::Isa kIsas[] = {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni};

// A KV cache of one layer with `capacity` positions; rows padded by 32 bytes so a kernel that
// assumes row_stride == width is caught.
struct TestCache {
  DType type;
  std::int64_t width, capacity;
  std::size_t stride;
  std::vector<std::byte> k, v;

  TestCache(DType t, std::int64_t w, std::int64_t cap)
      : type(t),
        width(w),
        capacity(cap),
        stride(static_cast<std::size_t>(w) * (t == DType::kF32 ? 4 : 2) + 32),
        k(stride * static_cast<std::size_t>(cap), std::byte{0xFF}),
        v(k.size(), std::byte{0xFF}) {}

  cpu::KvLayerView view() {
    const cpu::KvType t = type == DType::kF32 ? cpu::KvType::kF32 : cpu::KvType::kF16;
    return cpu::contiguous_kv(t, t, k.data(), v.data(), stride, stride, capacity);
  }

  // Element e of position p, as the kernels read it.
  [[nodiscard]] double at(const std::vector<std::byte>& data, std::int64_t p, std::int64_t e) const {
    const std::byte* row = data.data() + static_cast<std::size_t>(p) * stride;
    if (type == DType::kF32) {
      float f;
      std::memcpy(&f, row + 4 * e, 4);
      return f;
    }
    std::uint16_t h;
    std::memcpy(&h, row + 2 * e, 2);
    return fp16_to_fp32(h);
  }
};

struct Case {
  DType type;
  std::int64_t group, head_dim, pos0, rows;
  std::int64_t window = 0;  // sliding window (0: full causal)
  std::int64_t n_kv = 2;
};

constexpr float kSentinel = -777.0f;

// A cache holding positions [0, pos0 + rows) (earlier ones stored in a separate call, as a
// prefill after a previous turn does) and query rows for positions pos0 .. pos0 + rows - 1.
struct Problem {
  Case c;
  std::int64_t n_heads, d, width, ldq;
  static constexpr std::int64_t kCapacity = 4096;
  cpu::AttentionShape shape;
  TestCache cache;
  std::vector<float> q;

  Problem(cpu::Isa isa, const Case& cs)
      : c(cs),
        n_heads(cs.n_kv * cs.group),
        d(cs.head_dim),
        width(cs.n_kv * cs.head_dim),
        ldq(n_heads * d + 5),
        shape{n_heads, cs.n_kv, d, static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))), cs.window},
        cache(cs.type, width, kCapacity) {
    test::Rng rng(static_cast<std::uint64_t>(c.group * 1000 + d * 10 + c.pos0 + c.rows + c.window * 7 + c.n_kv));
    const std::int64_t total = c.pos0 + c.rows;
    const std::int64_t ldkv = width + 3;
    std::vector<float> k(static_cast<std::size_t>(total * ldkv)), v(k.size());
    for (std::int64_t p = 0; p < total; ++p) {
      const float ks = std::exp2(rng.uniform(-1.0f, 1.5f));  // peaky and flat score rows
      for (std::int64_t e = 0; e < width; ++e) {
        k[static_cast<std::size_t>(p * ldkv + e)] = rng.normal() * ks;
        v[static_cast<std::size_t>(p * ldkv + e)] = rng.normal() * std::exp2(rng.uniform(-2.0f, 2.0f));
      }
    }
    cpu::CpuContext ctx(2, isa);
    if (c.pos0 > 0) cpu::kv_store(ctx, cache.view(), k.data(), ldkv, v.data(), ldkv, c.pos0, c.n_kv, d, 0);
    cpu::kv_store(ctx, cache.view(), k.data() + c.pos0 * ldkv, ldkv, v.data() + c.pos0 * ldkv, ldkv, c.rows, c.n_kv, d,
                  c.pos0);
    q.assign(static_cast<std::size_t>(c.rows * ldq), std::nanf(""));
    for (std::int64_t i = 0; i < c.rows; ++i) {
      for (std::int64_t e = 0; e < n_heads * d; ++e) q[static_cast<std::size_t>(i * ldq + e)] = rng.normal() * 1.5f;
    }
  }

  // Attention output (ldq floats per row; gaps keep kSentinel) with `threads` threads.
  std::vector<float> run(cpu::Isa isa, int threads) {
    cpu::CpuContext ctx(threads, isa);
    ctx.reserve_scratch(cpu::attention_scratch_floats(kCapacity, shape));
    std::vector<float> out(q.size(), kSentinel);
    cpu::attention(ctx, q.data(), ldq, c.rows, c.pos0, cache.view(), shape, out.data(), ldq);
    return out;
  }
};

// Runs attention for the rows of Problem(c) and checks every output against
// softmax(q k^T * scale) v computed in double from the stored cache.
void check_attention(cpu::Isa isa, int threads, const Case& c) {
  CAPTURE(cpu::name(isa), threads, name(c.type), c.group, c.head_dim, c.pos0, c.rows, c.window, c.n_kv);
  Problem problem(isa, c);
  const std::int64_t n_heads = problem.n_heads, d = problem.d, ldq = problem.ldq;
  const cpu::AttentionShape& shape = problem.shape;
  const TestCache& cache = problem.cache;
  const std::vector<float>& q = problem.q;
  const std::vector<float> out = problem.run(isa, threads);

  std::vector<double> expected, tolerance;
  std::vector<float> actual;
  for (std::int64_t i = 0; i < c.rows; ++i) {
    // Keys attended: positions first .. pos (the last `window` of them when windowed).
    const std::int64_t pos = c.pos0 + i;
    const std::int64_t first = c.window > 0 ? std::max<std::int64_t>(0, pos - c.window + 1) : 0;
    const std::int64_t n = pos - first + 1;
    for (std::int64_t h = 0; h < n_heads; ++h) {
      const std::int64_t g = h / c.group;
      const float* qh = q.data() + i * ldq + h * d;
      std::vector<double> s(static_cast<std::size_t>(n)), p(s.size());
      double score_err = 0.0;
      for (std::int64_t t = 0; t < n; ++t) {
        double dot = 0.0, abs = 0.0;
        for (std::int64_t e = 0; e < d; ++e) {
          const double kv = cache.at(cache.k, first + t, g * d + e);
          dot += qh[e] * kv;
          abs += std::fabs(qh[e] * kv);
        }
        s[static_cast<std::size_t>(t)] = dot * shape.scale;
        // q is pre-multiplied by the float scale (1 rounding) before a d-term float dot.
        score_err = std::max(score_err, test::dot_tolerance(d, abs * shape.scale, 2));
      }
      const double max = *std::max_element(s.begin(), s.end());
      double z = 0.0;
      for (std::int64_t t = 0; t < n; ++t)
        z += p[static_cast<std::size_t>(t)] = std::exp(s[static_cast<std::size_t>(t)] - max);
      for (auto& pt : p) pt /= z;
      for (std::int64_t e = 0; e < d; ++e) {
        double o = 0.0, weighted_abs = 0.0;
        for (std::int64_t t = 0; t < n; ++t) {
          const double vv = cache.at(cache.v, first + t, g * d + e);
          o += p[static_cast<std::size_t>(t)] * vv;
          weighted_abs += p[static_cast<std::size_t>(t)] * std::fabs(vv);
        }
        expected.push_back(o);
        tolerance.push_back(test::softmax_weighted_tolerance(score_err, n, weighted_abs));
        actual.push_back(out[static_cast<std::size_t>(i * ldq + h * d + e)]);
      }
    }
    for (std::int64_t e = n_heads * d; e < ldq && i + 1 < c.rows; ++e) {
      REQUIRE(out[static_cast<std::size_t>(i * ldq + e)] == kSentinel);  // gaps untouched
    }
  }
  test::check_close(expected, actual, tolerance, "attention");
}

}  // namespace

SITSRT_ISA_TEST_CASE(isa, "attention matches a double reference: GQA, F32/F16 caches, decode and prefill",
                     "[attention]", kIsas) {
  const int threads = GENERATE(1, 2);
  const DType type = GENERATE(DType::kF32, DType::kF16);
  const std::int64_t group = GENERATE(1, 2, 4);
  const std::int64_t head_dim = GENERATE(8, 64, 128, 72);
  check_attention(isa, threads, {type, group, head_dim, 0, 1});   // decode, first token
  check_attention(isa, threads, {type, group, head_dim, 37, 1});  // decode at position 37
  check_attention(isa, threads, {type, group, head_dim, 0, 9});   // prefill from an empty cache
  check_attention(isa, threads, {type, group, head_dim, 5, 6});   // prefill after stored positions
}

SITSRT_ISA_TEST_CASE(isa, "sliding-window attention attends to the last `window` positions only", "[attention]",
                     kIsas) {
  const DType type = GENERATE(DType::kF32, DType::kF16);
  const std::int64_t window = GENERATE(1, 4, 16);
  check_attention(isa, 2, {type, 2, 64, 37, 1, window});  // decode far past the window
  check_attention(isa, 2, {type, 4, 72, 0, 9, window});   // prefill crossing the window edge
  check_attention(isa, 1, {type, 1, 8, 5, 6, window});    // prefill after stored positions
}

SITSRT_ISA_TEST_CASE(isa, "attention decodes at the end of a 4096-position cache", "[attention]", kIsas) {
  const DType type = GENERATE(DType::kF32, DType::kF16);
  check_attention(isa, 2, {type, 4, 64, 4095, 1});
}

// Few (row, kv head) pairs at a long context: the positions are split into chunks run by
// different threads and merged (attention.cpp); 1 thread runs the chunks in sequence.
SITSRT_ISA_TEST_CASE(isa, "attention splits long contexts over threads and matches the reference", "[attention]",
                     kIsas) {
  const DType type = GENERATE(DType::kF32, DType::kF16);
  const int threads = GENERATE(1, 2, 3);
  check_attention(isa, threads, {type, 4, 64, 2999, 1, 0, 1});     // decode at 3000 positions
  check_attention(isa, threads, {type, 2, 72, 2999, 1, 1500, 1});  // window not chunk aligned
  check_attention(isa, threads, {type, 1, 128, 2050, 3, 0, 1});    // three rows, chunk edges
}

SITSRT_ISA_TEST_CASE(isa, "attention results do not depend on the thread count (split or not)", "[attention]", kIsas) {
  const DType type = GENERATE(DType::kF32, DType::kF16);
  for (const Case& c : {Case{type, 4, 64, 3000, 1, 0, 1}, Case{type, 2, 64, 2500, 2, 1100, 2},
                        Case{type, 2, 64, 1800, 1, 0, 8}, Case{type, 1, 40, 100, 7, 0, 2}}) {
    CAPTURE(cpu::name(isa), name(type), c.group, c.pos0, c.rows, c.window, c.n_kv);
    Problem problem(isa, c);
    const std::vector<float> one = problem.run(isa, 1);
    for (int threads : {2, 3, 4, 5}) {
      CAPTURE(threads);
      const std::vector<float> many = problem.run(isa, threads);
      REQUIRE(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)) == 0);
    }
  }
}

SITSRT_ISA_TEST_CASE(isa, "kv_store writes f16 rows bit-exactly and refuses positions past capacity", "[attention]",
                     kIsas) {
  CAPTURE(cpu::name(isa));
  const std::int64_t width = 37;  // not a multiple of any vector width
  TestCache cache(DType::kF16, width, 8);
  test::Rng rng(3);
  std::vector<float> k(3 * width), v(3 * width);
  for (std::size_t i = 0; i < k.size(); ++i) {
    // Normal, subnormal-range and overflowing magnitudes.
    k[i] = rng.normal() * std::exp2(rng.uniform(-26.0f, 17.0f));
    v[i] = rng.normal();
  }
  cpu::CpuContext ctx(2, isa);
  cpu::kv_store(ctx, cache.view(), k.data(), width, v.data(), width, 3, 1, width, 5);
  for (std::int64_t r = 0; r < 3; ++r) {
    for (std::int64_t e = 0; e < width; ++e) {
      std::uint16_t got;
      std::memcpy(&got, cache.k.data() + static_cast<std::size_t>(5 + r) * cache.stride + 2 * e, 2);
      REQUIRE(got == fp32_to_fp16(k[static_cast<std::size_t>(r * width + e)]));
    }
  }
  for (std::int64_t pos0 : {6, 8, -1}) {
    CAPTURE(pos0);
    try {
      cpu::kv_store(ctx, cache.view(), k.data(), width, v.data(), width, 3, 1, width, pos0);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kInvalidArgument);
    }
  }
  const cpu::AttentionShape shape{2, 1, width, 1.0f};
  ctx.reserve_scratch(cpu::attention_scratch_floats(8, shape));
  std::vector<float> q(static_cast<std::size_t>(2 * width)), out(q.size());
  CHECK_THROWS_AS(cpu::attention(ctx, q.data(), 2 * width, 2, 7, cache.view(), shape, out.data(), 2 * width), Error);
}

TEST_CASE("attention scratch is linear in the capacity", "[attention]") {
  const cpu::AttentionShape shape{32, 8, 128, 0.088f};
  const std::size_t a = cpu::attention_scratch_floats(1024, shape);
  const std::size_t b = cpu::attention_scratch_floats(2048, shape);
  const std::size_t c = cpu::attention_scratch_floats(4096, shape);
  CHECK(c - b == 2 * (b - a));
  // A split's chunk partials: up to 4 per 256 positions, each 4 heads x 128 floats plus max/sum.
  CHECK(b - a == 4 * (1024 / 256) * (4 * 128 + 16));
}
