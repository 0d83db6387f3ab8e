// Perplexity / KL-divergence math (lib/eval): log-softmax, the uint16 base rows, the row
// comparison and the llama.cpp-style statistics, against naive double references.
#include "eval/log_probs.hpp"
#include "eval/perplexity_stats.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

using namespace sitsrt;
using namespace sitsrt::eval;

namespace {

// Naive references, in long double, straight from the definitions.
std::vector<long double> naive_log_softmax(const std::vector<float>& logits) {
  long double z = 0;
  for (float v : logits) z += std::exp(static_cast<long double>(v));
  std::vector<long double> out;
  for (float v : logits) out.push_back(static_cast<long double>(v) - std::log(z));
  return out;
}

long double naive_kld(const std::vector<float>& p_logits, const std::vector<float>& q_logits) {
  const auto lp = naive_log_softmax(p_logits), lq = naive_log_softmax(q_logits);
  long double kld = 0;
  for (std::size_t i = 0; i < lp.size(); ++i) kld += std::exp(lp[i]) * (lp[i] - lq[i]);
  return kld;
}

std::vector<float> random_logits(std::mt19937& rng, std::size_t n, float spread) {
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> logits_of(const std::vector<double>& probabilities) {
  std::vector<float> v;
  for (double p : probabilities) v.push_back(static_cast<float>(std::log(p)));
  return v;
}

struct Compared {
  QuantizedRow base;
  RowComparison c;
};

Compared quantize_and_compare(const std::vector<float>& base_logits, const std::vector<float>& logits,
                              std::int32_t target) {
  std::vector<std::uint16_t> codes(base_logits.size());
  const QuantizedRow base = quantize_row(base_logits, log_softmax(base_logits), target, codes);
  return {base, compare_row(base, codes, logits, log_softmax(logits), target)};
}

// |KL(P' || Q) − KL(P || Q)| for P' = P with every log-probability moved by at most e after
// renormalization: Σ p_i [(e^{ε_i} − 1)(log p_i − log q_i) + e^{ε_i} ε_i] <= (e^e − 1) M + e^e · e,
// M = max_i |log p_i − log q_i|. Rounding to the codes moves a log-probability by at most scale/2,
// renormalizing by as much again: e = scale.
double quantization_bound(const QuantizedRow& base, const std::vector<float>& p, const std::vector<float>& q) {
  const auto lp = naive_log_softmax(p), lq = naive_log_softmax(q);
  long double m = 0;
  for (std::size_t i = 0; i < lp.size(); ++i) m = std::max(m, std::fabs(lp[i] - lq[i]));
  const double e = base.scale + 1e-7;  // + the float rounding of the stored parameters
  return (std::exp(e) - 1.0) * static_cast<double>(m) + std::exp(e) * e + 1e-12;
}

}  // namespace

TEST_CASE("log_softmax matches the naive reference and finds the first top token", "[eval]") {
  std::mt19937 rng(7);
  for (const float spread : {0.1f, 3.0f, 30.0f}) {
    std::vector<float> logits = random_logits(rng, 5000, spread);
    logits[17] = 1e3f;
    logits[4000] = 1e3f;  // a tie: the first index wins
    const RowSoftmax r = log_softmax(logits);
    const auto ref = naive_log_softmax(logits);
    CHECK(r.argmax == 17);
    CHECK(r.max_logit == 1e3);
    // log_z is exact to double rounding of a 5000-term sum.
    CHECK(std::fabs((static_cast<long double>(logits[3]) - r.log_z) - ref[3]) <= 1e-9L * (1 + std::fabs(ref[3])));
  }
  std::vector<float> masked = {0.0f, -std::numeric_limits<float>::infinity(), 0.0f};
  CHECK(log_softmax(masked).log_z == Approx(std::log(2.0)).epsilon(1e-15));
  masked[0] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(log_softmax(masked), Error);
  masked[0] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(log_softmax(masked), Error);
  CHECK_THROWS_AS(log_softmax(std::vector<float>{}), Error);
}

TEST_CASE("quantize_row keeps log-probabilities within half a step, the target and the top token exactly", "[eval]") {
  std::mt19937 rng(11);
  std::vector<float> logits = random_logits(rng, 4096, 4.0f);
  logits[100] = -200.0f;  // more than kQuantizedRange below the top: code 0
  std::vector<std::uint16_t> codes(logits.size());
  const RowSoftmax s = log_softmax(logits);
  const QuantizedRow row = quantize_row(logits, s, 5, codes);
  const auto ref = naive_log_softmax(logits);
  CHECK(row.top_token == s.argmax);
  CHECK(row.target_log_prob == Approx(static_cast<double>(ref[5])).epsilon(1e-6));
  CHECK(row.scale > 0.0f);
  CHECK(codes[100] == 0);
  CHECK(*std::max_element(codes.begin(), codes.end()) == 65535);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (i == 100) continue;
    const double dequantized = row.min_log_prob + static_cast<double>(row.scale) * codes[i];
    // half a step, plus float rounding of the stored parameters (relative 2^-24 of ~|min|)
    REQUIRE(std::fabs(dequantized - static_cast<double>(ref[i])) <= row.scale * 0.5 + 1e-5);
  }
  // A flat row quantizes with scale ~0 (the float rounding of min_log_prob).
  const std::vector<float> flat(8, 1.5f);
  std::vector<std::uint16_t> flat_codes(8);
  const QuantizedRow f = quantize_row(flat, log_softmax(flat), 0, flat_codes);
  CHECK(f.scale <= 1e-12f);
  CHECK(f.min_log_prob == Approx(-std::log(8.0)));
}

