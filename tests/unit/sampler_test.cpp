// Sampler: token statistics against a double-precision reference, greedy ties, seeded
// determinism, each filter against its definition, the repetition penalty, and draw frequencies.
#include "runtime/sampler.hpp"
#include "support/random.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

// Counts heap allocations so the "no allocation per call" contract can be checked. GCC cannot
// see that these replacements pair malloc with free and warns wherever it inlines them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace {
std::atomic<long> g_allocations{0};
}  // namespace

// NOLINTBEGIN(cppcoreguidelines-no-malloc, cppcoreguidelines-owning-memory): replacing operator new
void* operator new(std::size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
// NOLINTEND(cppcoreguidelines-no-malloc, cppcoreguidelines-owning-memory)

using namespace sitsrt;

namespace {

SamplingParams unfiltered(std::uint64_t seed = 0) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.min_p = 0.0f;
  params.repeat_penalty = 1.0f;
  params.seed = seed;
  return params;
}

struct ReferenceStats {
  std::vector<double> logprobs;
  double entropy = 0.0;
};

ReferenceStats reference_stats(const std::vector<float>& logits) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (const float l : logits) sum += std::exp(l - max);
  const double log_z = max + std::log(sum);
  ReferenceStats ref;
  for (const float l : logits) {
    ref.logprobs.push_back(l - log_z);
    ref.entropy -= std::exp(l - log_z) * (l - log_z);
  }
  return ref;
}

// Ids ordered by logit descending, ties by lower id.
std::vector<std::int32_t> ranked_ids(const std::vector<float>& logits) {
  std::vector<std::int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
  return ids;
}

std::set<std::int32_t> as_set(const std::vector<std::int32_t>& ids) {
  return {ids.begin(), ids.end()};
}

// Logits for known probabilities (ids in a scrambled order so position != rank).
constexpr std::array<double, 6> kKnownProbabilities = {0.10, 0.40, 0.04, 0.15, 0.25, 0.06};
std::vector<float> logits_for(std::span<const double> probabilities) {
  std::vector<float> logits;
  logits.reserve(probabilities.size());
  for (const double p : probabilities) logits.push_back(static_cast<float>(std::log(p)) + 3.0f);
  return logits;
}

ErrorCode error_code_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.code();
  }
  FAIL("no sitsrt::Error thrown");
  return ErrorCode::kInternal;
}

}  // namespace

TEST_CASE("compute_token_stats matches a double-precision reference", "[sampler]") {
  const int vocab = GENERATE(1000, 32000);
  const float scale = GENERATE(1.0f, 8.0f);
  CAPTURE(vocab, scale);
  test::Rng rng(static_cast<std::uint64_t>(vocab) + static_cast<std::uint64_t>(scale));
  const std::vector<float> logits = rng.normals(vocab, scale);
  const ReferenceStats ref = reference_stats(logits);
  const std::vector<std::int32_t> ranked = ranked_ids(logits);

  TokenStats stats;
  const std::int32_t chosen = rng.uniform_int(0, vocab - 1);
  compute_token_stats(logits, chosen, 20, stats);
  CHECK(stats.logprob == Approx(ref.logprobs[chosen]).epsilon(1e-5));
  CHECK(stats.entropy == Approx(ref.entropy).epsilon(1e-5));
  REQUIRE(stats.top.size() == 20);
  for (std::size_t i = 0; i < stats.top.size(); ++i) {
    CAPTURE(i);
    CHECK(stats.top[i].id == ranked[i]);
    CHECK(stats.top[i].logprob == Approx(ref.logprobs[ranked[i]]).epsilon(1e-5));
  }
  // The form a caller that already holds the largest logit uses gives the same bits.
  TokenStats given;
  compute_token_stats(logits, *std::max_element(logits.begin(), logits.end()), chosen, 20, given);
  CHECK(std::bit_cast<std::uint32_t>(given.logprob) == std::bit_cast<std::uint32_t>(stats.logprob));
  CHECK(std::bit_cast<std::uint32_t>(given.entropy) == std::bit_cast<std::uint32_t>(stats.entropy));
  REQUIRE(given.top.size() == stats.top.size());
  for (std::size_t i = 0; i < given.top.size(); ++i) {
    CHECK(given.top[i].id == stats.top[i].id);
    CHECK(std::bit_cast<std::uint32_t>(given.top[i].logprob) == std::bit_cast<std::uint32_t>(stats.top[i].logprob));
  }
}

