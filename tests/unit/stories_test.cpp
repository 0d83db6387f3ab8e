// End to end on the real stories260K model against reference outputs produced independently
// by llama.cpp and llama2.c (../shared/refdata/stories260K_greedy.json).
#include "support/isa.hpp"
#include "support/model_files.hpp"
#include "support/reference_model.hpp"

#include <sitsrt/engine.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

using namespace sitsrt;

namespace {

nlohmann::json load_reference() {
  std::ifstream in(test::shared_path("refdata/stories260K_greedy.json"));
  return nlohmann::json::parse(in);
}

GenerationConfig greedy(int n) {
  GenerationConfig c;
  c.max_new_tokens = n;
  c.temperature = 0.0f;
  c.top_logprobs = 5;
  return c;
}

// Prompt ids, 64 greedy tokens and the first steps' log-probabilities against the references, at
// `isa` (clamped to the CPU like any level).
void check_f32(const std::string& isa) {
  const auto reference = load_reference();
  const auto kv = GENERATE(KvCacheType::kF32, KvCacheType::kF16);
  const int threads = GENERATE(1, 2);
  EngineOptions options;
  options.model_path = test::shared_path("models/stories260K.gguf");
  options.kv_cache_type = kv;
  options.threads = threads;
  options.cpu_isa = isa;
  const Engine engine(options);
  if (isa == "amx") REQUIRE(engine.model_info().cpu_isa == "amx");
  for (const auto& r : reference["results"]) {
    const std::string prompt = r["prompt"];
    CAPTURE(prompt, kv == KvCacheType::kF32 ? "kv f32" : "kv f16", threads, isa);
    CHECK(engine.tokenize(prompt) == r["prompt_token_ids"].get<std::vector<std::int32_t>>());
    std::vector<TokenEvent> events;
    const GenerationResult result = engine.generate(prompt, greedy(64), [&](const TokenEvent& e) {
      events.push_back(e);
      return true;
    });
    CHECK(result.tokens == r["generated_token_ids"].get<std::vector<std::int32_t>>());
    CHECK(result.text == r["generated_text"].get<std::string>());
    // Log-probabilities of the first 8 steps: the references agree within 2e-5 and we measure
    // 6e-6 with an F32 cache, allowed 1e-4. F16 keys/values (11 significant bits) move the
    // unlikely alternatives' log-probabilities by up to ~7.5e-3 here, allowed 1.5e-2.
    // The AMX prefill rounds the prompt's matmul operands to bf16 (2^-8 relative each), which
    // moves these log-probabilities by up to 0.028 here (the greedy tokens stay identical), allowed 5e-2.
    const double tol = isa == "amx" ? 5e-2 : kv == KvCacheType::kF32 ? 1e-4 : 1.5e-2;
    for (const auto& step : r["top5_first8"]) {
      const TokenEvent& e = events.at(step["step"].get<std::size_t>());
      REQUIRE(e.top.size() == 5);
      for (std::size_t i = 0; i < 5; ++i) {
        CHECK(e.top[i].id == step["top5"][i]["id"].get<std::int32_t>());
        CHECK(std::fabs(e.top[i].logprob - step["top5"][i]["logprob"].get<double>()) <= tol);
      }
      CHECK(std::fabs(e.logprob - step["top5"][0]["logprob"].get<double>()) <= tol);
    }
  }
}

}  // namespace

TEST_CASE("stories260K F32: prompt ids and 64 greedy tokens match llama.cpp and llama2.c", "[e2e][stories][gated]") {
  SITSRT_REQUIRE_SHARED("models/stories260K.gguf", "refdata/stories260K_greedy.json");
  check_f32(test::kFloatPrefillIsa);  // float prefill
}

TEST_CASE("stories260K F32 with the AMX prefill (bf16 operands): as the references", "[e2e][stories][amx][gated]") {
  SITSRT_REQUIRE_SHARED("models/stories260K.gguf", "refdata/stories260K_greedy.json");
  SITSRT_REQUIRE_ISA(cpu::Isa::kAmx);
  check_f32("amx");
}

TEST_CASE("stories260K Q8_0: the first 16 greedy tokens match the F32 reference", "[e2e][stories][gated]") {
  SITSRT_REQUIRE_SHARED("models/stories260K-Q8_0.gguf", "refdata/stories260K_greedy.json");
  const auto reference = load_reference();
  EngineOptions options;
  options.model_path = test::shared_path("models/stories260K-Q8_0.gguf");
  const Engine engine(options);
  for (const auto& r : reference["results"]) {
    CAPTURE(r["prompt"].get<std::string>());
    const GenerationResult result = engine.generate(r["prompt"].get<std::string>(), greedy(16));
    const auto want = r["generated_token_ids"].get<std::vector<std::int32_t>>();
    CHECK(result.tokens == std::vector<std::int32_t>(want.begin(), want.begin() + 16));
  }
}

namespace {

// A smaller file's 64 greedy tokens agree with the F32 reference on the first `agree`.
void check_smaller_file(const std::string& file, std::size_t agree) {
  const auto reference = load_reference();
  EngineOptions options;
  options.model_path = test::shared_path(file);
  const Engine engine(options);
  const auto& r = reference["results"][0];
  const GenerationResult result = engine.generate(r["prompt"].get<std::string>(), greedy(64));
  const auto want = r["generated_token_ids"].get<std::vector<std::int32_t>>();
  REQUIRE(result.tokens.size() == 64);
  CHECK(std::vector<std::int32_t>(result.tokens.begin(), result.tokens.begin() + static_cast<long>(agree)) ==
        std::vector<std::int32_t>(want.begin(), want.begin() + static_cast<long>(agree)));
}

}  // namespace

// F16 weights are close enough to agree on the first 16 greedy tokens; Q4_0 on the first 4.
TEST_CASE("stories260K F16 file loads, runs and tracks the reference", "[e2e][stories][gated]") {
  SITSRT_REQUIRE_SHARED("models/stories260K-F16.gguf", "refdata/stories260K_greedy.json");
  check_smaller_file("models/stories260K-F16.gguf", 16);
}

TEST_CASE("stories260K Q4_0 file loads, runs and tracks the reference", "[e2e][stories][gated]") {
  SITSRT_REQUIRE_SHARED("models/stories260K-Q4_0.gguf", "refdata/stories260K_greedy.json");
  check_smaller_file("models/stories260K-Q4_0.gguf", 4);
}

TEST_CASE("stories260K: engine logits match the independent reference forward pass", "[e2e][stories][gated]") {
  SITSRT_REQUIRE_SHARED("models/stories260K.gguf");
  const std::string path = test::shared_path("models/stories260K.gguf");
  test::ReferenceModel reference(path);
  EngineOptions options;
  options.model_path = path;
  options.kv_cache_type = KvCacheType::kF32;
  options.cpu_isa = test::kFloatPrefillIsa;
  const Engine engine(options);
  const std::vector<std::int32_t> tokens = engine.tokenize("Lily went to the park. She saw a big dog");
  const auto want = reference.forward(tokens);
  const auto got = engine.logits(tokens, true);
  double scale = 0, err = 0;
  std::size_t i = 0;
  for (const auto& row : want) {
    for (double v : row) {
      scale = std::max(scale, std::fabs(v));
      err = std::max(err, std::fabs(got[i++] - v));
    }
  }
  INFO("max |error| " << err << ", logit scale " << scale);
  CHECK(err <= 1e-4 * scale);
}
