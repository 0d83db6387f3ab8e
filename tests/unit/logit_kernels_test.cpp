// The logit passes (cpu/logits): every level against the scalar definitions bit for bit (the
// token logprobs they feed are what audit replay compares), the vector exp against the C
// library's expf over a sweep of all floats, and the probe that guards the level choice.
#include "cpu/logits/logit_kernels.hpp"
#include "cpu/logits/expf_constants.hpp"
#include "support/isa.hpp"
#include "support/random.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace sitsrt;

namespace {

constexpr cpu::Isa kLevels[] = {cpu::Isa::kGeneric, cpu::Isa::kAvx2, cpu::Isa::kAvx512};
constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

bool same_float(float a, float b) {
  return std::isnan(a) ? std::isnan(b) : std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
}
bool same_double(double a, double b) {
  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

// A row of logits as models produce them, with what the passes must step around: NaN, -inf,
// ties of the largest value (signed zeros among them), a spread wide enough that exp underflows.
std::vector<float> awkward_row(test::Rng& rng, std::size_t n, float spread) {
  std::vector<float> row(n);
  for (float& x : row) x = rng.normal() * spread;
  for (std::size_t i = 0; i < n / 17; ++i) row[rng.next() % n] = kNaN;
  for (std::size_t i = 0; i < n / 23; ++i) row[rng.next() % n] = -kInf;
  if (n > 2 && rng.next() % 2 == 0) {  // the largest value twice
    float max = -kInf;
    for (const float x : row) max = x > max ? x : max;
    row[rng.next() % n] = max;
  }
  return row;
}

}  // namespace

SITSRT_ISA_TEST_CASE(isa, "vector exp rounds as the C library's expf, every 127th float and every 23rd in [-104, 0]",
                     "[logits]", kLevels) {
  const auto& kernels = cpu::detail::logit_kernels_for(isa);
  std::vector<float> x;
  std::vector<float> got;
  std::int64_t checked = 0;
  const auto sweep = [&](std::uint64_t first, std::uint64_t last, std::uint64_t stride) {
    constexpr std::size_t kBatch = 1 << 16;
    for (std::uint64_t bits = first; bits <= last;) {
      x.clear();
      for (; bits <= last && x.size() < kBatch; bits += stride)
        x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
      got.assign(x.size(), 0.0f);
      kernels.exp_row(x.data(), got.data(), static_cast<std::int64_t>(x.size()));
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (!same_float(got[i], std::exp(x[i]))) {
          FAIL("exp(" << x[i] << ") = " << got[i] << ", expf gives " << std::exp(x[i]));
        }
      }
      checked += static_cast<std::int64_t>(x.size());
    }
  };
  // All 2^32 inputs were compared once for each level (docs/performance.md, session 24); this
  // sweep keeps ~80 million of them, as many as CI's sanitizer runs afford.
  sweep(0, 0xFFFFFFFFull, 127);                                                           // every sign, exponent, NaN
  sweep(std::bit_cast<std::uint32_t>(-0.0f), std::bit_cast<std::uint32_t>(-104.0f), 23);  // the softmax range
  CHECK(checked > 80'000'000);
}

TEST_CASE("the exp table holds 2^(i/32), correctly rounded, less i << 47", "[logits]") {
  using cpu::detail::expf_constants::kExp2Table;
  for (std::uint64_t i = 0; i < kExp2Table.size(); ++i) {
    const auto value = static_cast<double>(std::exp2(static_cast<long double>(i) / 32.0L));
    INFO("slot " << i);
    CHECK(std::bit_cast<std::uint64_t>(value) - (i << 47) == kExp2Table[i]);
  }
}

