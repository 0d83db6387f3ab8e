// The engine's logits against the independent double-precision reference (support/
// reference_model.hpp) on random-weight models of every weight type. The reference reads the
// same stored weights through the scalar dequantizer, so the remaining difference is float32
// arithmetic and the F16 KV cache: the tolerance is relative to the logit scale.
#include "support/isa.hpp"
#include "support/model_files.hpp"
#include "support/reference_model.hpp"

#include <sitsrt/engine.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace sitsrt;

namespace {

std::vector<std::int32_t> some_tokens(int n, int vocab, std::uint32_t seed) {
  std::vector<std::int32_t> t;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    t.push_back(static_cast<std::int32_t>(3 + (seed >> 8) % static_cast<std::uint32_t>(vocab - 3)));
  }
  return t;
}

struct Comparison {
  double max_error = 0;
  double scale = 0;
  std::size_t worst = 0;
};

Comparison compare(const std::vector<float>& got, const std::vector<std::vector<double>>& want) {
  Comparison c;
  std::size_t i = 0;
  for (const auto& row : want) {
    for (double v : row) {
      c.scale = std::max(c.scale, std::fabs(v));
      const double e = std::fabs(static_cast<double>(got[i]) - v);
      if (e > c.max_error) {
        c.max_error = e;
        c.worst = i;
      }
      ++i;
    }
  }
  return c;
}

// Two threads, F32 cache, at most max_batch_tokens per step: the setup of the comparisons below.
EngineOptions two_thread_options(const std::string& path, std::int64_t max_batch_tokens) {
  EngineOptions options;
  options.model_path = path;
  options.threads = 2;
  options.kv_cache_type = KvCacheType::kF32;
  options.max_batch_tokens = max_batch_tokens;
  return options;
}

// Largest |a - b| and largest |b| of two engines' logits for the same tokens.
struct RunDifference {
  double max_error = 0, scale = 0;
};
RunDifference difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  RunDifference d;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d.scale = std::max(d.scale, static_cast<double>(std::fabs(b[i])));
    d.max_error = std::max(d.max_error, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return d;
}

}  // namespace

TEST_CASE("engine logits match the double-precision reference for every weight type", "[model]") {
  const auto type = GENERATE(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1,
                             DType::kQ5_0, DType::kQ5_1);
  const auto kv = GENERATE(KvCacheType::kF32, KvCacheType::kF16);
  const int threads = GENERATE(1, 2);
  CAPTURE(name(type), kv == KvCacheType::kF32 ? "kv f32" : "kv f16", threads);
  const std::string path = test::random_model(test::tiny_options(type), "reference");
  test::ReferenceModel reference(path);
  const auto tokens = some_tokens(37, reference.vocab(), 5);
  const auto want = reference.forward(tokens);

  EngineOptions options;
  options.model_path = path;
  options.threads = threads;
  options.kv_cache_type = kv;
  options.cpu_isa = test::kFloatPrefillIsa;
  options.int8_activations = false;  // float prefill (the int8 GEMM: "int8-activation prefill ..." below)
  options.max_batch_tokens = 16;     // 37 tokens -> three steps of prefill
  const Engine engine(options);
  const std::vector<float> got = engine.logits(tokens, /*all_positions=*/true);
  REQUIRE(got.size() == tokens.size() * static_cast<std::size_t>(reference.vocab()));
  const Comparison c = compare(got, want);
  INFO("max |error| " << c.max_error << " at position " << c.worst / reference.vocab() << " token "
                      << c.worst % reference.vocab() << ", logit scale " << c.scale);
  // float32 accumulation over dims <= 96 and 2 layers: ~1e-5 of the scale; an F16 cache rounds
  // K and V to 11 significant bits (2^-11 relative), which moves logits by up to ~1e-3 of the scale.
  const double tolerance = (kv == KvCacheType::kF32 ? 2e-5 : 2e-3) * c.scale;
  CHECK(c.max_error <= tolerance);
}

