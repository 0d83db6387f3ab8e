// Every architecture's engine logits against the independent double-precision reference
// (support/reference_model.hpp) on random-weight models written by write_random_model, in F32
// and Q8_0 weights (the reference reads the same stored weights through the scalar
// dequantizer). Each model's shape makes its features matter: a sliding window shorter than
// the sequence, gemma3's global layer (layer 5 of 7), q width != n_embd, scaled rope.
#include "support/model_files.hpp"
#include "support/reference_model.hpp"

#include "formats/gguf_writer.hpp"
#include "graph/memory_plan.hpp"
#include "model/gguf_weights.hpp"
#include "model/model_graph.hpp"
#include "model/model_spec.hpp"
#include "cpu_backend/cpu_backend.hpp"
#include "runtime/executor.hpp"

#include <sitsrt/engine.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace sitsrt;

namespace {

struct Variant {
  const char* label;
  RandomModelOptions options;
};

RandomModelOptions variant_options(const std::string& label, DType type) {
  RandomModelOptions o = test::tiny_options(type);
  if (label == "llama-llama3-rope") {
    o.rope_scaling = "llama3";
    o.rope_scaling_factor = 8.0f;
    o.rope_original_context = 64;
  } else if (label == "mistral") {
    o.architecture = "mistral";
    o.sliding_window = 8;
  } else if (label == "qwen2-yarn") {
    o.architecture = "qwen2";
    o.rope_scaling = "yarn";
    o.rope_scaling_factor = 4.0f;
    o.rope_original_context = 64;
    o.rope_freq_base = 1000.0f;
    o.tied_embeddings = true;
  } else if (label == "qwen3") {
    o.architecture = "qwen3";
    o.head_dim = 32;  // q width 128 != n_embd 64
  } else if (label == "gemma3") {
    o.architecture = "gemma3";
    o.head_dim = 32;
    o.layers = 7;  // five local layers, one global (layer 5), one local
    o.sliding_window = 8;
    o.rope_freq_base = 1000000.0f;
    o.rope_scaling = "linear";
    o.rope_scaling_factor = 4.0f;
    o.final_logit_softcap = 10.0f;  // near the logit scale, so the cap bends these logits
    o.tied_embeddings = true;
  }
  return o;
}

std::vector<std::int32_t> some_tokens(int n, int vocab, std::uint32_t seed) {
  std::vector<std::int32_t> t;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    t.push_back(static_cast<std::int32_t>(3 + (seed >> 8) % static_cast<std::uint32_t>(vocab - 3)));
  }
  return t;
}

// Runs a spec's graph over the file's weights (F32 KV cache) and returns every position's logits.
std::vector<float> run_spec(const ModelSpec& spec, const gguf::File& file, const std::vector<std::int32_t>& tokens) {
  const graph::Graph g = build_model_graph(spec, file, {DType::kF32, std::nullopt});
  CpuBackendOptions cpu;
  cpu.threads = 1;
  cpu.isa = "generic";
  CpuBackend backend(cpu);
  const GgufWeightSource weights(file);
  (void)backend.bind_weights(g, weights, {});
  std::mutex step_mutex;
  ExecutionPlan plan;
  plan.graph = &g;
  plan.memory = graph::plan_memory(g, 64, 64);
  plan.backend = &backend;
  plan.n_layers = spec.n_layer;
  plan.kv_width = spec.n_head_kv * spec.head_dim;
  plan.kv_layout = {spec.n_head_kv, spec.head_dim, ops::KvType::kF32, ops::KvType::kF32};
  plan.context_length = 64;
  plan.n_vocab = spec.n_vocab;
  plan.step_mutex = &step_mutex;
  backend.prepare(g, plan.memory, plan.context_length);
  Session session(plan);
  const auto logits = session.forward(tokens, true);
  return {logits.begin(), logits.end()};
}

}  // namespace

