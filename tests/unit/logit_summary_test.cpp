// Logit summaries (core/logit_summary.hpp): the CPU's summary of a row against a naive definition,
// and sampling and token statistics from a summary against the same from the row, bit for bit,
// over rows with ties, signed zeros, -inf, NaN, and fewer numbers than top-k.
#include "cpu/logits/logit_kernels.hpp"
#include "runtime/sampler.hpp"
#include "support/random.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

using namespace sitsrt;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// A row of `vocab` logits of one kind: plain normals, many ties (values on a coarse grid, signed
// zeros among them), some -inf and NaN, or mostly NaN (fewer numbers than a top-k asks).
std::vector<float> make_row(test::Rng& rng, int vocab, int kind) {
  std::vector<float> row = rng.normals(static_cast<std::size_t>(vocab), 3.0f);
  for (float& x : row) {
    const int pick = rng.uniform_int(0, 99);
    if (kind == 1) x = std::round(x * 2.0f) / 2.0f * (pick < 50 ? 1.0f : -1.0f);  // ties, +0 and -0
    if (kind == 2 && pick < 10) x = -kInf;
    if (kind == 2 && pick >= 10 && pick < 15) x = kNaN;
    if (kind == 3 && pick < 97) x = kNaN;
  }
  return row;
}

struct Naive {
  float max = -kInf;
  std::int64_t argmax = -1;
  double sum = 0.0, weighted = 0.0;
  std::vector<std::int32_t> ranked;  // ids of numbers, logit descending, ties by lower id
};

Naive naive_summary(const std::vector<float>& row) {
  Naive n;
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (std::isnan(row[i])) continue;
    if (n.argmax < 0 || row[i] > n.max) {
      n.max = row[i];
      n.argmax = static_cast<std::int64_t>(i);
    }
    n.ranked.push_back(static_cast<std::int32_t>(i));
  }
  std::stable_sort(n.ranked.begin(), n.ranked.end(), [&](std::int32_t a, std::int32_t b) { return row[a] > row[b]; });
  if (std::isfinite(n.max)) {
    for (const float x : row) {
      const float e = std::exp(x - n.max);
      if (!(e > 0.0f)) continue;
      n.sum += e;
      n.weighted += static_cast<double>(e) * static_cast<double>(x - n.max);
    }
  }
  return n;
}

}  // namespace

TEST_CASE("cpu::summarize_logits is max_logit, exp_sums and top_k_logits of the row", "[sampler]") {
  test::Rng rng(801);
  LogitSummary s;
  for (const int vocab : {1, 7, 300, 4099}) {
    for (int kind = 0; kind < 4; ++kind) {
      for (const std::int64_t k : {1, 5, 41, 100000}) {
        CAPTURE(vocab, kind, k);
        const std::vector<float> row = make_row(rng, vocab, kind);
        const Naive want = naive_summary(row);
        cpu::summarize_logits(row, k, s);
        CHECK(std::bit_cast<std::uint32_t>(s.max) == std::bit_cast<std::uint32_t>(want.max));
        CHECK(s.argmax == want.argmax);
        // Added in index order in double, as the reference: equal up to the last bits of the sum.
        CHECK(s.exp_sum == Approx(want.sum).epsilon(1e-12));
        CHECK(s.exp_weighted == Approx(want.weighted).epsilon(1e-9).margin(1e-12));
        const std::size_t kept = std::min<std::size_t>(static_cast<std::size_t>(k), want.ranked.size());
        REQUIRE(s.best.size() == kept);
        for (std::size_t i = 0; i < kept; ++i) {
          CHECK(s.best[i].id == want.ranked[i]);
          CHECK(std::bit_cast<std::uint32_t>(s.best[i].logit) == std::bit_cast<std::uint32_t>(row[want.ranked[i]]));
        }
      }
    }
  }
  const std::vector<float> all_nan(9, kNaN);
  cpu::summarize_logits(all_nan, 4, s);
  CHECK(s.argmax == -1);
  CHECK(s.best.empty());
  CHECK(s.exp_sum == 0.0);
}

