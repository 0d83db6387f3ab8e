#include "runtime/sampler.hpp"

#include "core/check.hpp"
#include "cpu/logits/logit_kernels.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>

namespace sitsrt {
namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

// Orders by logit, descending; equal logits rank the lower id first.
template <typename T>
bool ranks_higher(const T& a, const T& b, float a_value, float b_value) noexcept {
  return a_value > b_value || (a_value == b_value && a.id < b.id);
}

// Uniform in [0, 1) from the top 53 bits of the generator's raw output: std's distributions
// are implementation-defined, this is the same everywhere.
double uniform_unit(std::mt19937_64& rng) noexcept {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// A key whose ascending order is the logits' descending order (-0 and +0 the same key): the
// float's bits with the sign bit flipped for positives, all bits for negatives, inverted.
std::uint32_t descending_key(float logit) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(logit == 0.0f ? 0.0f : logit);
  return (bits & 0x80000000u) != 0 ? bits : ~(bits | 0x80000000u);
}

// Sorts candidates (non-NaN logits, ascending ids) into rank order: logit descending, equal
// logits by lower id, the permutation std::sort with ranks_higher gives (a total order). A
// stable LSD radix sort on descending_key in three passes of 11 bits (a pass whose digit every
// key shares is skipped): linear in the vocabulary where std::sort took 1.8 ms a token over 32k
// candidates and 17.8 ms over Gemma 3's 262k (top-p without top-k, as OpenAI-style requests ask).
template <typename T>
void sort_by_rank(std::vector<T>& items, std::vector<T>& scratch) {
  const std::size_t n = items.size();
  if (n < 256) {
    std::sort(items.begin(), items.end(), [](const T& a, const T& b) { return ranks_higher(a, b, a.logit, b.logit); });
    return;
  }
  constexpr int kDigitBits = 11;
  constexpr std::uint32_t kDigitMask = (1u << kDigitBits) - 1;
  scratch.resize(n);
  T* src = items.data();
  T* dst = scratch.data();
  std::array<std::uint32_t, kDigitMask + 1> start{};
  for (int shift = 0; shift < 32; shift += kDigitBits) {
    start.fill(0);
    for (std::size_t i = 0; i < n; ++i) ++start[(descending_key(src[i].logit) >> shift) & kDigitMask];
    if (std::find(start.begin(), start.end(), static_cast<std::uint32_t>(n)) != start.end()) continue;
    std::uint32_t offset = 0;
    for (std::uint32_t& s : start) offset += std::exchange(s, offset);
    for (std::size_t i = 0; i < n; ++i) dst[start[(descending_key(src[i].logit) >> shift) & kDigitMask]++] = src[i];
    std::swap(src, dst);
  }
  if (src != items.data()) std::copy(src, src + n, items.data());
}

// Largest value, skipping NaN; -inf when there is none.
float max_logit(std::span<const float> logits) noexcept {
  return cpu::max_logit(logits).value;
}

}  // namespace

void compute_token_stats(std::span<const float> logits, std::int32_t chosen, std::int32_t k, TokenStats& out) {
  compute_token_stats(logits, max_logit(logits), chosen, k, out);
}

void compute_token_stats(std::span<const float> logits, float max, std::int32_t chosen, std::int32_t k,
                         TokenStats& out) {
  const auto vocab_size = static_cast<std::int64_t>(logits.size());
  if (vocab_size == 0) raise(ErrorCode::kInvalidArgument, "compute_token_stats: empty logits");
  if (chosen < 0 || chosen >= vocab_size) {
    raise(ErrorCode::kInvalidArgument, "compute_token_stats: chosen id {} is outside the {} logits", chosen,
          vocab_size);
  }
  if (!std::isfinite(max)) raise(ErrorCode::kInvalidArgument, "compute_token_stats: no finite logit (max {})", max);

  // sum = sum e_i and weighted = sum e_i * (l_i - max) with e_i = exp(l_i - max), so that
  // log Z = max + log(sum) and H = -sum p_i log p_i = log(sum) - weighted / sum.
  const auto [sum, weighted] = cpu::exp_sums(logits, max);
  const double log_sum = std::log(sum);
  const double log_z = max + log_sum;
  out.logprob = static_cast<float>(logits[chosen] - log_z);
  out.entropy = static_cast<float>(log_sum - weighted / sum);

  cpu::top_k_logits(logits, k, out.best);
  out.top.clear();
  for (const cpu::IdLogit& entry : out.best) out.top.push_back({entry.id, static_cast<float>(entry.logit - log_z)});
}