TEST_CASE("llama3 rope scaling from config parameters equals the stored rope_freqs factors", "[model][arch]") {
  // A safetensors-style spec (factor, low/high_freq_factor, original context) and the GGUF
  // form (precomputed per-pair divisors in rope_freqs.weight) must compute the same model.
  const RandomModelOptions o = variant_options("llama-llama3-rope", DType::kF32);
  const gguf::File file = gguf::File::open(test::random_model(o, "arch-llama-llama3-rope"));
  const ModelSpec stored = read_model_spec(file);
  REQUIRE(stored.rope_freq_factors);
  ModelSpec config = stored;
  config.rope_freq_factors = false;
  config.rope_scaling = {RopeScalingType::kLlama3, o.rope_scaling_factor, o.rope_original_context, 1.0f, 4.0f};
  ModelSpec unscaled = stored;
  unscaled.rope_freq_factors = false;
  const auto tokens = some_tokens(40, 300, 21);
  const auto a = run_spec(stored, file, tokens);
  const auto b = run_spec(config, file, tokens);
  const auto c = run_spec(unscaled, file, tokens);
  double scale = 0, diff = 0, effect = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    effect = std::max(effect, static_cast<double>(std::fabs(a[i] - c[i])));
  }
  INFO("config vs stored factors " << diff << ", scaling's own effect " << effect << ", scale " << scale);
  // The stored factors are float-rounded divisors (2^-24 relative): angles agree to ~1e-6 rad.
  CHECK(diff <= 1e-5 * scale);
  CHECK(effect > 1e-2 * scale);
}

// Engine logits vs the double-precision reference on the same file (which dequantizes the
// stored weights itself); returns max |error| / logit scale and prints a parity-table row.
static double relative_logit_error(const std::string& label, const std::string& path, DType type, std::int64_t batch) {
  test::ReferenceModel reference(path);
  const auto tokens = some_tokens(29, reference.vocab(), 11);
  const auto want = reference.forward(tokens);

  EngineOptions options;
  options.model_path = path;
  options.threads = 2;
  options.kv_cache_type = KvCacheType::kF32;
  options.int8_activations = false;
  options.cpu_isa = test::kFloatPrefillIsa;
  options.max_batch_tokens = batch;
  const Engine engine(options);
  const std::vector<float> got = engine.logits(tokens, /*all_positions=*/true);
  REQUIRE(got.size() == tokens.size() * static_cast<std::size_t>(reference.vocab()));
  double scale = 0, err = 0;
  std::size_t worst = 0, i = 0;
  for (const auto& row : want) {
    for (double v : row) {
      scale = std::max(scale, std::fabs(v));
      const double e = std::fabs(static_cast<double>(got[i]) - v);
      if (e > err) {
        err = e;
        worst = i;
      }
      ++i;
    }
  }
  std::printf("arch parity: %-18s %-9s batch %d: max |error| %.3g, logit scale %.3g (%.2g relative)\n",
              label.c_str(), std::string(name(type)).c_str(), static_cast<int>(batch), err, scale, err / scale);
  INFO("max |error| " << err << " at position " << worst / reference.vocab() << ", logit scale " << scale);
  return err / scale;
}

TEST_CASE("every architecture's logits match the double-precision reference", "[model][arch]") {
  const std::string label = GENERATE("llama-llama3-rope", "mistral", "qwen2-yarn", "qwen3", "gemma3");
  const DType type = GENERATE(DType::kF32, DType::kQ8_0);
  const std::int64_t batch = GENERATE(8, 1);  // prefill steps whose windows span steps; token-by-token decode
  CAPTURE(label, name(type), batch);
  const std::string path = test::random_model(variant_options(label, type), "arch-" + label);
  // float32 arithmetic over widths <= 128 and <= 7 layers against double: ~1e-5 of the scale.
  CHECK(relative_logit_error(label, path, type, batch) <= 1e-4);
}

// Every architecture in every weight format family: 256-wide models so that the K-quant
// super-blocks (256), INT4 g128 and FP8 blocks tile every matrix row.
TEST_CASE("every architecture in every weight format matches the reference on its stored weights", "[model][arch]") {
  const std::string label = GENERATE("llama-llama3-rope", "mistral", "qwen2-yarn", "qwen3", "gemma3");
  const DType type = GENERATE(DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_K, DType::kQ6_K, DType::kFP8_E4M3,
                              DType::kQ4_G128);
  CAPTURE(label, name(type));
  RandomModelOptions o = variant_options(label, type);
  o.dim = 256;
  o.heads = 8;
  o.kv_heads = 2;
  o.ffn = 512;
  const std::string path = test::random_model(o, "archfmt-" + label);
  // Same arithmetic as above: the reference reads the quantized file and dequantizes it, so the
  // format adds no error, only the wider rows (256) do.
  CHECK(relative_logit_error(label, path, type, 8) <= 1e-4);
}

TEST_CASE("the sliding window changes the logits only past the window", "[model][arch]") {
  // Same weights, window 8 vs none: positions 0..7 attend to the same keys, later ones do not.
  RandomModelOptions o = variant_options("mistral", DType::kF32);
  const std::string windowed = test::random_model(o, "window-8");
  o.architecture = "llama";
  const std::string full = test::random_model(o, "window-none");
  const auto tokens = some_tokens(16, 300, 3);
  EngineOptions options;
  options.threads = 1;
  options.kv_cache_type = KvCacheType::kF32;
  options.model_path = windowed;
  const auto a = Engine(options).logits(tokens, true);
  options.model_path = full;
  const auto b = Engine(options).logits(tokens, true);
  double early = 0, late = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    (i / 300 < 8 ? early : late) = std::max(i / 300 < 8 ? early : late, d);
  }
  CHECK(early == 0.0);
  CHECK(late > 1e-3);
}

