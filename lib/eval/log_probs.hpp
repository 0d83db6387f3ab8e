// Next-token distributions of one scored position, in double: log-softmax of a logits row, its
// uint16 quantization for perplexity base files (docs/perplexity.md), and the KL divergence of a
// stored (quantized) base distribution against a new logits row.
#pragma once

#include <cstdint>
#include <span>

namespace sitsrt::eval {

// log Σ exp(logits) and the top token of one row, computed in double. Throws Error
// (kInvalidArgument) when the row holds NaN or +inf; -inf entries are tokens of probability 0.
struct RowSoftmax {
  double log_z = 0.0;  // log of the softmax denominator: log p_i = logits[i] - log_z
  double max_logit = 0.0;
  std::int32_t argmax = 0;  // first index of the largest logit
};
RowSoftmax log_softmax(std::span<const float> logits);

// A base row: log p_i ≈ min_log_prob + scale · codes[i] (codes 0..65535), codes spanning
// [max(min log p, max log p − kQuantizedRange), max log p]; the target's log-probability and the
// top token are kept exactly (float), not quantized.
inline constexpr double kQuantizedRange = 64.0;  // nats below the top token; below that, code 0
struct QuantizedRow {
  float min_log_prob = 0.0f;
  float scale = 0.0f;
  float target_log_prob = 0.0f;
  std::int32_t top_token = 0;
};
// Fills `codes` (logits.size() entries) and returns the row's parameters.
QuantizedRow quantize_row(std::span<const float> logits, const RowSoftmax& softmax, std::int32_t target,
                          std::span<std::uint16_t> codes);

// The comparison of one position: the base distribution P (dequantized from `codes` and
// renormalized, so the estimate is a true KL divergence, >= 0 up to rounding) against the
// distribution Q of `logits`, whose log_softmax() is `softmax`.
struct RowComparison {
  double kld = 0.0;       // KL(P || Q) = Σ p_i (log p_i − log q_i), natural log
  double nll = 0.0;       // −log q(target)
  double nll_base = 0.0;  // −log p(target), from the exact stored value
  double p_diff = 0.0;    // q(target) − p(target)
  bool same_top = false;  // argmax Q == the base's stored top token
};
RowComparison compare_row(const QuantizedRow& base, std::span<const std::uint16_t> codes, std::span<const float> logits,
                          const RowSoftmax& softmax, std::int32_t target);

}  // namespace sitsrt::eval