TEST_CASE("KL divergence of identical distributions is 0 up to the quantization", "[eval]") {
  std::mt19937 rng(3);
  for (const std::size_t n : {2u, 50u, 32000u}) {
    const std::vector<float> logits = random_logits(rng, n, 5.0f);
    const auto [base, c] = quantize_and_compare(logits, logits, 1);
    // KL(P' || P) <= χ²(P' || P) = Σ p_i (p'_i / p_i − 1)² <= (e^e − 1)² when every
    // |log p'_i − log p_i| <= e (e = scale: rounding plus renormalization): second order.
    const double e = base.scale + 1e-7;
    CHECK(c.kld >= -1e-12);
    CHECK(c.kld <= std::expm1(e) * std::expm1(e) + 1e-12);
    CHECK(c.same_top);
    CHECK(c.nll == Approx(c.nll_base).epsilon(1e-6));
    CHECK(std::fabs(c.p_diff) <= 1e-6);
  }
}

TEST_CASE("KL divergence of hand-built pairs equals the closed form", "[eval]") {
  // P = (1/2, 1/2), Q = (0.9, 0.1): KL = 1/2 ln(0.5/0.9) + 1/2 ln(0.5/0.1) = 1/2 ln(25/9); the
  // base row is flat (scale ~0), so there is no quantization error to speak of.
  const auto [flat_base, c2] = quantize_and_compare(logits_of({0.5, 0.5}), logits_of({0.9, 0.1}), 1);
  CHECK(flat_base.scale <= 1e-12f);
  CHECK(c2.kld == Approx(0.5 * std::log(25.0 / 9.0)).epsilon(1e-6));
  CHECK(c2.nll == Approx(-std::log(0.1)).epsilon(1e-6));
  CHECK(c2.nll_base == Approx(-std::log(0.5)).epsilon(1e-6));
  CHECK(c2.p_diff == Approx(0.1 - 0.5).epsilon(1e-6));
  CHECK(c2.same_top);  // P ties: its top token is the first, 0, as Q's
  // P = (0.7, 0.2, 0.1), Q = (0.5, 0.3, 0.2):
  // 0.7 ln 1.4 + 0.2 ln(2/3) + 0.1 ln 0.5 = 0.0851229...
  const std::vector<float> p = logits_of({0.7, 0.2, 0.1}), q = logits_of({0.5, 0.3, 0.2});
  const double closed = 0.7 * std::log(1.4) + 0.2 * std::log(2.0 / 3.0) + 0.1 * std::log(0.5);
  const auto [base, c3] = quantize_and_compare(p, q, 2);
  CHECK(std::fabs(c3.kld - closed) <= quantization_bound(base, p, q));
  CHECK(c3.kld == Approx(0.0851229).epsilon(1e-5));
  CHECK(c3.same_top);
  CHECK(c3.p_diff == Approx(0.2 - 0.1).epsilon(1e-5));
}