void token_stats_from_summary(const LogitSummary& summary, std::int32_t chosen, std::int32_t k, TokenStats& out) {
  if (!std::isfinite(summary.max)) {
    raise(ErrorCode::kInvalidArgument, "token statistics: no finite logit (max {})", summary.max);
  }
  const auto found =
      std::find_if(summary.best.begin(), summary.best.end(), [&](const IdLogit& entry) { return entry.id == chosen; });
  if (found == summary.best.end()) {
    raise(ErrorCode::kInvalidArgument, "token statistics: chosen id {} is not among the summary's {} best", chosen,
          summary.best.size());
  }
  // As from the row (same sums, same order of operations).
  const double log_sum = std::log(summary.exp_sum);
  const double log_z = summary.max + log_sum;
  out.logprob = static_cast<float>(found->logit - log_z);
  out.entropy = static_cast<float>(log_sum - summary.exp_weighted / summary.exp_sum);
  out.top.clear();
  const std::size_t kept = std::min(summary.best.size(), static_cast<std::size_t>(std::max(k, 0)));
  for (std::size_t i = 0; i < kept; ++i) {
    out.top.push_back({summary.best[i].id, static_cast<float>(summary.best[i].logit - log_z)});
  }
}

Sampler::Sampler(SamplingParams params, std::int32_t vocab_size)
    : params_(params), vocab_size_(vocab_size), rng_(params.seed) {
  if (vocab_size <= 0) raise(ErrorCode::kInvalidArgument, "sampler: vocab_size must be positive, got {}", vocab_size);
  if (!std::isfinite(params_.temperature)) {
    raise(ErrorCode::kInvalidArgument, "sampler: temperature must be finite, got {}", params_.temperature);
  }
  if (std::isnan(params_.top_p) || params_.top_p < 0.0f) {
    raise(ErrorCode::kInvalidArgument, "sampler: top_p must be >= 0 (>= 1 disables it), got {}", params_.top_p);
  }
  if (std::isnan(params_.min_p) || params_.min_p > 1.0f) {
    raise(ErrorCode::kInvalidArgument, "sampler: min_p must be <= 1 (<= 0 disables it), got {}", params_.min_p);
  }
  if (!std::isfinite(params_.repeat_penalty) || params_.repeat_penalty <= 0.0f) {
    raise(ErrorCode::kInvalidArgument, "sampler: repeat_penalty must be positive and finite, got {}",
          params_.repeat_penalty);
  }
  if (params_.repeat_last_n < -1) {
    raise(ErrorCode::kInvalidArgument, "sampler: repeat_last_n must be >= -1 (-1: whole history), got {}",
          params_.repeat_last_n);
  }
  candidates_.reserve(static_cast<std::size_t>(vocab_size));
  if (params_.top_p < 1.0f) sort_scratch_.reserve(static_cast<std::size_t>(vocab_size));
  if (draws_whole_vocabulary()) weights_.reserve(static_cast<std::size_t>(vocab_size));
  if (params_.top_k > 0) best_.reserve(static_cast<std::size_t>(std::min(params_.top_k, vocab_size - 1)) + 1);
  if (params_.repeat_penalty != 1.0f && params_.repeat_last_n != 0) {
    penalised_.reserve(static_cast<std::size_t>(vocab_size));
    penalty_applied_.assign(static_cast<std::size_t>(vocab_size), 0);
  }
}