TEST_CASE("compute_token_stats: ties, clamped k, k = 0, -inf logits", "[sampler]") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, -inf, 3.0f, 2.0f};
  TokenStats stats;
  compute_token_stats(logits, 0, 4, stats);
  REQUIRE(stats.top.size() == 4);
  CHECK(stats.top[0].id == 1);
  CHECK(stats.top[1].id == 2);
  CHECK(stats.top[2].id == 4);
  CHECK(stats.top[3].id == 5);
  CHECK(std::isfinite(stats.entropy));
  // Three equally likely tokens dominate; log p(1) = 1 - log(3e^3 + e^2 + e).
  CHECK(stats.top[0].logprob == Approx(3.0 - std::log(3 * std::exp(3.0) + std::exp(2.0) + std::exp(1.0))));

  compute_token_stats(logits, 3, 100, stats);
  CHECK(stats.top.size() == logits.size());
  CHECK(stats.top.back().id == 3);
  CHECK(stats.logprob == -inf);

  compute_token_stats(logits, 1, 0, stats);
  CHECK(stats.top.empty());
  CHECK_THROWS_AS(compute_token_stats(logits, 6, 1, stats), Error);
  CHECK_THROWS_AS(compute_token_stats({}, 0, 1, stats), Error);
}

TEST_CASE("greedy picks the argmax, ties going to the lowest id", "[sampler]") {
  SamplingParams params = unfiltered();
  params.temperature = GENERATE(0.0f, -1.0f);
  Sampler sampler(params, 6);
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 2.0f};
  for (int i = 0; i < 3; ++i) CHECK(sampler.sample(logits, {}) == 1);
  const std::vector<float> all_equal(6, 0.25f);
  CHECK(sampler.sample(all_equal, {}) == 0);
}

TEST_CASE("the same seed gives the same tokens, another seed different ones", "[sampler]") {
  constexpr int kVocab = 100;
  constexpr int kDraws = 200;
  test::Rng rng(5);
  std::vector<std::vector<float>> steps;
  for (int i = 0; i < kDraws; ++i) steps.push_back(rng.normals(kVocab));

  const auto run = [&](std::uint64_t seed) {
    SamplingParams params;  // library defaults: every filter on
    params.seed = seed;
    Sampler sampler(params, kVocab);
    std::vector<std::int32_t> tokens;
    for (const auto& logits : steps) tokens.push_back(sampler.sample(logits, tokens));
    return tokens;
  };
  const std::vector<std::int32_t> first = run(1234);
  CHECK(run(1234) == first);
  CHECK(run(1235) != first);
  CHECK(as_set(first).size() > 10);  // it really sampled rather than always taking the argmax
}

TEST_CASE("top-k keeps exactly the k best", "[sampler]") {
  test::Rng rng(17);
  std::vector<float> logits = rng.normals(1000);
  logits[10] = logits[20] = logits[30] = 5.0f;  // a tie at the top
  const std::vector<std::int32_t> ranked = ranked_ids(logits);
  for (const int k : {1, 2, 7, 999, 1000, 5000}) {
    CAPTURE(k);
    SamplingParams params = unfiltered();
    params.top_k = k;
    Sampler sampler(params, 1000);
    const auto expected = std::vector<std::int32_t>(ranked.begin(), ranked.begin() + std::min(k, 1000));
    CHECK(as_set(sampler.candidates(logits, {})) == as_set(expected));
  }
  Sampler off(unfiltered(), 1000);
  CHECK(off.candidates(logits, {}).size() == 1000);
}

TEST_CASE("top-p keeps the smallest prefix reaching p, over the surviving candidates", "[sampler]") {
  // Probabilities by rank: 0.40 (id 1), 0.25 (id 4), 0.15 (id 3), 0.10 (id 0), 0.06 (id 5), 0.04 (id 2).
  const std::vector<float> logits = logits_for(kKnownProbabilities);
  struct Case {
    float top_p;
    std::set<std::int32_t> kept;
  };
  for (const Case& c : {Case{0.0f, {1}}, Case{0.3f, {1}}, Case{0.5f, {1, 4}}, Case{0.7f, {1, 4, 3}},
                        Case{0.85f, {1, 4, 3, 0}}, Case{0.95f, {1, 4, 3, 0, 5}}, Case{0.99f, {1, 4, 3, 0, 5, 2}}}) {
    CAPTURE(c.top_p);
    SamplingParams params = unfiltered();
    params.top_p = c.top_p;
    Sampler sampler(params, 6);
    CHECK(as_set(sampler.candidates(logits, {})) == c.kept);
  }
  // After top-k = 3 the survivors renormalise to 0.5, 0.3125, 0.1875: p = 0.7 now needs two.
  SamplingParams params = unfiltered();
  params.top_k = 3;
  params.top_p = 0.7f;
  Sampler sampler(params, 6);
  CHECK(as_set(sampler.candidates(logits, {})) == std::set<std::int32_t>{1, 4});
}

