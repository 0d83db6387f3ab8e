// rms_norm, rope, swiglu and add on every ISA level this CPU supports and 1 / 3 threads,
// against double-precision references, plus rope's algebraic properties.
#include "cpu/cpu_context.hpp"
#include "cpu/elementwise/elementwise.hpp"
#include "cpu/elementwise/norm.hpp"
#include "cpu/elementwise/rope.hpp"
#include "support/isa.hpp"
#include "support/random.hpp"
#include "support/tolerance.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

using namespace sitsrt;

namespace {

constexpr double kU = test::kUnitRoundoff;

// Rows of n floats at stride ld with mixed per-row scales; the gaps between rows hold NaN so a
// kernel that reads or writes outside a row shows up.
std::vector<float> make_rows(std::int64_t rows, std::int64_t n, std::int64_t ld, test::Rng& rng, float lo = -4.0f,
                             float hi = 4.0f) {
  std::vector<float> x(static_cast<std::size_t>(rows * ld), std::nanf(""));
  for (std::int64_t i = 0; i < rows; ++i) {
    const float scale = std::exp2(rng.uniform(lo, hi));
    for (std::int64_t c = 0; c < n; ++c) {
      const float v = rng.normal() * scale;
      x[static_cast<std::size_t>(i * ld + c)] = v == 0.0f ? scale : v;
    }
  }
  return x;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0;
}

// Gaps between rows of `after` must be bit-identical to `before` (NaN included).
void check_gaps_untouched(const std::vector<float>& before, const std::vector<float>& after, std::int64_t rows,
                          std::int64_t n, std::int64_t ld) {
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t c = n; c < ld && i * ld + c < static_cast<std::int64_t>(after.size()); ++c) {
      const auto k = static_cast<std::size_t>(i * ld + c);
      REQUIRE(same_bits(before[k], after[k]));
    }
  }
}

const cpu::Isa kIsas[] = {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni};

// ---- rope reference ----

double rope_theta(const cpu::RopeParams& p, std::int64_t pos, std::int64_t pair) {
  const double factor = p.freq_factors != nullptr ? p.freq_factors[pair] : 1.0;
  return static_cast<double>(pos) * p.freq_scale *
         std::pow(static_cast<double>(p.freq_base),
                  -2.0 * static_cast<double>(pair) / static_cast<double>(p.rot_dims)) /
         factor;
}

// The indices (a, b) of pair j in a head.
std::pair<std::int64_t, std::int64_t> pair_index(const cpu::RopeParams& p, std::int64_t j) {
  return p.style == cpu::RopeStyle::kNeox ? std::pair{j, j + p.rot_dims / 2} : std::pair{2 * j, 2 * j + 1};
}

}  // namespace

SITSRT_ISA_TEST_CASE(isa, "rms_norm matches a double reference", "[kernels]", kIsas) {
  const int threads = GENERATE(1, 3);
  const std::int64_t n = GENERATE(1, 7, 64, 4096, 4099);
  const std::int64_t rows = GENERATE(1, 5);
  const bool in_place = GENERATE(false, true);
  CAPTURE(cpu::name(isa), threads, n, rows, in_place);
  test::Rng rng(static_cast<std::uint64_t>(n * 31 + rows));
  const std::int64_t ld = n + 3;
  std::vector<float> x = make_rows(rows, n, ld, rng);
  std::vector<float> weight(static_cast<std::size_t>(n));
  for (auto& w : weight) w = rng.uniform(0.25f, 2.0f) * (rng.uniform(0.0f, 1.0f) < 0.5f ? -1.0f : 1.0f);
  const float eps = 1e-5f;
  cpu::CpuContext ctx(threads, isa);
  std::vector<float> y(x.size(), std::nanf(""));
  std::vector<float>& out = in_place ? x : y;
  const std::vector<float> x_in = x, out_before = out;
  cpu::rms_norm(ctx, x.data(), ld, rows, n, weight.data(), eps, out.data(), ld);

  std::vector<double> expected, tolerance;
  std::vector<float> actual;
  for (std::int64_t i = 0; i < rows; ++i) {
    double ss = 0.0;
    for (std::int64_t c = 0; c < n; ++c)
      ss +=
          static_cast<double>(x_in[static_cast<std::size_t>(i * ld + c)]) * x_in[static_cast<std::size_t>(i * ld + c)];
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (std::int64_t c = 0; c < n; ++c) {
      const double ref = x_in[static_cast<std::size_t>(i * ld + c)] * scale * weight[static_cast<std::size_t>(c)];
      expected.push_back(ref);
      // Sum of squares: gamma(n + 1) relative, halved by the square root; the scale's rounding
      // to float and the two products: 3 u more.
      tolerance.push_back(std::fabs(ref) * (0.5 * test::gamma(n + 1) + 4 * kU));
      actual.push_back(out[static_cast<std::size_t>(i * ld + c)]);
    }
  }
  test::check_close(expected, actual, tolerance, "rms_norm");
  check_gaps_untouched(out_before, out, rows, n, ld);
}