TEST_CASE("summary_k: greedy 1, top-k top_k + 1, 0 for a penalty or a draw over the whole row", "[sampler]") {
  SamplingParams p;
  p.temperature = 0.0f;
  CHECK(Sampler(p, 1000).summary_k() == 1);
  p.temperature = 0.7f;
  p.top_k = 40;
  CHECK(Sampler(p, 1000).summary_k() == 41);
  p.top_k = 1000;  // not below the vocabulary: every number is a candidate
  CHECK(Sampler(p, 1000).summary_k() == 0);
  p.top_k = 0;
  CHECK(Sampler(p, 1000).summary_k() == 0);
  p.top_k = 40;
  p.repeat_penalty = 1.1f;
  CHECK(Sampler(p, 1000).summary_k() == 0);
  p.repeat_last_n = 0;  // the penalty looks at nothing
  CHECK(Sampler(p, 1000).summary_k() == 41);
  p.temperature = 0.0f;
  p.repeat_last_n = 64;
  CHECK(Sampler(p, 1000).summary_k() == 0);  // greedy over penalised logits
}

TEST_CASE("sampling and token statistics from a summary give the row's bits", "[sampler]") {
  constexpr int kVocab = 3000;
  struct Config {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
  };
  const Config configs[] = {{0.0f, 40, 0.95f, 0.05f}, {0.8f, 40, 0.95f, 0.05f}, {1.3f, 5, 1.0f, 0.0f},
                            {0.5f, 200, 0.5f, 0.0f},  {1.0f, 1, 1.0f, 0.0f},    {2.0f, 60, 1.0f, 0.3f},
                            {1.0f, 150, 1.0f, 0.0f}};  // mostly-NaN rows: fewer numbers than top_k, drawn in id order
  test::Rng rng(802);
  for (const Config& c : configs) {
    for (int kind = 0; kind < 4; ++kind) {
      CAPTURE(c.temperature, c.top_k, c.top_p, c.min_p, kind);
      SamplingParams p;
      p.temperature = c.temperature;
      p.top_k = c.top_k;
      p.top_p = c.top_p;
      p.min_p = c.min_p;
      p.seed = 77;
      Sampler from_rows(p, kVocab), from_summaries(p, kVocab);
      const std::int64_t k = from_rows.summary_k();
      REQUIRE(k > 0);
      TokenStats row_stats, summary_stats;
      LogitSummary s;
      int distinct_draws = 0;
      std::int32_t previous = -1;
      for (int step = 0; step < 40; ++step) {
        const std::vector<float> row = make_row(rng, kVocab, kind);
        // A summary with more best ids than the sampler needs (as one shared by a batch's rows).
        const std::int64_t top_logprobs = step % 3 == 0 ? 0 : 1 + step % 20;
        cpu::summarize_logits(row, std::max(k, top_logprobs) + step % 2 * 7, s);
        const std::int32_t want = from_rows.sample(row, {});
        const std::int32_t got = from_summaries.sample(s);
        REQUIRE(got == want);
        distinct_draws += want != previous ? 1 : 0;
        previous = want;
        compute_token_stats(row, want, static_cast<std::int32_t>(top_logprobs), row_stats);
        token_stats_from_summary(s, want, static_cast<std::int32_t>(top_logprobs), summary_stats);
        CHECK(std::bit_cast<std::uint32_t>(summary_stats.logprob) == std::bit_cast<std::uint32_t>(row_stats.logprob));
        CHECK(std::bit_cast<std::uint32_t>(summary_stats.entropy) == std::bit_cast<std::uint32_t>(row_stats.entropy));
        REQUIRE(summary_stats.top.size() == row_stats.top.size());
        for (std::size_t i = 0; i < row_stats.top.size(); ++i) {
          CHECK(summary_stats.top[i].id == row_stats.top[i].id);
          CHECK(std::bit_cast<std::uint32_t>(summary_stats.top[i].logprob) ==
                std::bit_cast<std::uint32_t>(row_stats.top[i].logprob));
        }
      }
      if (c.temperature > 0.0f && c.top_k > 1) CHECK(distinct_draws > 10);  // it drew, not only the argmax
    }
  }
}

TEST_CASE("a summary without the chosen id, or of a row without numbers, is refused", "[sampler]") {
  std::vector<float> row = {0.5f, 2.0f, -1.0f, 1.5f};
  LogitSummary s;
  cpu::summarize_logits(row, 2, s);
  TokenStats stats;
  CHECK_THROWS_AS(token_stats_from_summary(s, 2, 1, stats), Error);  // id 2 is not among the 2 best
  token_stats_from_summary(s, 3, 1, stats);
  CHECK(stats.top.size() == 1);
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler greedy(p, 4);
  const std::vector<float> nan_row(4, kNaN);
  cpu::summarize_logits(nan_row, 1, s);
  CHECK_THROWS_AS(greedy.sample(s), Error);
  SamplingParams whole_row;
  whole_row.top_k = 0;
  Sampler needs_row(whole_row, 4);
  CHECK_THROWS_AS(needs_row.sample(s), Error);
}