// K-quant models need rows of whole 256-element super-blocks: dim 256, ffn 512. "q4_k_m" is the
// llama.cpp mix (Q4_K, with Q6_K for output.weight and, by k_mix_uses_more_bits, attn_v and
// ffn_down of layer 1 of 2); the other names are one type throughout.
TEST_CASE("engine logits match the double-precision reference for k-quant models", "[model][kquant]") {
  const std::string type_name = GENERATE("q4_k_m", "q2_k", "q3_k", "q5_k", "q6_k", "q8_k", "iq4_nl");
  const int threads = GENERATE(1, 2);
  const bool decode_steps = GENERATE(false, true);  // prefill tiles, or one matvec per token
  CAPTURE(type_name, threads, decode_steps);
  RandomModelOptions o = test::tiny_options(DType::kQ8_0);
  o.dim = 256;
  o.ffn = 512;
  REQUIRE(set_weight_type(o, type_name));
  const std::string path = test::random_model(o, "reference-k-" + type_name);
  test::ReferenceModel reference(path);
  const auto tokens = some_tokens(21, reference.vocab(), 7);
  const auto want = reference.forward(tokens);

  EngineOptions options;
  options.model_path = path;
  options.threads = threads;
  options.kv_cache_type = KvCacheType::kF32;
  options.int8_activations = false;  // float activations (int8 decode: next test case)
  options.cpu_isa = test::kFloatPrefillIsa;
  options.max_batch_tokens = decode_steps ? 1 : 16;
  const Engine engine(options);
  const std::vector<float> got = engine.logits(tokens, /*all_positions=*/true);
  REQUIRE(got.size() == tokens.size() * static_cast<std::size_t>(reference.vocab()));
  const Comparison c = compare(got, want);
  INFO("max |error| " << c.max_error << ", logit scale " << c.scale);
  // As the test above, with dims up to 512: float32 accumulation stays ~1e-5 of the scale.
  CHECK(c.max_error <= 2e-5 * c.scale);
}

TEST_CASE("int8-activation decode of k-quant models stays close to the float decode", "[model][qdot][kquant]") {
  const std::string type_name = GENERATE("q4_k_m", "q5_k_m", "q2_k", "q3_k", "iq4_nl");
  CAPTURE(type_name);
  RandomModelOptions o = test::tiny_options(DType::kQ8_0);
  o.dim = 256;
  o.ffn = 512;
  REQUIRE(set_weight_type(o, type_name));
  const std::string path = test::random_model(o, "reference-k-" + type_name);
  EngineOptions options;
  options.model_path = path;
  options.threads = 2;
  options.kv_cache_type = KvCacheType::kF32;
  options.max_batch_tokens = 1;
  options.int8_activations = true;
  const Engine int8_decode(options);
  options.int8_activations = false;
  const Engine float_decode(options);
  const auto tokens = some_tokens(20, 300, 9);
  const RunDifference d = difference(int8_decode.logits(tokens, true), float_decode.logits(tokens, true));
  INFO("max |error| " << d.max_error << ", logit scale " << d.scale);
  CHECK(d.max_error <= 0.03 * d.scale);  // as "int8-activation decode stays close ...": activation rounding only
  CHECK(d.max_error > 0.0);              // the integer paths did run
}

TEST_CASE("decoding token by token equals one batched prefill", "[model]") {
  const std::string path = test::random_model(test::tiny_options(DType::kQ8_0), "reference");
  EngineOptions options;
  options.model_path = path;
  options.threads = 2;
  options.kv_cache_type = KvCacheType::kF32;
  // Float activations: decode and prefill then differ only in float summation order. (With int8
  // activations decode adds the activation rounding; see the next test case.)
  options.int8_activations = false;
  options.cpu_isa = test::kFloatPrefillIsa;
  const auto tokens = some_tokens(20, 300, 9);
  options.max_batch_tokens = 1;
  const Engine one_by_one(options);
  options.max_batch_tokens = 64;
  const Engine batched(options);
  const auto a = one_by_one.logits(tokens, true);
  const auto b = batched.logits(tokens, true);
  REQUIRE(a.size() == b.size());
  double scale = 0, err = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  CHECK(err <= 2e-5 * scale);
  // and the last-position form returns the last row
  const auto last = batched.logits(tokens, false);
  REQUIRE(last.size() == 300);
  for (std::size_t i = 0; i < last.size(); ++i) REQUIRE(last[i] == Approx(b[b.size() - 300 + i]).margin(1e-5 * scale));
}