std::span<const float> Sampler::penalise(std::span<const float> logits, std::span<const std::int32_t> history) {
  if (logits.size() != static_cast<std::size_t>(vocab_size_)) {
    raise(ErrorCode::kInvalidArgument, "sampler: got {} logits for a vocabulary of {}", logits.size(), vocab_size_);
  }
  if (penalty_applied_.empty() || history.empty()) return logits;
  const std::size_t window = params_.repeat_last_n < 0
                                 ? history.size()
                                 : std::min(history.size(), static_cast<std::size_t>(params_.repeat_last_n));
  const std::span<const std::int32_t> recent = history.last(window);
  for (const std::int32_t id : recent) {
    if (id < 0 || id >= vocab_size_) {
      raise(ErrorCode::kInvalidArgument, "sampler: history token {} is outside the vocabulary of {}", id, vocab_size_);
    }
  }
  penalised_.assign(logits.begin(), logits.end());
  const float penalty = params_.repeat_penalty;
  for (const std::int32_t id : recent) {
    if (penalty_applied_[id] != 0) continue;  // each distinct token is penalised once
    penalty_applied_[id] = 1;
    float& logit = penalised_[id];
    logit = logit > 0.0f ? logit / penalty : logit * penalty;
  }
  for (const std::int32_t id : recent) penalty_applied_[id] = 0;
  return penalised_;
}

void Sampler::filter(std::span<const float> logits, std::span<const std::int32_t> history) {
  const std::span<const float> scores = penalise(logits, history);
  const float max = max_logit(scores);
  if (!std::isfinite(max)) raise(ErrorCode::kInvalidArgument, "sampler: no finite logit (max {})", max);

  candidates_.clear();
  bool sorted = false;
  if (params_.top_k > 0 && params_.top_k < vocab_size_) {
    // The top_k best in order, without sorting the vocabulary. One more is looked for: top-k
    // applies only where more than top_k logits are numbers (else all stay, in id order).
    cpu::top_k_logits(scores, params_.top_k + 1, best_);
    if (best_.size() > static_cast<std::size_t>(params_.top_k)) {
      best_.pop_back();
      for (const cpu::IdLogit& entry : best_) candidates_.push_back({entry.id, entry.logit, 0.0f});
      sorted = true;
    }
  }
  if (!sorted) {
    for (std::int32_t id = 0; id < vocab_size_; ++id) {
      if (!std::isnan(scores[id])) candidates_.push_back({id, scores[id], 0.0f});
    }
  }

  narrow(max, sorted);
}

void Sampler::narrow(float max, bool sorted) {
  if (params_.top_p < 1.0f) {
    if (!sorted) sort_by_rank(candidates_, sort_scratch_);
    // Smallest prefix whose probability (softmax over the survivors) reaches top_p.
    double total = 0.0;
    for (Candidate& c : candidates_) {
      c.weight = std::exp(c.logit - max);
      total += c.weight;
    }
    const double target = static_cast<double>(params_.top_p) * total;
    double cumulative = 0.0;
    std::size_t keep = candidates_.size();
    for (std::size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += candidates_[i].weight;
      if (cumulative >= target) {
        keep = i + 1;
        break;
      }
    }
    candidates_.resize(std::max<std::size_t>(keep, 1));
  }

  if (params_.min_p > 0.0f) {
    // p / p_max = exp(logit - max); the top candidate always survives. `max` is still the
    // survivors' maximum: top-k and top-p keep the best token.
    const double min_p = params_.min_p;
    std::erase_if(candidates_,
                  [&](const Candidate& c) { return std::exp(static_cast<double>(c.logit) - max) < min_p; });
  }
}

std::int32_t Sampler::draw() {
  SITSRT_ASSERT(!candidates_.empty());
  float max = kNegativeInfinity;
  for (const Candidate& c : candidates_) max = std::max(max, c.logit);
  const double inverse_temperature = 1.0 / params_.temperature;
  double total = 0.0;
  for (Candidate& c : candidates_) {
    c.weight = static_cast<float>(std::exp(static_cast<double>(c.logit - max) * inverse_temperature));
    total += c.weight;
  }
  const double target = uniform_unit(rng_) * total;
  double cumulative = 0.0;
  std::int32_t last_possible = candidates_.front().id;
  for (const Candidate& c : candidates_) {
    if (c.weight <= 0.0f) continue;
    cumulative += c.weight;
    last_possible = c.id;
    if (target < cumulative) return c.id;
  }
  return last_possible;  // rounding left target at the very end of the range
}

