// Perplexity and KL-divergence statistics over scored positions, with llama.cpp's (tools/
// perplexity) estimators: standard errors of means from the sample variance, percentiles by
// linear interpolation between sorted neighbours, covariance-aware errors of PPL ratios.
#pragma once

#include "eval/log_probs.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace sitsrt::eval {

struct Estimate {
  double value = 0.0;
  double error = 0.0;  // one standard error
};

// The mean of n samples from their sum and sum of squares, with the standard error of the mean
// sqrt((E[x²] − E[x]²) / (n − 1)); error 0 when n < 2 or the variance is not positive.
Estimate mean_with_error(double sum, double sum2, std::uint64_t n);

// Value at `fraction` (0..1) of ascending `sorted` values: position fraction · (n − 1), linearly
// interpolated; 0 for an empty span. percentile(v, 0.5) is the median.
double percentile(std::span<const double> sorted, double fraction);

// Perplexity of a sequence of negative log-likelihoods (natural log).
class PerplexityAccumulator {
 public:
  void add(double nll) noexcept;
  [[nodiscard]] std::uint64_t count() const noexcept { return count_; }
  // exp(mean nll) ± exp(mean nll) · error(mean nll).
  [[nodiscard]] Estimate perplexity() const noexcept;

 private:
  double sum_ = 0.0, sum2_ = 0.0;
  std::uint64_t count_ = 0;
};

struct Quantiles {
  double min = 0.0, p0_1 = 0.0, p1 = 0.0, p5 = 0.0, p10 = 0.0, p25 = 0.0, median = 0.0, p75 = 0.0, p90 = 0.0, p95 = 0.0,
         p99 = 0.0, p99_9 = 0.0, max = 0.0;
};
Quantiles quantiles(std::vector<double> values);

struct KldSummary {
  std::uint64_t count = 0;
  Estimate ppl;                     // PPL(Q), the evaluated model
  Estimate ppl_base;                // PPL(base), from the base file's exact target log-probabilities
  double ln_ppl_correlation = 0.0;  // correlation of the per-position nll of Q and base
  Estimate ln_ppl_ratio;            // mean ln(PPL(Q) / PPL(base))
  Estimate ppl_ratio;               // PPL(Q) / PPL(base)
  Estimate ppl_diff;                // PPL(Q) − PPL(base)
  Estimate kld;                     // mean KL(base || Q)
  Quantiles kld_quantiles;
  Estimate p_diff;  // mean Δp = q(target) − p(target)
  Quantiles p_diff_quantiles;
  Estimate rms_p_diff;  // sqrt(mean Δp²)
  Estimate same_top;    // fraction of positions whose top tokens agree
};

class KldAccumulator {
 public:
  void add(const RowComparison& c);
  [[nodiscard]] std::uint64_t count() const noexcept { return count_; }
  // The running estimates (no quantiles: those need the sorted values).
  [[nodiscard]] KldSummary running() const;
  [[nodiscard]] KldSummary summary() const;

 private:
  double nll_ = 0.0, nll2_ = 0.0, nll_base_ = 0.0, nll_base2_ = 0.0, nll_nll_base_ = 0.0;
  double kld_ = 0.0, kld2_ = 0.0, p_diff_ = 0.0, p_diff2_ = 0.0, p_diff4_ = 0.0;
  std::uint64_t same_top_ = 0, count_ = 0;
  std::vector<double> kld_values_, p_diff_values_;
};

}  // namespace sitsrt::eval