SITSRT_ISA_TEST_CASE(isa, "rope matches a double reference for both styles", "[kernels]", kIsas) {
  const int threads = GENERATE(1, 3);
  const cpu::RopeStyle style = GENERATE(cpu::RopeStyle::kNormal, cpu::RopeStyle::kNeox);
  const std::int64_t rot_dims = GENERATE(64, 32, 6);  // all of head_dim, part of it, a few pairs
  const bool factors = GENERATE(false, true);
  CAPTURE(cpu::name(isa), threads, style == cpu::RopeStyle::kNeox, rot_dims, factors);
  const std::int64_t head_dim = 64, n_heads = 3, ld = n_heads * head_dim + 5;
  const std::vector<std::int32_t> positions = {0, 7, 3, 1000, 65535, 1, 200001};  // non-contiguous
  const auto rows = static_cast<std::int64_t>(positions.size());
  test::Rng rng(static_cast<std::uint64_t>(rot_dims * 3 + (factors ? 1 : 0)));
  std::vector<float> freq_factors(static_cast<std::size_t>(rot_dims / 2));
  for (auto& f : freq_factors) f = rng.uniform(1.0f, 8.0f);
  const cpu::RopeParams params{head_dim, rot_dims, 500000.0f, 0.5f, factors ? freq_factors.data() : nullptr, style};
  std::vector<float> x = make_rows(rows, n_heads * head_dim, ld, rng);
  const std::vector<float> x_in = x;
  cpu::CpuContext ctx(threads, isa);
  cpu::rope(ctx, x.data(), ld, rows, n_heads, positions.data(), params);

  std::vector<double> expected, tolerance;
  std::vector<float> actual;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t h = 0; h < n_heads; ++h) {
      const std::int64_t base = i * ld + h * head_dim;
      const auto at = [&](const std::vector<float>& v, std::int64_t d) {
        return v[static_cast<std::size_t>(base + d)];
      };
      for (std::int64_t j = 0; j < rot_dims / 2; ++j) {
        const auto [a, b] = pair_index(params, j);
        const double theta = rope_theta(params, positions[static_cast<std::size_t>(i)], j);
        const double x0 = at(x_in, a), x1 = at(x_in, b);
        // cos/sin rounded to float (u each), two products and a sum (3 u): 4 u of |x0| + |x1|.
        const double tol = 4 * kU * (std::fabs(x0) + std::fabs(x1));
        expected.insert(expected.end(),
                        {x0 * std::cos(theta) - x1 * std::sin(theta), x0 * std::sin(theta) + x1 * std::cos(theta)});
        tolerance.insert(tolerance.end(), {tol, tol});
        actual.insert(actual.end(), {at(x, a), at(x, b)});
      }
      for (std::int64_t d = rot_dims; d < head_dim; ++d) REQUIRE(same_bits(at(x, d), at(x_in, d)));  // not rotated
    }
  }
  test::check_close(expected, actual, tolerance, "rope");
  check_gaps_untouched(x_in, x, rows, n_heads * head_dim, ld);
}