bool Sampler::draws_whole_vocabulary() const noexcept {
  return (params_.top_k <= 0 || params_.top_k >= vocab_size_) && params_.top_p >= 1.0f && params_.min_p <= 0.0f;
}

// draw() over every number in id order, without copying them into candidates: the same max,
// weights, sums and scan (a NaN id's weight is 0, which the sum absorbs exactly and the scan
// skips). The weights come from cpu::draw_weights, the same floats as draw()'s std::exp; over a
// 262k vocabulary (Gemma 3) the OpenAI defaults (top_p 1, no top-k) spent ~1.8 ms a token there.
std::int32_t Sampler::draw_all(std::span<const float> scores) {
  const cpu::LogitMax best = cpu::max_logit(scores);
  if (!std::isfinite(best.value)) raise(ErrorCode::kInvalidArgument, "sampler: no finite logit (max {})", best.value);
  weights_.resize(scores.size());
  cpu::draw_weights(scores, best.value, 1.0 / params_.temperature, weights_);
  double total = 0.0;
  for (const float w : weights_) total += w;
  const double target = uniform_unit(rng_) * total;
  double cumulative = 0.0;
  auto last_possible = static_cast<std::int32_t>(best.index);
  for (std::size_t id = 0; id < weights_.size(); ++id) {
    if (weights_[id] <= 0.0f) continue;
    cumulative += weights_[id];
    last_possible = static_cast<std::int32_t>(id);
    if (target < cumulative) return last_possible;
  }
  return last_possible;  // rounding left target at the very end of the range
}

std::int32_t Sampler::sample(std::span<const float> logits, std::span<const std::int32_t> history) {
  if (params_.temperature <= 0.0f) {
    const cpu::LogitMax best = cpu::max_logit(penalise(logits, history));  // ties: the lowest id
    if (best.index < 0) raise(ErrorCode::kInvalidArgument, "sampler: every logit is NaN");
    return static_cast<std::int32_t>(best.index);
  }
  if (draws_whole_vocabulary()) return draw_all(penalise(logits, history));
  filter(logits, history);
  return draw();
}

std::int64_t Sampler::summary_k() const noexcept {
  if (params_.repeat_penalty != 1.0f && params_.repeat_last_n != 0) return 0;
  if (params_.temperature <= 0.0f) return 1;
  if (params_.top_k > 0 && params_.top_k < vocab_size_) return params_.top_k + 1;
  return 0;
}

std::int32_t Sampler::sample(const LogitSummary& summary) {
  const std::int64_t needed = summary_k();
  if (needed == 0) raise(ErrorCode::kInternal, "sampler: these sampling parameters need the whole row of logits");
  if (params_.temperature <= 0.0f) {
    if (summary.argmax < 0) raise(ErrorCode::kInvalidArgument, "sampler: every logit is NaN");
    return static_cast<std::int32_t>(summary.argmax);
  }
  if (!std::isfinite(summary.max)) raise(ErrorCode::kInvalidArgument, "sampler: no finite logit (max {})", summary.max);
  // As filter(): the top_k best in rank order when more than top_k logits are numbers, else
  // every number in id order (then the summary holds them all: fewer than it was asked for).
  candidates_.clear();
  const auto top_k = static_cast<std::size_t>(params_.top_k);
  const bool ranked = summary.best.size() > top_k;
  for (std::size_t i = 0; i < std::min(top_k, summary.best.size()); ++i) {
    candidates_.push_back({summary.best[i].id, summary.best[i].logit, 0.0f});
  }
  if (!ranked) {
    std::sort(candidates_.begin(), candidates_.end(),
              [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  }
  narrow(summary.max, ranked);
  return draw();
}

std::vector<std::int32_t> Sampler::candidates(std::span<const float> logits, std::span<const std::int32_t> history) {
  filter(logits, history);
  std::vector<std::int32_t> ids;
  ids.reserve(candidates_.size());
  for (const Candidate& c : candidates_) ids.push_back(c.id);
  return ids;
}

}  // namespace sitsrt