namespace {

// The sampler's pipeline without top-k and repetition penalty, written from its definition: the
// numbers in rank order (logit descending, ties by lower id, -0 == +0) by a stable comparison
// sort; top-p keeps the shortest prefix whose float weights exp(l - max), summed in double in
// that order, reach top_p of their total; min-p drops exp(l - max) < min_p; the draw takes
// weights exp((l - max') / T) over the survivors in order and the first whose running double
// sum passes u * total, u from the top 53 bits of the request's mt19937_64.
std::vector<std::int32_t> reference_top_p_draws(const std::vector<float>& logits, const SamplingParams& p, int draws) {
  float max = -INFINITY;
  for (const float l : logits) {
    if (!std::isnan(l)) max = std::max(max, l);
  }
  std::vector<std::int32_t> ranked;  // id order, ranked only where top-p applies
  for (std::int32_t id = 0; id < static_cast<std::int32_t>(logits.size()); ++id) {
    if (!std::isnan(logits[id])) ranked.push_back(id);
  }
  if (p.top_p < 1.0f) {
    std::stable_sort(ranked.begin(), ranked.end(),
                     [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
  }
  std::vector<float> weights;
  double total = 0.0;
  for (const std::int32_t id : ranked) {
    weights.push_back(std::exp(logits[id] - max));
    total += weights.back();
  }
  const double target = static_cast<double>(p.top_p) * total;
  double cumulative = 0.0;
  std::size_t keep = ranked.size();
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    cumulative += weights[i];
    if (cumulative >= target) {
      keep = i + 1;
      break;
    }
  }
  if (p.top_p < 1.0f) ranked.resize(std::max<std::size_t>(keep, 1));
  std::erase_if(ranked, [&](std::int32_t id) { return std::exp(static_cast<double>(logits[id]) - max) < p.min_p; });
  float kept_max = -INFINITY;
  for (const std::int32_t id : ranked) kept_max = std::max(kept_max, logits[id]);
  std::mt19937_64 rng(p.seed);
  std::vector<std::int32_t> out;
  for (int d = 0; d < draws; ++d) {
    std::vector<float> w;
    double sum = 0.0;
    for (const std::int32_t id : ranked) {
      w.push_back(static_cast<float>(std::exp(static_cast<double>(logits[id] - kept_max) * (1.0 / p.temperature))));
      sum += w.back();
    }
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * sum;
    double running = 0.0;
    std::int32_t pick = ranked.front();
    for (std::size_t i = 0; i < ranked.size(); ++i) {
      if (w[i] <= 0.0f) continue;
      running += w[i];
      pick = ranked[i];
      if (u < running) break;
    }
    out.push_back(pick);
  }
  return out;
}

}  // namespace

TEST_CASE("top-p, or no filter, over a whole vocabulary draws the tokens of its definition, ties and signed zeros",
          "[sampler]") {
  // Vocabularies past the sampler's comparison-sort size rank by a radix sort of the logit bits.
  for (const int vocab : {200, 3000, 40000}) {
    for (const int kind : {0, 1, 2, 3}) {
      test::Rng rng(static_cast<std::uint64_t>(vocab * 7 + kind));
      std::vector<float> logits(static_cast<std::size_t>(vocab));
      for (float& l : logits) {
        l = rng.normal() * 3.0f;
        if (kind == 1) l = std::round(l * 4.0f) / 4.0f;  // many ties, and zeros of both signs
        if (kind == 1 && l == 0.0f && (rng.next() & 1) != 0) l = -0.0f;
        if (kind == 2) l = std::round(l) * 0.5f - 40.0f;   // few distinct values far below 0
        if (kind == 3) l = std::min(0.0f, std::round(l));  // the maximum 0, held by half the ids
        if (kind == 3 && l == 0.0f && (rng.next() & 1) != 0) l = -0.0f;
      }
      logits[5] = -INFINITY;
      logits[static_cast<std::size_t>(vocab / 2)] = NAN;
      if (kind == 2) logits[static_cast<std::size_t>(vocab - 1)] = -0.0f;
      for (const float top_p : {0.3f, 0.9f, 0.999f, 1.0f}) {  // 1: no filter, the whole vocabulary drawn
        for (const float min_p : {0.0f, 0.01f}) {
          CAPTURE(vocab, kind, top_p, min_p);
          SamplingParams params = unfiltered(static_cast<std::uint64_t>(vocab + kind));
          params.temperature = 0.7f;
          params.top_p = top_p;
          params.min_p = min_p;
          Sampler sampler(params, vocab);
          std::vector<std::int32_t> got;
          for (int d = 0; d < 40; ++d) got.push_back(sampler.sample(logits, {}));
          REQUIRE(got == reference_top_p_draws(logits, params, 40));
        }
      }
    }
  }
}

TEST_CASE("min-p keeps exactly the tokens with p >= min_p * p_max", "[sampler]") {
  test::Rng rng(23);
  const std::vector<float> logits = rng.normals(500, 2.0f);
  const ReferenceStats ref = reference_stats(logits);
  const double log_p_max = *std::max_element(ref.logprobs.begin(), ref.logprobs.end());
  for (const float min_p : {0.01f, 0.1f, 0.37f, 0.9f, 1.0f}) {
    CAPTURE(min_p);
    SamplingParams params = unfiltered();
    params.min_p = min_p;
    Sampler sampler(params, 500);
    std::set<std::int32_t> expected;
    for (std::int32_t id = 0; id < 500; ++id) {
      if (std::exp(ref.logprobs[id] - log_p_max) >= min_p) expected.insert(id);
    }
    CHECK(as_set(sampler.candidates(logits, {})) == expected);
  }
  // On the known distribution (p_max = 0.4): min_p 0.3 -> p >= 0.12, min_p 0.2 -> p >= 0.08.
  const std::vector<float> known = logits_for(kKnownProbabilities);
  SamplingParams params = unfiltered();
  params.min_p = 0.3f;
  CHECK(as_set(Sampler(params, 6).candidates(known, {})) == std::set<std::int32_t>{1, 4, 3});
  params.min_p = 0.2f;
  CHECK(as_set(Sampler(params, 6).candidates(known, {})) == std::set<std::int32_t>{1, 4, 3, 0});
}

TEST_CASE("repetition penalty follows llama.cpp's rule", "[sampler]") {
  SamplingParams params = unfiltered();
  params.temperature = 0.0f;
  params.repeat_penalty = 1.5f;
  params.repeat_last_n = 3;

  SECTION("positive logits are divided") {
    Sampler sampler(params, 3);
    const std::vector<float> logits = {2.0f, 1.8f, -1.0f};
    CHECK(sampler.sample(logits, {}) == 0);
    CHECK(sampler.sample(logits, std::vector<std::int32_t>{0}) == 1);  // 2.0 / 1.5 < 1.8
  }
  SECTION("negative logits are multiplied") {
    Sampler sampler(params, 3);
    const std::vector<float> logits = {-1.0f, -1.2f, -5.0f};
    CHECK(sampler.sample(logits, std::vector<std::int32_t>{0}) == 1);  // -1.0 * 1.5 < -1.2
  }
  SECTION("each distinct token is penalised once") {
    Sampler sampler(params, 2);
    const std::vector<float> logits = {2.0f, 1.2f};  // once: 1.33 > 1.2; three times: 0.59
    CHECK(sampler.sample(logits, std::vector<std::int32_t>{0, 0, 0}) == 0);
  }
  SECTION("only the last repeat_last_n tokens count") {
    Sampler sampler(params, 3);
    const std::vector<float> logits = {2.0f, 1.8f, 0.0f};
    CHECK(sampler.sample(logits, std::vector<std::int32_t>{0, 2, 2, 2}) == 0);
    CHECK(sampler.sample(logits, std::vector<std::int32_t>{2, 2, 0}) == 1);
  }
  SECTION("the penalty also shapes the candidates") {
    params.temperature = 1.0f;
    params.top_k = 1;
    Sampler sampler(params, 3);
    const std::vector<float> logits = {2.0f, 1.8f, -1.0f};
    CHECK(sampler.candidates(logits, std::vector<std::int32_t>{0}) == std::vector<std::int32_t>{1});
    CHECK(logits[0] == 2.0f);
  }
  SECTION("history ids outside the vocabulary are rejected") {
    Sampler sampler(params, 3);
    const std::vector<float> logits = {2.0f, 1.8f, -1.0f};
    CHECK(error_code_of([&] { sampler.sample(logits, std::vector<std::int32_t>{7}); }) == ErrorCode::kInvalidArgument);
    CHECK(sampler.sample(logits, std::vector<std::int32_t>{1}) == 0);  // no stale state after the error
  }
}

TEST_CASE("draw frequencies match the softmax (chi-square)", "[sampler]") {
  // 8 tokens, 20000 draws: the chi-square statistic has 7 degrees of freedom; 24.32 is its
  // 99.9% quantile, so a correct sampler fails this (fixed-seed) test with probability 0.001.
  constexpr int kDraws = 20000;
  constexpr double kChiSquare999Df7 = 24.32;
  const float temperature = GENERATE(1.0f, 0.6f);
  CAPTURE(temperature);
  const std::vector<double> probabilities = {0.30, 0.20, 0.15, 0.12, 0.10, 0.07, 0.04, 0.02};
  std::vector<float> logits;
  for (const double p : probabilities) logits.push_back(static_cast<float>(std::log(p)));
  // At temperature T the target distribution is p^(1/T), renormalised.
  std::vector<double> expected;
  for (const double p : probabilities) expected.push_back(std::pow(p, 1.0 / temperature));
  const double norm = std::accumulate(expected.begin(), expected.end(), 0.0);
  for (double& e : expected) e /= norm;

  SamplingParams params = unfiltered(99);
  params.temperature = temperature;
  Sampler sampler(params, 8);
  std::vector<int> counts(8, 0);
  for (int i = 0; i < kDraws; ++i) ++counts[sampler.sample(logits, {})];
  double chi_square = 0.0;
  for (int id = 0; id < 8; ++id) {
    const double wanted = kDraws * expected[id];
    chi_square += (counts[id] - wanted) * (counts[id] - wanted) / wanted;
  }
  CAPTURE(counts, chi_square);
  CHECK(chi_square < kChiSquare999Df7);
}

TEST_CASE("sampling allocates nothing after the first call", "[sampler]") {
  test::Rng rng(31);
  const std::vector<float> logits = rng.normals(4096);
  std::vector<std::int32_t> history = {1, 2, 3, 4000, 2};
  SamplingParams params;  // every filter on
  params.repeat_penalty = 1.1f;
  Sampler sampler(params, 4096);
  sampler.sample(logits, history);
  TokenStats stats;
  compute_token_stats(logits, 7, 5, stats);

  const long before = g_allocations.load();
  for (int i = 0; i < 50; ++i) {
    const std::int32_t token = sampler.sample(logits, history);
    compute_token_stats(logits, token, 5, stats);
  }
  CHECK(g_allocations.load() == before);
  const auto probe = std::make_unique<int>(1);  // the counter does see allocations
  CHECK(g_allocations.load() == before + 1);
}

TEST_CASE("invalid parameters are rejected", "[sampler]") {
  const auto rejects = [](SamplingParams params, std::int32_t vocab, const std::string& name) {
    CAPTURE(name);
    CHECK_THROWS_WITH(Sampler(params, vocab), Catch::Contains(name));
    CHECK(error_code_of([&] { Sampler(params, vocab); }) == ErrorCode::kInvalidArgument);
  };
  SamplingParams params;
  rejects(params, 0, "vocab_size");
  rejects(params, -3, "vocab_size");
  params.temperature = std::nanf("");
  rejects(params, 10, "temperature");
  params = {};
  params.top_p = -0.1f;
  rejects(params, 10, "top_p");
  params = {};
  params.top_p = std::nanf("");
  rejects(params, 10, "top_p");
  params = {};
  params.min_p = 1.5f;
  rejects(params, 10, "min_p");
  params = {};
  params.repeat_penalty = 0.0f;
  rejects(params, 10, "repeat_penalty");
  params = {};
  params.repeat_penalty = -1.0f;
  rejects(params, 10, "repeat_penalty");
  params = {};
  params.repeat_last_n = -2;
  rejects(params, 10, "repeat_last_n");

  Sampler sampler(SamplingParams{}, 10);
  const std::vector<float> wrong_size(9, 0.0f);
  CHECK(error_code_of([&] { sampler.sample(wrong_size, {}); }) == ErrorCode::kInvalidArgument);
  const std::vector<float> all_nan(10, std::nanf(""));
  CHECK_THROWS_AS(sampler.sample(all_nan, {}), Error);
}
