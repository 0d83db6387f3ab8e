#include "eval/log_probs.hpp"

#include "core/check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sitsrt::eval {

RowSoftmax log_softmax(std::span<const float> logits) {
  if (logits.empty()) raise(ErrorCode::kInvalidArgument, "log_softmax: empty logits row");
  RowSoftmax r;
  r.max_logit = -std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double v = logits[i];
    if (std::isnan(v) || v == std::numeric_limits<double>::infinity()) {
      raise(ErrorCode::kInvalidArgument, "log_softmax: logit {} of token {} is not finite", logits[i], i);
    }
    if (v > r.max_logit) {
      r.max_logit = v;
      r.argmax = static_cast<std::int32_t>(i);
    }
  }
  if (std::isinf(r.max_logit)) raise(ErrorCode::kInvalidArgument, "log_softmax: every logit is -inf");
  double sum = 0.0;
  for (const float v : logits) sum += std::exp(static_cast<double>(v) - r.max_logit);
  r.log_z = r.max_logit + std::log(sum);
  return r;
}

QuantizedRow quantize_row(std::span<const float> logits, const RowSoftmax& softmax, std::int32_t target,
                          std::span<std::uint16_t> codes) {
  SITSRT_ASSERT(codes.size() == logits.size());
  SITSRT_ASSERT(target >= 0 && static_cast<std::size_t>(target) < logits.size());
  double lowest = softmax.max_logit;
  for (const float v : logits) {
    if (std::isfinite(v)) lowest = std::min(lowest, static_cast<double>(v));
  }
  const double top = softmax.max_logit - softmax.log_z;
  const double floor = std::max(lowest - softmax.log_z, top - kQuantizedRange);
  QuantizedRow row;
  row.min_log_prob = static_cast<float>(floor);
  // >= 0 even where rounding min_log_prob to float went above the top (a flat row).
  row.scale = static_cast<float>(std::max(0.0, top - static_cast<double>(row.min_log_prob)) / 65535.0);
  row.target_log_prob =
      static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(target)]) - softmax.log_z);
  row.top_token = softmax.argmax;
  // The codes are rounded against the stored (float) parameters, which is what a reader sees.
  const double lo = row.min_log_prob;
  const double inv = row.scale > 0.0f ? 1.0 / static_cast<double>(row.scale) : 0.0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double level = (static_cast<double>(logits[i]) - softmax.log_z - lo) * inv;  // -inf for -inf logits
    codes[i] = static_cast<std::uint16_t>(std::lround(std::clamp(level, 0.0, 65535.0)));
  }
  return row;
}

RowComparison compare_row(const QuantizedRow& base, std::span<const std::uint16_t> codes, std::span<const float> logits,
                          const RowSoftmax& q, std::int32_t target) {
  SITSRT_ASSERT(codes.size() == logits.size());
  SITSRT_ASSERT(target >= 0 && static_cast<std::size_t>(target) < logits.size());
  const double lo = base.min_log_prob, scale = base.scale;
  // With P' the dequantized base (unnormalized, total S): KL(P'/S || Q) = T / S − log S,
  // T = Σ p'_i (log p'_i − log q_i).
  double s = 0.0, t = 0.0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double log_p = lo + scale * static_cast<double>(codes[i]);
    const double p = std::exp(log_p);
    s += p;
    t += p * (log_p - (static_cast<double>(logits[i]) - q.log_z));
  }
  RowComparison c;
  c.kld = t / s - std::log(s);
  c.nll = q.log_z - static_cast<double>(logits[static_cast<std::size_t>(target)]);
  c.nll_base = -static_cast<double>(base.target_log_prob);
  c.p_diff = std::exp(-c.nll) - std::exp(-c.nll_base);
  c.same_top = q.argmax == base.top_token;
  return c;
}

}  // namespace sitsrt::eval