SITSRT_ISA_TEST_CASE(isa, "rope preserves pair norms and makes q.k depend only on the position difference", "[kernels]",
                     kIsas) {
  const cpu::RopeStyle style = GENERATE(cpu::RopeStyle::kNormal, cpu::RopeStyle::kNeox);
  CAPTURE(style == cpu::RopeStyle::kNeox, cpu::name(isa));
  const std::int64_t d = 128;
  const cpu::RopeParams params{d, d, 10000.0f, 1.0f, nullptr, style};
  cpu::CpuContext ctx(2, isa);
  test::Rng rng(17);
  const std::vector<float> q = rng.normals(d), k = rng.normals(d);
  const auto rotated = [&](const std::vector<float>& v, std::int32_t pos) {
    std::vector<float> r = v;
    cpu::rope(ctx, r.data(), d, 1, 1, &pos, params);
    return r;
  };
  // Pair norms.
  for (std::int32_t pos : {1, 12345}) {
    const std::vector<float> r = rotated(q, pos);
    for (std::int64_t j = 0; j < d / 2; ++j) {
      const auto [a, b] = pair_index(params, j);
      const double before = static_cast<double>(q[a]) * q[a] + static_cast<double>(q[b]) * q[b];
      const double after = static_cast<double>(r[a]) * r[a] + static_cast<double>(r[b]) * r[b];
      REQUIRE(std::fabs(after - before) <= 10 * kU * before);
    }
  }
  // <rope(q, a), rope(k, b)> is the same for (a, b) and (a + t, b + t).
  const auto dot = [](const std::vector<float>& u, const std::vector<float>& v) {
    double s = 0.0, abs = 0.0;
    for (std::size_t i = 0; i < u.size(); ++i) {
      s += static_cast<double>(u[i]) * v[i];
      abs += std::fabs(static_cast<double>(u[i]) * v[i]);
    }
    return std::pair{s, abs};
  };
  double abs_qk = 0.0;
  for (std::int64_t i = 0; i < d; ++i)
    abs_qk += std::fabs(q[static_cast<std::size_t>(i)]) * std::fabs(k[static_cast<std::size_t>(i)]);
  for (auto [a, b, t] : {std::tuple{5, 2, 100}, std::tuple{0, 9, 4096}, std::tuple{300, 300, 7}}) {
    CAPTURE(a, b, t);
    const auto [first, abs1] = dot(rotated(q, a), rotated(k, b));
    const auto [second, abs2] = dot(rotated(q, a + t), rotated(k, b + t));
    // Each rotated element is within 4 u (|x0| + |x1|) of exact: at most 8 u of the pair
    // magnitudes in each dot, twice.
    REQUIRE(std::fabs(first - second) <= 32 * kU * abs_qk);
  }
}

TEST_CASE("rope rejects a bad shape", "[kernels]") {
  cpu::CpuContext ctx(1, cpu::Isa::kGeneric);
  std::vector<float> x(64);
  const std::int32_t pos = 0;
  CHECK_THROWS_AS(cpu::rope(ctx, x.data(), 64, 1, 1, &pos, cpu::RopeParams{64, 65, 10000.0f, 1.0f, nullptr, {}}),
                  Error);
  CHECK_THROWS_AS(cpu::rope(ctx, x.data(), 64, 1, 1, &pos, cpu::RopeParams{64, 7, 10000.0f, 1.0f, nullptr, {}}), Error);
}

SITSRT_ISA_TEST_CASE(isa, "swiglu matches a double reference", "[kernels]", kIsas) {
  const int threads = GENERATE(1, 3);
  const std::int64_t n = GENERATE(1, 13, 64, 11008, 40000);
  const std::int64_t rows = GENERATE(1, 4);
  const int alias = GENERATE(0, 1, 2);  // 0: separate output, 1: out = gate, 2: out = up
  CAPTURE(cpu::name(isa), threads, n, rows, alias);
  test::Rng rng(static_cast<std::uint64_t>(n + rows * 7));
  const std::int64_t ld = n + 2;
  std::vector<float> gate = make_rows(rows, n, ld, rng, -2.0f, 3.0f), up = make_rows(rows, n, ld, rng);
  // Extremes: exp(-g) overflows or underflows float here.
  const float extremes[] = {-100.0f, 100.0f, -88.5f, 88.5f, -30.0f, 30.0f, 1e-30f, -1e-30f};
  for (std::size_t i = 0; i < std::size(extremes) && static_cast<std::int64_t>(i) < n; ++i) gate[i] = extremes[i];
  const std::vector<float> gate_in = gate, up_in = up;
  std::vector<float> separate(gate.size(), std::nanf(""));
  std::vector<float>& out = alias == 1 ? gate : alias == 2 ? up : separate;
  const std::vector<float> out_before = out;
  cpu::CpuContext ctx(threads, isa);
  cpu::swiglu(ctx, gate.data(), ld, up.data(), ld, rows, n, out.data(), ld);
  std::vector<double> expected, tolerance;
  std::vector<float> actual;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t c = 0; c < n; ++c) {
      const auto k = static_cast<std::size_t>(i * ld + c);
      const double g = gate_in[k], u = up_in[k];
      const double ref = g * u / (1.0 + std::exp(-g));
      expected.push_back(ref);
      // exp within a few ulp (8 u), then a product, a sum and a division (3 u); values below
      // ~1e-36 come from the clamped exp and only need to be tiny.
      tolerance.push_back(12 * kU * std::fabs(ref) + 1e-30);
      actual.push_back(out[k]);
    }
  }
  test::check_close(expected, actual, tolerance, "swiglu");
  check_gaps_untouched(out_before, out, rows, n, ld);
}