TEST_CASE("an unknown architecture is rejected naming the supported ones", "[model][arch]") {
  const std::string path = (test::temp_dir() / "falcon.gguf").string();
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string("falcon"));
  w.write(path);
  const gguf::File file = gguf::File::open(path);
  CHECK_THROWS_WITH(read_model_spec(file), Catch::Contains("'falcon' is not supported") && Catch::Contains("qwen2") &&
                                               Catch::Contains("qwen3") && Catch::Contains("gemma3"));
  RandomModelOptions o = test::tiny_options(DType::kF32);
  o.architecture = "falcon";
  CHECK_THROWS_WITH(write_random_model(o, path), Catch::Contains("llama, mistral, qwen2, qwen3, gemma3"));
}

namespace {

// read_model_spec of a tensor-less file with the required keys of `arch` plus `extra`.
ModelSpec spec_with(const std::string& arch, const std::vector<std::pair<std::string, gguf::Value>>& extra) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string(arch));
  for (const auto& [key, value] : std::vector<std::pair<std::string, gguf::Value>>{
           {"embedding_length", gguf::Value::u32(64)},
           {"block_count", gguf::Value::u32(12)},
           {"attention.head_count", gguf::Value::u32(4)},
           {"feed_forward_length", gguf::Value::u32(96)},
           {"context_length", gguf::Value::u32(256)},
           {"vocab_size", gguf::Value::u32(300)},
           {"attention.layer_norm_rms_epsilon", gguf::Value::f32(1e-6f)}}) {
    w.set(arch + "." + key, value);
  }
  for (const auto& [key, value] : extra) w.set(arch + "." + key, value);
  const std::string path = (test::temp_dir() / ("spec-" + arch + ".gguf")).string();
  w.write(path);
  return read_model_spec(gguf::File::open(path));
}

}  // namespace

TEST_CASE("model spec reads each architecture's features and rejects bad ones", "[model][arch]") {
  const ModelSpec gemma = spec_with("gemma3", {{"attention.sliding_window", gguf::Value::u32(512)},
                                               {"attention.key_length", gguf::Value::u32(32)},
                                               {"rope.freq_base", gguf::Value::f32(1e6f)}});
  CHECK(gemma.head_dim == 32);
  CHECK(gemma.embedding_scale == Approx(8.0));
  CHECK(gemma.rope_local_freq_base == 10000.0f);
  CHECK(gemma.attn_scale == Approx(1.0 / std::sqrt(32.0)));
  std::string pattern;
  for (std::int64_t l = 0; l < gemma.n_layer; ++l) pattern += gemma.layer_is_windowed(l) ? 'L' : 'G';
  CHECK(pattern == "LLLLLGLLLLLG");
  const ModelSpec mistral = spec_with("llama", {{"attention.sliding_window", gguf::Value::u32(4096)}});
  CHECK(mistral.layer_is_windowed(0));
  CHECK(mistral.layer_is_windowed(11));
  CHECK_FALSE(mistral.rope_neox);
  const ModelSpec yarn = spec_with("qwen2", {{"rope.scaling.type", gguf::Value::string("yarn")},
                                             {"rope.scaling.factor", gguf::Value::f32(4.0f)},
                                             {"rope.scaling.original_context_length", gguf::Value::u32(64)}});
  CHECK(yarn.rope_scaling.type == RopeScalingType::kYarn);
  CHECK(yarn.rope_freq_scale == 0.25f);
  CHECK(yarn.rope_scaling.original_context == 64);
  CHECK(yarn.qkv_bias);
  CHECK(yarn.rope_neox);
  CHECK_THROWS_WITH(spec_with("llama", {{"rope.scaling.type", gguf::Value::string("longrope")}}),
                    Catch::Contains("longrope") && Catch::Contains("none, linear, yarn"));
  CHECK_THROWS_WITH(spec_with("gemma3", {}), Catch::Contains("gemma3.attention.sliding_window"));
  CHECK_THROWS_WITH(spec_with("qwen3", {{"attention.key_length", gguf::Value::u32(32)},
                                        {"attention.value_length", gguf::Value::u32(16)}}),
                    Catch::Contains("value_length"));
}