TEST_CASE("AMX prefill (bf16 operands) stays close to the float prefill", "[model][amx][gated]") {
  SITSRT_REQUIRE_ISA(cpu::Isa::kAmx);
  const DType type = GENERATE(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ5_1);
  CAPTURE(name(type));
  const std::string path = test::random_model(test::tiny_options(type), "reference");
  EngineOptions options = two_thread_options(path, 64);  // the whole prompt is one prefill
  options.int8_activations = false;  // else the quantized formats' prefill is the int8 GEMM at both levels
  options.cpu_isa = "amx";
  const Engine amx(options);
  REQUIRE(amx.model_info().cpu_isa == "amx");
  options.cpu_isa = test::kFloatPrefillIsa;
  const Engine float_prefill(options);
  const auto tokens = some_tokens(20, 300, 9);
  const RunDifference d = difference(amx.logits(tokens, true), float_prefill.logits(tokens, true));
  INFO("max |error| " << d.max_error << ", logit scale " << d.scale);
  // Every matmul term carries at most 2^-7 relative (bf16 x and w); through the 14 matmuls of
  // this 2-layer model the logits move by up to ~4e-3 of their scale (measured), allowed 1.5e-2.
  CHECK(d.max_error <= 1.5e-2 * d.scale);
  CHECK(d.max_error > 0.0);  // the bf16 path did run
}

TEST_CASE("int8-activation decode stays close to the float prefill", "[model][qdot]") {
  const DType type = GENERATE(DType::kQ8_0, DType::kQ4_0, DType::kQ5_1);
  CAPTURE(name(type));
  const std::string path = test::random_model(test::tiny_options(type), "reference");
  EngineOptions options = two_thread_options(path, 1);  // every step is a decode matvec
  options.int8_activations = true;
  const Engine int8_decode(options);
  CHECK(int8_decode.model_info().int8_activations);
  options.int8_activations = false;
  const Engine float_decode(options);
  CHECK_FALSE(float_decode.model_info().int8_activations);
  const auto tokens = some_tokens(20, 300, 9);
  const RunDifference d = difference(int8_decode.logits(tokens, true), float_decode.logits(tokens, true));
  const double err = d.max_error, scale = d.scale;
  INFO("max |error| " << err << ", logit scale " << scale);
  // Each matmul input element moves by at most 1/254 of its block's max |x| (relative 2^-8 in
  // the worst case); through 2 layers of this random model that compounds to ~1% of the logit
  // scale (measured: 0.7% for Q8_0). A wrong int8 kernel is O(100%) off; the exact
  // per-kernel bounds are in qdot_test.
  CHECK(err <= 0.03 * scale);
  CHECK(err > 0.0);  // the int8 path did run
}

TEST_CASE("int8-activation prefill stays close to the float prefill", "[model][qdot][qgemm]") {
  // Q8_0 / Q4_0: the register-blocked int8 GEMM at avx512vnni; Q5_1: its decode kernel per row.
  const DType type = GENERATE(DType::kQ8_0, DType::kQ4_0, DType::kQ5_1);
  CAPTURE(name(type));
  const std::string path = test::random_model(test::tiny_options(type), "reference");
  EngineOptions options = two_thread_options(path, 16);  // 37 tokens -> prefill steps of 16, 16, 5 rows
  options.cpu_isa = test::kFloatPrefillIsa;
  options.int8_activations = true;
  const Engine int8_prefill(options);
  options.int8_activations = false;
  const Engine float_prefill(options);
  const auto tokens = some_tokens(37, 300, 11);
  const std::vector<float> a = int8_prefill.logits(tokens, true);
  const RunDifference d = difference(a, float_prefill.logits(tokens, true));
  INFO("max |error| " << d.max_error << ", logit scale " << d.scale);
  // The activation rounding of "int8-activation decode stays close to the float prefill", now in
  // the prefill matmuls: the same bound.
  CHECK(d.max_error <= 0.03 * d.scale);
  CHECK(d.max_error > 0.0);  // the int8 path did run
  // One token per step (int8 decode) from the same tokens: bit-identical, as each int8 GEMM row
  // equals its m == 1 product and this model's other ops are row by row alike in both. (Q8_0's
  // whole 16-row weight tiles scale block sums in batches, which one row does in deterministic
  // mode: there both sides run in it.)
  options.int8_activations = true;
  options.deterministic = type == DType::kQ8_0;
  const std::vector<float> prefill = options.deterministic ? Engine(options).logits(tokens, true) : a;
  options.max_batch_tokens = 1;
  const Engine int8_decode(options);
  const std::vector<float> b = int8_decode.logits(tokens, true);
  REQUIRE(prefill.size() == b.size());
  CHECK(std::memcmp(prefill.data(), b.data(), b.size() * sizeof(float)) == 0);
}