SITSRT_ISA_TEST_CASE(isa, "max_logit finds the scalar loop's value and first index", "[logits]", kLevels) {
  const auto& kernels = cpu::detail::logit_kernels_for(isa);
  const auto& generic = cpu::detail::logit_kernels_generic();
  test::Rng rng(71);
  for (int trial = 0; trial < 600; ++trial) {
    const std::size_t n = trial < 500 ? 1 + rng.next() % 200 : 32000 + rng.next() % 40;
    std::vector<float> row = awkward_row(rng, n, 4.0f);
    if (trial % 7 == 0) {  // the largest is zero, as -0 first and +0 later, or the other way
      for (float& x : row) x = std::isnan(x) ? x : -std::fabs(x) - 1.0f;
      row[rng.next() % n] = trial % 14 == 0 ? -0.0f : 0.0f;
      row[rng.next() % n] = trial % 14 == 0 ? 0.0f : -0.0f;
    }
    const cpu::LogitMax want = generic.max_logit(row.data(), static_cast<std::int64_t>(n));
    const cpu::LogitMax got = kernels.max_logit(row.data(), static_cast<std::int64_t>(n));
    INFO("trial " << trial << ", n " << n);
    CHECK(got.index == want.index);
    CHECK(same_float(got.value, want.value));
    // The definition itself: nothing larger, nothing equal earlier.
    bool is_first_max = true;
    for (std::size_t i = 0; i < n && want.index >= 0; ++i) {
      if (std::isnan(row[i])) continue;
      if (row[i] > want.value || (static_cast<std::int64_t>(i) < want.index && row[i] == want.value))
        is_first_max = false;
    }
    CHECK(is_first_max);
  }
  const std::vector<float> all_nan(37, kNaN);
  const std::vector<float> nan_then_minus_inf = {kNaN, kNaN, -kInf, kNaN, -kInf};
  for (const auto* row : {&all_nan, &nan_then_minus_inf}) {
    const cpu::LogitMax got = kernels.max_logit(row->data(), static_cast<std::int64_t>(row->size()));
    CHECK(got.value == -kInf);
    CHECK(got.index == (row == &all_nan ? -1 : 2));
  }
  CHECK(kernels.max_logit(nullptr, 0).index == -1);
}

SITSRT_ISA_TEST_CASE(isa, "exp_sums adds the scalar loop's terms in its order, to the bit", "[logits]", kLevels) {
  const auto& kernels = cpu::detail::logit_kernels_for(isa);
  test::Rng rng(72);
  for (int trial = 0; trial < 400; ++trial) {
    const std::size_t n = trial < 300 ? 1 + rng.next() % 300 : 32000 + rng.next() % 40;
    const float spread = trial % 3 == 0 ? 40.0f : 3.0f;  // 40: many terms underflow to 0 or subnormals
    const std::vector<float> row = awkward_row(rng, n, spread);
    const float max = cpu::detail::logit_kernels_generic().max_logit(row.data(), static_cast<std::int64_t>(n)).value;
    if (!std::isfinite(max)) continue;
    // The definition, written out again here.
    double sum = 0.0;
    double weighted = 0.0;
    for (const float logit : row) {
      const float shifted = logit - max;
      const float e = std::exp(shifted);
      if (e > 0.0f) {
        sum += e;
        weighted += static_cast<double>(e) * shifted;
      }
    }
    const cpu::ExpSums got = kernels.exp_sums(row.data(), static_cast<std::int64_t>(n), max);
    INFO("trial " << trial << ", n " << n << ", spread " << spread);
    CHECK(same_double(got.sum, sum));
    CHECK(same_double(got.weighted, weighted));
    // And close to the exact sums, so the definition above is not just copied.
    long double exact = 0.0L;
    for (const float logit : row) exact += std::isnan(logit) ? 0.0L : std::exp(static_cast<long double>(logit) - max);
    CHECK(static_cast<double>(std::fabs(exact - got.sum) / exact) < 1e-6);
  }
}

SITSRT_ISA_TEST_CASE(isa, "the level's exp passes the probe that guards its use", "[logits]", kLevels) {
  CHECK(cpu::detail::exp_matches_libm(cpu::detail::logit_kernels_for(isa)));
}

