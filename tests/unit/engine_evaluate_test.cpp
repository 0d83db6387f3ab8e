// Engine::evaluate(): the streaming scorer behind sitsrt perplexity, against logits(all_positions)
// on a small random model.
#include "support/model_files.hpp"

#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

using namespace sitsrt;
using Catch::Matchers::Contains;

namespace {

EngineOptions options(std::int64_t batch, bool int8 = true) {
  EngineOptions o;
  o.model_path = test::random_model(test::tiny_options(DType::kQ8_0), "evaluate");
  o.threads = 2;
  o.max_batch_tokens = batch;
  o.int8_activations = int8;
  o.cpu_isa = test::kFloatPrefillIsa;
  return o;
}

std::vector<std::int32_t> sequence(std::size_t n) {
  std::vector<std::int32_t> t;
  for (std::size_t i = 0; i < n; ++i) t.push_back(static_cast<std::int32_t>((i * 37 + 11) % 300));
  return t;
}

// Every reported row, with its position, in call order.
struct Collected {
  std::vector<std::int64_t> positions;
  std::vector<float> rows;
};

Collected collect(const Engine& e, std::span<const std::int32_t> tokens, EvaluateOptions opt) {
  Collected c;
  e.evaluate(tokens, opt, [&](std::int64_t position, std::span<const float> logits) {
    REQUIRE(static_cast<std::int64_t>(logits.size()) == e.model_info().n_vocab);
    c.positions.push_back(position);
    c.rows.insert(c.rows.end(), logits.begin(), logits.end());
  });
  return c;
}

std::vector<float> tail_rows(const std::vector<float>& all, std::int64_t first, std::int64_t vocab) {
  return {all.begin() + first * vocab, all.end()};
}

}  // namespace

TEST_CASE("evaluate reports each scored position once, in order, equal to logits(all_positions)", "[engine]") {
  const Engine engine(options(8));  // 30 tokens: prompt steps of 8, 8, 8, 6
  const auto tokens = sequence(30);
  const std::int64_t vocab = engine.model_info().n_vocab;
  const std::vector<float> all = engine.logits(tokens, true);

  SECTION("from position 0: the same steps, bit for bit") {
    const Collected c = collect(engine, tokens, {0, false});
    REQUIRE(c.positions.size() == 30);
    for (std::int64_t i = 0; i < 30; ++i) CHECK(c.positions[static_cast<std::size_t>(i)] == i);
    CHECK(c.rows == all);
  }
  SECTION("from a step boundary: the scored steps run the head on the same rows, bit for bit") {
    const Collected c = collect(engine, tokens, {16, false});
    REQUIRE(c.positions.size() == 14);
    CHECK(c.positions.front() == 16);
    CHECK(c.positions.back() == 29);
    CHECK(c.rows == tail_rows(all, 16, vocab));
  }
  SECTION("from inside a step: the head runs on fewer rows of the same hidden states") {
    const Collected c = collect(engine, tokens, {13, false});  // step [8, 16) outputs rows 13..15
    REQUIRE(c.positions.size() == 17);
    CHECK(c.positions.front() == 13);
    const std::vector<float> want = tail_rows(all, 13, vocab);
    // The output head's rows are independent dot products; only a kernel that blocks rows
    // differently for another row count could round them differently: within float
    // accumulation error of a 64-term dot product of logits of magnitude <= ~10.
    for (std::size_t i = 0; i < want.size(); ++i) {
      REQUIRE(std::fabs(c.rows[i] - want[i]) <= 1e-4f * (1.0f + std::fabs(want[i])));
    }
  }
}

TEST_CASE("evaluate with decode_scored runs scored positions as decode steps", "[engine]") {
  const auto tokens = sequence(20);
  for (const bool int8 : {true, false}) {
    INFO("int8 activations " << int8);
    const Engine batched(options(12, int8));
    const Engine one_by_one(options(1, int8));  // every position a decode step
    // From position 0, decode_scored equals an engine that decodes every token.
    CHECK(collect(batched, tokens, {0, true}).rows == one_by_one.logits(tokens, true));
    // From position 12: the context is one prompt step [0, 12), then 12..19 are one-token steps,
    // each reporting its row. Position 12's row is what a 13-token prompt gives (steps [0, 12)
    // and [12, 13)); the later rows differ from prompt-step rows by the decode kernels.
    const Collected c = collect(batched, tokens, {12, true});
    REQUIRE(c.positions.size() == 8);
    for (std::size_t i = 0; i < 8; ++i) CHECK(c.positions[i] == static_cast<std::int64_t>(12 + i));
    const std::int64_t vocab = batched.model_info().n_vocab;
    const std::vector<float> row12 = batched.logits(std::span(tokens).first(13), false);
    CHECK(std::vector<float>(c.rows.begin(), c.rows.begin() + vocab) == row12);
  }
}

TEST_CASE("evaluate: bad arguments and callback exceptions", "[engine]") {
  const Engine engine(options(8));
  const auto tokens = sequence(10);
  const auto ignore = [](std::int64_t, std::span<const float>) {};
  CHECK_THROWS_WITH(engine.evaluate(tokens, {10, false}, ignore), Contains("first scored position 10"));
  CHECK_THROWS_WITH(engine.evaluate(tokens, {-1, false}, ignore), Contains("first scored position -1"));
  CHECK_THROWS_AS(engine.evaluate({}, {0, false}, ignore), Error);
  CHECK_THROWS_WITH(engine.evaluate(tokens, {0, false}, LogitsCallback{}), Contains("on_logits"));
  const std::vector<std::int32_t> bad = {1, 2, 300};
  CHECK_THROWS_WITH(engine.evaluate(bad, {0, false}, ignore), Contains("outside the vocabulary"));
  const std::vector<std::int32_t> too_long(300, 1);  // the tiny model's context is 256
  CHECK_THROWS_WITH(engine.evaluate(too_long, {0, false}, ignore), Contains("context length"));
  // An exception from the callback ends the evaluation; the session goes back to the pool.
  int calls = 0;
  CHECK_THROWS_WITH(engine.evaluate(tokens, {2, false},
                                    [&](std::int64_t, std::span<const float>) {
                                      if (++calls == 3) throw std::runtime_error("stop here");
                                    }),
                    Contains("stop here"));
  CHECK(calls == 3);
  CHECK(engine.queue_stats().in_flight == 0);
  CHECK(collect(engine, tokens, {0, false}).rows == engine.logits(tokens, true));
}

TEST_CASE("evaluate is thread-safe: concurrent calls give the single-threaded rows", "[engine]") {
  const Engine engine(options(8));
  const auto tokens = sequence(40);
  const std::vector<float> want = collect(engine, tokens, {20, true}).rows;
  std::vector<std::vector<float>> got(3);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] { got[t] = collect(engine, tokens, {20, true}).rows; });
  }
  for (auto& t : threads) t.join();
  for (const auto& g : got) CHECK(g == want);
}