SITSRT_ISA_TEST_CASE(isa, "add matches a double reference", "[kernels]", kIsas) {
  const int threads = GENERATE(1, 3);
  const std::int64_t n = GENERATE(1, 17, 4096, 50001);
  const std::int64_t rows = GENERATE(1, 3);
  CAPTURE(cpu::name(isa), threads, n, rows);
  test::Rng rng(static_cast<std::uint64_t>(n * 5 + rows));
  const std::int64_t ld = n + 1;
  std::vector<float> a = make_rows(rows, n, ld, rng), b = make_rows(rows, n, ld, rng);
  const std::vector<float> a_in = a, b_in = b;
  cpu::CpuContext ctx(threads, isa);
  cpu::add(ctx, a.data(), ld, b.data(), ld, rows, n, a.data(), ld);  // in place, as the residual add runs
  std::vector<double> expected, tolerance;
  std::vector<float> actual;
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t c = 0; c < n; ++c) {
      const auto k = static_cast<std::size_t>(i * ld + c);
      const double ref = static_cast<double>(a_in[k]) + b_in[k];
      expected.push_back(ref);
      tolerance.push_back(test::gamma(1) * std::fabs(ref));  // one correctly rounded addition
      actual.push_back(a[k]);
    }
  }
  test::check_close(expected, actual, tolerance, "add");
  check_gaps_untouched(a_in, a, rows, n, ld);
}

TEST_CASE("decode rope reuses its cos/sin only for the same position and parameters", "[kernels]") {
  // The one-row path memoises the last position's table per thread, and batches of up to 64 rows
  // (a decode step of several sequences) each position's table per thread; every change of a
  // parameter they depend on, freq_factors' values at an unchanged address included, must give
  // the result of a fresh computation (batches of more rows compute every row afresh, with the
  // same formula, so all must agree bit for bit).
  cpu::CpuContext ctx(2, cpu::Isa::kGeneric);
  test::Rng rng(5);
  constexpr std::int64_t d = 64, heads = 3, fresh_rows = 65;
  std::vector<float> factors(d / 2, 1.0f);
  cpu::RopeParams params{d, d, 10000.0f, 1.0f, nullptr, cpu::RopeStyle::kNeox, {}, {}};
  const auto check = [&](std::int32_t pos) {
    const std::vector<float> x = rng.normals(heads * d);
    std::vector<float> one = x, two, fresh;
    for (int i = 0; i < 2; ++i) two.insert(two.end(), x.begin(), x.end());
    for (int i = 0; i < fresh_rows; ++i) fresh.insert(fresh.end(), x.begin(), x.end());
    const std::vector<std::int32_t> positions(fresh_rows, pos);
    cpu::rope(ctx, one.data(), heads * d, 1, heads, positions.data(), params);
    cpu::rope(ctx, two.data(), heads * d, 2, heads, positions.data(), params);
    cpu::rope(ctx, fresh.data(), heads * d, fresh_rows, heads, positions.data(), params);
    CHECK(std::equal(one.begin(), one.end(), fresh.begin()));
    CHECK(std::equal(two.begin(), two.end(), fresh.begin()));
  };
  check(7);
  check(7);  // memoised
  check(8);
  check(7 + 64);  // the batch cache's slot of 7, another position
  params.freq_base = 500000.0f;
  check(8);
  params.freq_factors = factors.data();
  check(8);
  factors[3] = 4.0f;  // same address, other values
  check(8);
  params.yarn = {true, 2048.0, 32.0, 1.0, 1.0};
  params.freq_scale = 0.25f;
  check(8);
  params.yarn.attn_factor = 0.9;
  check(8);
  params.llama3 = {true, 8.0, 1.0, 4.0, 8192.0};
  params.yarn.enabled = false;
  check(8);
  params.llama3.factor = 16.0;
  check(8);
  params.style = cpu::RopeStyle::kNormal;  // not part of the table, but changes the pairing
  check(8);
}