SITSRT_ISA_TEST_CASE(isa, "draw weights are the C library's double exp rounded to float, every level", "[logits]",
                     kLevels) {
  const auto& kernels = cpu::detail::logit_kernels_for(isa);
  CHECK(cpu::detail::draw_weights_match_libm(kernels));
  test::Rng rng(73);
  std::size_t zeros = 0, ones = 0, checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = trial < 200 ? 1 + rng.next() % 300 : 32000 + rng.next() % 40;
    const float spread = trial % 3 == 0 ? 40.0f : 3.0f;
    const std::vector<float> row = awkward_row(rng, n, spread);
    const float max = cpu::detail::logit_kernels_generic().max_logit(row.data(), static_cast<std::int64_t>(n)).value;
    if (!std::isfinite(max)) continue;
    // Temperatures from sharp (exponents far below the zero threshold) to flat.
    const double inv_temperature = 1.0 / std::exp2(rng.uniform(-5.0f, 3.0f));
    std::vector<float> got(n, -1.0f);
    kernels.draw_weights(row.data(), static_cast<std::int64_t>(n), max, inv_temperature, got.data());
    INFO("trial " << trial << ", n " << n << ", spread " << spread << ", 1/T " << inv_temperature);
    for (std::size_t i = 0; i < n; ++i) {
      // The definition, written out again: NaN weighs 0, the rest the library's exp.
      const float want =
          std::isnan(row[i]) ? 0.0f : static_cast<float>(std::exp(static_cast<double>(row[i] - max) * inv_temperature));
      if (!same_float(got[i], want)) FAIL_CHECK("logit " << row[i] << " at " << i << ": " << got[i] << " vs " << want);
      zeros += want == 0.0f ? 1 : 0;
      ones += want == 1.0f ? 1 : 0;
      ++checked;
    }
  }
  CHECK(zeros > checked / 50);  // both ends were reached
  CHECK(ones > 100);
}

TEST_CASE("the draw probe rejects weights one ulp off anywhere in its range", "[logits]") {
  static double off_from = 0.0;
  static double off_to = 0.0;
  cpu::detail::LogitKernels wrong = cpu::detail::logit_kernels_generic();
  wrong.draw_weights = [](const float* logits, std::int64_t n, float max, double inv_t, float* out) {
    cpu::detail::logit_kernels_generic().draw_weights(logits, n, max, inv_t, out);
    for (std::int64_t i = 0; i < n; ++i) {
      const double x = static_cast<double>(logits[i] - max) * inv_t;
      if (x >= off_from && x <= off_to) out[i] = std::nextafter(out[i], kInf);
    }
  };
  for (const auto& [from, to] : {std::pair{-0.3, -0.29}, {-103.5, -103.4}, {-60.0, -59.99}, {-1e-9, 0.0}}) {
    off_from = from;
    off_to = to;
    INFO("off in [" << from << ", " << to << "]");
    CHECK_FALSE(cpu::detail::draw_weights_match_libm(wrong));
  }
  off_from = 1.0;  // empty range: the probe accepts the scalar form itself
  off_to = 0.0;
  CHECK(cpu::detail::draw_weights_match_libm(wrong));
}

TEST_CASE("the exp probe rejects an exp one ulp off anywhere in its range", "[logits]") {
  // A table whose exp is off by one ulp on a sliver of inputs: the probe must say no (so a C
  // library with another expf falls back to the scalar loop).
  static float off_from = 0.0f;
  static float off_to = 0.0f;
  cpu::detail::LogitKernels wrong = cpu::detail::logit_kernels_generic();
  wrong.exp_row = [](const float* x, float* out, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = std::exp(x[i]);
      if (x[i] >= off_from && x[i] <= off_to) out[i] = std::nextafter(out[i], kInf);
    }
  };
  for (const auto& [from, to] : {std::pair{-0.3f, -0.29f}, {-103.5f, -103.4f}, {-88.1f, -88.0f}, {-60.0f, -59.99f}}) {
    off_from = from;
    off_to = to;
    INFO("off in [" << from << ", " << to << "]");
    CHECK_FALSE(cpu::detail::exp_matches_libm(wrong));
  }
  off_from = 1.0f;  // empty range: the probe accepts the library's own exp
  off_to = 0.0f;
  CHECK(cpu::detail::exp_matches_libm(wrong));
}