TEST_CASE("KL divergence of random rows matches the naive double reference within the quantization bound", "[eval]") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t n = trial < 10 ? 300 : 20000;
    std::vector<float> p = random_logits(rng, n, 2.0f + static_cast<float>(trial));
    std::vector<float> q = p;
    std::normal_distribution<float> noise(0.0f, trial % 2 == 0 ? 0.01f : 0.5f);
    for (float& v : q) v += noise(rng);
    const auto target = static_cast<std::int32_t>(rng() % n);
    const auto [base, c] = quantize_and_compare(p, q, target);
    const double reference = static_cast<double>(naive_kld(p, q));
    INFO("trial " << trial << ": KLD " << c.kld << " reference " << reference);
    CHECK(std::fabs(c.kld - reference) <= quantization_bound(base, p, q));
    const auto lq = naive_log_softmax(q), lp = naive_log_softmax(p);
    CHECK(c.nll == Approx(static_cast<double>(-lq[static_cast<std::size_t>(target)])).epsilon(1e-9));
    CHECK(c.nll_base == Approx(static_cast<double>(-lp[static_cast<std::size_t>(target)])).epsilon(1e-6));
    const auto top_p = std::max_element(p.begin(), p.end()) - p.begin();
    const auto top_q = std::max_element(q.begin(), q.end()) - q.begin();
    CHECK(c.same_top == (top_p == top_q));
  }
}

TEST_CASE("mean_with_error, percentile and quantiles follow their definitions", "[eval]") {
  const std::vector<double> x = {1.0, 4.0, 2.0, 8.0, 5.0};
  double sum = 0, sum2 = 0;
  for (double v : x) sum += v, sum2 += v * v;
  const Estimate m = mean_with_error(sum, sum2, x.size());
  // two-pass reference: sqrt(Σ (x − mean)² / n / (n − 1))
  const double mean = 4.0;
  double ss = 0;
  for (double v : x) ss += (v - mean) * (v - mean);
  CHECK(m.value == Approx(mean));
  CHECK(m.error == Approx(std::sqrt(ss / 5.0 / 4.0)));
  CHECK(mean_with_error(3.0, 9.0, 1).error == 0.0);
  CHECK(mean_with_error(0.0, 0.0, 0).value == 0.0);

  const std::vector<double> sorted = {1.0, 2.0, 3.0, 4.0};
  CHECK(percentile(sorted, 0.5) == Approx(2.5));
  CHECK(percentile(sorted, 0.9) == Approx(3.7));  // position 2.7
  CHECK(percentile(sorted, 0.0) == 1.0);
  CHECK(percentile(sorted, 1.0) == 4.0);
  CHECK(percentile(std::vector<double>{}, 0.5) == 0.0);
  const Quantiles q = quantiles({3.0, 1.0, 2.0});
  CHECK(q.median == 2.0);
  CHECK(q.min == 1.0);
  CHECK(q.max == 3.0);
  CHECK(q.p90 == Approx(2.8));
}

TEST_CASE("PerplexityAccumulator: exp of the mean nll with llama.cpp's error", "[eval]") {
  PerplexityAccumulator acc;
  const std::vector<double> nll = {1.0, 2.0, 3.0, 2.5};
  for (double v : nll) acc.add(v);
  const double mean = 2.125;
  double ss = 0;
  for (double v : nll) ss += (v - mean) * (v - mean);
  const Estimate ppl = acc.perplexity();
  CHECK(acc.count() == 4);
  CHECK(ppl.value == Approx(std::exp(mean)));
  CHECK(ppl.error == Approx(std::exp(mean) * std::sqrt(ss / 4.0 / 3.0)));
}

