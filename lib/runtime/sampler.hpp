// Token selection from logits, and the per-token statistics reported in TokenEvent.
#pragma once

#include "cpu/logits/logit_kernels.hpp"

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace sitsrt {

struct SamplingParams {
  float temperature = 0.8f;         // <= 0: greedy (argmax)
  std::int32_t top_k = 40;          // <= 0: off
  float top_p = 0.95f;              // >= 1: off
  float min_p = 0.05f;              // <= 0: off; keeps tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;      // 1: off; llama.cpp rule: logit > 0 ? logit / penalty : logit * penalty
  std::int32_t repeat_last_n = 64;  // history tokens the penalty looks at; 0: off, -1: all
  std::uint64_t seed = 0;
};

struct TokenLogprob {
  std::int32_t id;
  float logprob;
};

// Statistics of the model's (unmodified) next-token distribution.
struct TokenStats {
  float logprob = 0.0f;           // log p(chosen)
  float entropy = 0.0f;           // nats
  std::vector<TokenLogprob> top;  // k most likely tokens, descending
  std::vector<cpu::IdLogit> best;  // compute_token_stats' scratch (the k best logits)
};

// Computes log-softmax statistics for `chosen` and the k most likely tokens without sorting
// the whole vocabulary (O(V log k)); ties rank the lower id first; k is clamped to the vocabulary
// and k <= 0 leaves `top` empty. `out.top` is reused to avoid allocation. Throws
// kInvalidArgument for empty logits or `chosen` outside them.
void compute_token_stats(std::span<const float> logits, std::int32_t chosen, std::int32_t k, TokenStats& out);
// The same with the logits' largest value (cpu::max_logit(logits).value) given by a caller that
// already has it.
void compute_token_stats(std::span<const float> logits, float max, std::int32_t chosen, std::int32_t k,
                         TokenStats& out);
// The same from a row's summary (core/logit_summary.hpp) with at least k best ids, `chosen`
// among them: the same bits as from the row. kInvalidArgument when chosen is not among them or
// the max is not finite.
void token_stats_from_summary(const LogitSummary& summary, std::int32_t chosen, std::int32_t k, TokenStats& out);

// Stateful sampler: owns its RNG (seeded from params.seed) and candidate scratch. Pipeline:
// repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw. top-p and min-p use
// the softmax (at temperature 1) of the candidates that survived the previous steps. Greedy when
// temperature <= 0 (ties: the lowest id). The draw uses the raw 64-bit mt19937_64 output, so a
// seed gives the same tokens with every standard library. Not thread-safe; one per request.
// Allocates its scratch in the constructor only.
class Sampler {
 public:
  // Throws kInvalidArgument naming the parameter: vocab_size <= 0, non-finite temperature,
  // top_p < 0 or NaN, min_p > 1 or NaN, repeat_penalty <= 0 or non-finite, repeat_last_n < -1.
  Sampler(SamplingParams params, std::int32_t vocab_size);

  // `logits`: vocab_size raw model scores (left unmodified). `history`: previous tokens
  // (prompt + generated) for the repetition penalty. Throws kInvalidArgument on a size
  // mismatch, an out-of-range history id, or when no logit is a number above -inf.
  std::int32_t sample(std::span<const float> logits, std::span<const std::int32_t> history);

  // How many best ids sample(summary) needs (greedy: 1; top-k sampling: top_k + 1), or 0 when it
  // needs the whole row (a repetition penalty, or sampling without a top-k below the vocabulary).
  [[nodiscard]] std::int64_t summary_k() const noexcept;
  // The token sample(logits, history) gives for the row `summary` summarises (same bits, same
  // draws from the generator), for a sampler whose summary_k() > 0 and a summary with at least
  // that many best ids (or the row's every number). kInvalidArgument as sample().
  std::int32_t sample(const LogitSummary& summary);

  [[nodiscard]] const SamplingParams& params() const noexcept { return params_; }

  // For tests: the candidate ids that survive filtering of `logits` (before the draw).
  std::vector<std::int32_t> candidates(std::span<const float> logits, std::span<const std::int32_t> history);

 private:
  // Logits after the repetition penalty: `logits` itself, or penalised_ holding a copy.
  std::span<const float> penalise(std::span<const float> logits, std::span<const std::int32_t> history);
  void filter(std::span<const float> logits, std::span<const std::int32_t> history);
  // top-p and min-p over candidates_ (sorted: in rank order, else in id order), `max` the
  // largest score of the row.
  void narrow(float max, bool sorted);
  std::int32_t draw();
  // No filter applies (no top-k below the vocabulary, top_p >= 1, min_p <= 0): every number is a
  // candidate in id order, so the draw reads the logits in place (draw_all).
  [[nodiscard]] bool draws_whole_vocabulary() const noexcept;
  std::int32_t draw_all(std::span<const float> scores);

  struct Candidate {
    std::int32_t id;
    float logit;
    float weight;  // exp((logit - max) / temperature), unnormalised
  };
  SamplingParams params_;
  std::int32_t vocab_size_;
  std::mt19937_64 rng_;
  std::vector<Candidate> candidates_;
  std::vector<Candidate> sort_scratch_;  // top-p over candidates top-k did not rank: the radix sort's
  std::vector<cpu::IdLogit> best_;  // top-k selection scratch
  std::vector<float> weights_;      // draw_all's weights, one per id
  std::vector<float> penalised_;
  std::vector<std::uint8_t> penalty_applied_;  // per id, all zero between calls
};

}  // namespace sitsrt