TEST_CASE("max_logit and exp_sums (the host's choice) agree with the generic level", "[logits]") {
  test::Rng rng(73);
  const std::vector<float> row = awkward_row(rng, 32003, 5.0f);
  const auto& generic = cpu::detail::logit_kernels_generic();
  const cpu::LogitMax want = generic.max_logit(row.data(), static_cast<std::int64_t>(row.size()));
  const cpu::LogitMax got = cpu::max_logit(row);
  CHECK(got.index == want.index);
  const cpu::ExpSums sums = cpu::exp_sums(row, got.value);
  const cpu::ExpSums want_sums = generic.exp_sums(row.data(), static_cast<std::int64_t>(row.size()), got.value);
  CHECK(same_double(sums.sum, want_sums.sum));
  CHECK(same_double(sums.weighted, want_sums.weighted));
}

SITSRT_ISA_TEST_CASE(isa, "first_above finds the first logit strictly above a bound", "[logits]", kLevels) {
  const auto& kernels = cpu::detail::logit_kernels_for(isa);
  test::Rng rng(74);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::size_t n = 1 + rng.next() % 150;
    const std::vector<float> row = awkward_row(rng, n, 2.0f);
    const auto from = static_cast<std::int64_t>(rng.next() % (n + 1));
    // Bounds at, between and above the row's own values (equal values must not count).
    const float bound = trial % 3 == 0 ? row[rng.next() % n] : rng.normal() * 2.0f + 1.5f;
    std::int64_t want = from;
    while (want < static_cast<std::int64_t>(n) && !(row[want] > bound)) ++want;
    INFO("trial " << trial << ", n " << n << ", from " << from << ", bound " << bound);
    CHECK(kernels.first_above(row.data(), from, static_cast<std::int64_t>(n), bound) == want);
  }
}

TEST_CASE("top_k_logits keeps the k best, larger first, ties by lower id, never NaN", "[logits]") {
  test::Rng rng(75);
  std::vector<cpu::IdLogit> got;
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = trial < 250 ? 1 + rng.next() % 400 : 32000;
    std::vector<float> row = awkward_row(rng, n, 3.0f);
    for (std::size_t i = 0; i < n / 5; ++i) row[rng.next() % n] = std::round(row[rng.next() % n]);  // many ties
    const std::int64_t k =
        trial % 10 == 0 ? static_cast<std::int64_t>(n) + 3 : 1 + static_cast<std::int64_t>(rng.next() % 64);
    // Reference: every number, fully sorted by the rule.
    std::vector<cpu::IdLogit> want;
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isnan(row[i])) want.push_back({static_cast<std::int32_t>(i), row[i]});
    }
    std::stable_sort(want.begin(), want.end(),
                     [](const cpu::IdLogit& a, const cpu::IdLogit& b) { return a.logit > b.logit; });
    if (static_cast<std::int64_t>(want.size()) > k) want.resize(static_cast<std::size_t>(k));
    cpu::top_k_logits(row, k, got);
    INFO("trial " << trial << ", n " << n << ", k " << k);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      CHECK(got[i].id == want[i].id);
      CHECK(same_float(got[i].logit, want[i].logit));
    }
  }
  cpu::top_k_logits(std::vector<float>{1.0f, 2.0f}, 0, got);
  CHECK(got.empty());
}