TEST_CASE("KldAccumulator: summary statistics against two-pass references", "[eval]") {
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  KldAccumulator acc;
  std::vector<RowComparison> rows;
  for (int i = 0; i < 500; ++i) {
    RowComparison c;
    c.nll_base = 3.0 * u(rng);
    c.nll = c.nll_base + 0.2 * (u(rng) - 0.4);
    c.kld = 0.01 * u(rng) * u(rng);
    c.p_diff = std::exp(-c.nll) - std::exp(-c.nll_base);
    c.same_top = u(rng) < 0.9;
    acc.add(c);
    rows.push_back(c);
  }
  const KldSummary s = acc.summary();
  const double n = 500;
  const auto mean_of = [&](auto f) {
    double t = 0;
    for (const auto& r : rows) t += f(r);
    return t / n;
  };
  const auto sem_of = [&](auto f) {  // standard error of the mean, two-pass
    const double m = mean_of(f);
    double ss = 0;
    for (const auto& r : rows) ss += (f(r) - m) * (f(r) - m);
    return std::sqrt(ss / n / (n - 1));
  };
  const auto nll = [](const RowComparison& r) { return r.nll; };
  const auto nll_base = [](const RowComparison& r) { return r.nll_base; };
  const auto diff = [](const RowComparison& r) { return r.nll - r.nll_base; };
  CHECK(s.count == 500);
  CHECK(s.ppl.value == Approx(std::exp(mean_of(nll))));
  CHECK(s.ppl.error == Approx(std::exp(mean_of(nll)) * sem_of(nll)));
  CHECK(s.ppl_base.value == Approx(std::exp(mean_of(nll_base))));
  // The ln-ratio's error from the covariance equals the standard error of the paired differences.
  CHECK(s.ln_ppl_ratio.value == Approx(mean_of(diff)));
  CHECK(s.ln_ppl_ratio.error == Approx(sem_of(diff)).epsilon(1e-6));
  CHECK(s.ppl_ratio.value == Approx(std::exp(mean_of(diff))));
  CHECK(s.ppl_diff.value == Approx(s.ppl.value - s.ppl_base.value));
  CHECK(s.kld.value == Approx(mean_of([](const RowComparison& r) { return r.kld; })));
  CHECK(s.kld.error == Approx(sem_of([](const RowComparison& r) { return r.kld; })));
  CHECK(s.rms_p_diff.value == Approx(std::sqrt(mean_of([](const RowComparison& r) { return r.p_diff * r.p_diff; }))));
  const double top = mean_of([](const RowComparison& r) { return r.same_top ? 1.0 : 0.0; });
  CHECK(s.same_top.value == Approx(top));
  CHECK(s.same_top.error == Approx(std::sqrt(top * (1 - top) / (n - 1))));
  std::vector<double> kld;
  for (const auto& r : rows) kld.push_back(r.kld);
  std::sort(kld.begin(), kld.end());
  CHECK(s.kld_quantiles.max == kld.back());
  CHECK(s.kld_quantiles.median == Approx(0.5 * (kld[249] + kld[250])));
  CHECK(s.kld_quantiles.p99 == Approx(kld[494] + 0.01 * (kld[495] - kld[494])));  // position 494.01
  // Correlation: cov / (sem_q · sem_base), with cov = Σ (a − ā)(b − b̄) / n / (n − 1).
  double cov = 0;
  for (const auto& r : rows) cov += (r.nll - mean_of(nll)) * (r.nll_base - mean_of(nll_base));
  cov /= n * (n - 1);
  CHECK(s.ln_ppl_correlation == Approx(cov / (sem_of(nll) * sem_of(nll_base))).epsilon(1e-6));
}
