#include "eval/perplexity_stats.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace sitsrt::eval {

Estimate mean_with_error(double sum, double sum2, std::uint64_t n) {
  if (n == 0) return {};
  const double count = static_cast<double>(n);
  const double mean = sum / count;
  const double variance = sum2 / count - mean * mean;
  return {mean, n > 1 && variance > 0.0 ? std::sqrt(variance / (count - 1.0)) : 0.0};
}

double percentile(std::span<const double> sorted, double fraction) {
  if (sorted.empty()) return 0.0;
  if (fraction <= 0.0) return sorted.front();
  if (fraction >= 1.0) return sorted.back();
  const double position = fraction * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(position);
  const double weight = position - static_cast<double>(below);
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  return (1.0 - weight) * sorted[below] + weight * sorted[above];
}

void PerplexityAccumulator::add(double nll) noexcept {
  sum_ += nll;
  sum2_ += nll * nll;
  ++count_;
}

Estimate PerplexityAccumulator::perplexity() const noexcept {
  const Estimate nll = mean_with_error(sum_, sum2_, count_);
  const double ppl = std::exp(nll.value);
  return {ppl, ppl * nll.error};
}

Quantiles quantiles(std::vector<double> values) {
  static constexpr std::pair<double Quantiles::*, double> kLevels[] = {
      {&Quantiles::min, 0.0},  {&Quantiles::p0_1, 0.001}, {&Quantiles::p1, 0.01},    {&Quantiles::p5, 0.05},
      {&Quantiles::p10, 0.10}, {&Quantiles::p25, 0.25},   {&Quantiles::median, 0.5}, {&Quantiles::p75, 0.75},
      {&Quantiles::p90, 0.90}, {&Quantiles::p95, 0.95},   {&Quantiles::p99, 0.99},   {&Quantiles::p99_9, 0.999},
      {&Quantiles::max, 1.0}};
  std::sort(values.begin(), values.end());
  Quantiles q;
  for (const auto& [field, fraction] : kLevels) q.*field = percentile(values, fraction);
  return q;
}

void KldAccumulator::add(const RowComparison& c) {
  nll_ += c.nll;
  nll2_ += c.nll * c.nll;
  nll_base_ += c.nll_base;
  nll_base2_ += c.nll_base * c.nll_base;
  nll_nll_base_ += c.nll * c.nll_base;
  kld_ += c.kld;
  kld2_ += c.kld * c.kld;
  p_diff_ += c.p_diff;
  const double p_diff2 = c.p_diff * c.p_diff;
  p_diff2_ += p_diff2;
  p_diff4_ += p_diff2 * p_diff2;
  same_top_ += c.same_top ? 1 : 0;
  ++count_;
  kld_values_.push_back(c.kld);
  p_diff_values_.push_back(c.p_diff);
}

KldSummary KldAccumulator::running() const {
  KldSummary s;
  s.count = count_;
  if (count_ == 0) return s;
  const double n = static_cast<double>(count_);
  const Estimate log_ppl = mean_with_error(nll_, nll2_, count_);
  const Estimate log_ppl_base = mean_with_error(nll_base_, nll_base2_, count_);
  s.ppl = {std::exp(log_ppl.value), std::exp(log_ppl.value) * log_ppl.error};
  s.ppl_base = {std::exp(log_ppl_base.value), std::exp(log_ppl_base.value) * log_ppl_base.error};
  // Covariance of the two means (as the errors above are of the means).
  const double cov = count_ > 1 ? (nll_nll_base_ / n - log_ppl.value * log_ppl_base.value) / (n - 1.0) : 0.0;
  const double denominator = log_ppl.error * log_ppl_base.error;
  s.ln_ppl_correlation = denominator > 0.0 ? cov / denominator : 0.0;
  const double ratio_var = log_ppl.error * log_ppl.error + log_ppl_base.error * log_ppl_base.error - 2.0 * cov;
  s.ln_ppl_ratio = {log_ppl.value - log_ppl_base.value, std::sqrt(std::max(0.0, ratio_var))};
  const double ratio = std::exp(s.ln_ppl_ratio.value);
  s.ppl_ratio = {ratio, ratio * s.ln_ppl_ratio.error};
  const double ppl_cov = s.ppl.value * s.ppl_base.value * cov;
  const double diff_var = s.ppl.error * s.ppl.error + s.ppl_base.error * s.ppl_base.error - 2.0 * ppl_cov;
  s.ppl_diff = {s.ppl.value - s.ppl_base.value, std::sqrt(std::max(0.0, diff_var))};
  s.kld = mean_with_error(kld_, kld2_, count_);
  s.p_diff = mean_with_error(p_diff_, p_diff2_, count_);
  const Estimate mse = mean_with_error(p_diff2_, p_diff4_, count_);
  const double rms = std::sqrt(mse.value);
  s.rms_p_diff = {rms, rms > 0.0 ? 0.5 / rms * mse.error : 0.0};
  const double top = static_cast<double>(same_top_) / n;
  s.same_top = {top, count_ > 1 ? std::sqrt(top * (1.0 - top) / (n - 1.0)) : 0.0};
  return s;
}

KldSummary KldAccumulator::summary() const {
  KldSummary s = running();
  s.kld_quantiles = quantiles(kld_values_);
  s.p_diff_quantiles = quantiles(p_diff_values_);
  return s;
}

}  // namespace sitsrt::eval
