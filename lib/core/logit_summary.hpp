// What sampling and the per-token statistics need from one row of logits when a request asks for
// no more than its largest value, its softmax sums and its k best ids (greedy or top-k sampling
// without a repetition penalty, no full log-softmax). A backend computes it where the logits are
// (Backend::summarize_logits): a GPU then copies k * 8 bytes a row to the host instead of the
// vocabulary's 4 bytes an id, and the host makes no pass over the row.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace sitsrt {

struct IdLogit {
  std::int32_t id;
  float logit;
};

// The definitions are the CPU's (cpu/logits/logit_kernels.hpp): `max` and `argmax` as
// cpu::max_logit, the sums as cpu::exp_sums(row, max), `best` as cpu::top_k_logits(row, k).
struct LogitSummary {
  float max = -std::numeric_limits<float>::infinity();  // largest non-NaN logit
  std::int64_t argmax = -1;                             // first id holding it; -1 when every logit is NaN
  double exp_sum = 0.0;       // sum of e_i = exp(l_i - max) over the terms e_i > 0 (0 when max is not finite)
  double exp_weighted = 0.0;  // sum of e_i * (l_i - max) over the same terms
  std::vector<IdLogit> best;  // the k best (NaN never), best first, equal logits the lower id first
};

}  // namespace sitsrt
