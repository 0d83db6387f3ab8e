// K centering (api/kv_centering.hpp): kv_store subtracts the offsets from K rows and divides
// by the channel scales before rotating and quantizing; attention over such keys equals
// attention over the originals (softmax cancels the per-query shift, q is multiplied by the
// scales) and has a smaller quantization error when keys carry large channel means; the rope
// rule that decides which channels are centered and the rope pairs that share a scale; the
// offsets and scales measured by a run of the model; and the engine recording "+centered".
#include "api/kv_centering.hpp"
#include "backend/kv_cache.hpp"
#include "core/half.hpp"
#include "cpu/attention/attention.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu_backend/cpu_backend.hpp"
#include "formats/gguf.hpp"
#include "graph/memory_plan.hpp"
#include "model/gguf_weights.hpp"
#include "model/model_graph.hpp"
#include "support/model_files.hpp"
#include "support/random.hpp"

#include <sitsrt/engine.hpp>
#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <numbers>
#include <vector>

using namespace sitsrt;
using cpu::KvType;

namespace {

constexpr std::int64_t kHeads = 4, kKvHeads = 2, kDim = 64, kPositions = 300;
constexpr std::int64_t kWidth = kKvHeads * kDim;

// Keys with large per-channel means (a few channels per head far from zero for every position,
// as trained K projections have), unit-variance noise on top; queries and values Gaussian.
struct Inputs {
  std::vector<float> q, k, v, mean;
  explicit Inputs(std::uint64_t seed) {
    test::Rng rng(seed);
    q = rng.normals(static_cast<std::size_t>(kHeads * kDim), 0.3f);
    v = rng.normals(static_cast<std::size_t>(kPositions * kWidth));
    mean = rng.normals(static_cast<std::size_t>(kWidth), 0.5f);
    for (std::int64_t h = 0; h < kKvHeads; ++h) {
      for (std::int64_t j : {3, 17, 40, 63}) mean[static_cast<std::size_t>(h * kDim + j)] = (j % 2 ? 9.0f : -7.0f);
    }
    k = rng.normals(static_cast<std::size_t>(kPositions * kWidth));
    for (std::size_t i = 0; i < k.size(); ++i) k[i] += mean[i % static_cast<std::size_t>(kWidth)];
  }
};

struct Cache {
  std::vector<std::byte> k, v;
  cpu::KvLayerView view;
  Cache(KvType k_type, bool rotated, const float* offset, const float* scale = nullptr) {
    const std::size_t kb = cpu::kv_row_bytes(k_type, kKvHeads, kDim),
                      vb = cpu::kv_row_bytes(KvType::kF32, kKvHeads, kDim);
    k.assign(kb * kPositions, std::byte{0xFF});
    v.assign(vb * kPositions, std::byte{0xFF});
    view = cpu::contiguous_kv(k_type, KvType::kF32, k.data(), v.data(), kb, vb, kPositions);
    view.k_rotated = rotated;
    view.k_offset = offset;
    view.k_scale = scale;
  }
};

cpu::AttentionShape shape() {
  cpu::AttentionShape s;
  s.n_heads = kHeads;
  s.n_kv_heads = kKvHeads;
  s.head_dim = kDim;
  s.scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  return s;
}

// The last position's query over every stored position.
std::vector<float> attend(const Inputs& in, Cache& cache) {
  cpu::CpuContext ctx(2, cpu::Isa::kGeneric);
  ctx.reserve_scratch(cpu::attention_scratch_floats(kPositions, shape()));
  cpu::kv_store(ctx, cache.view, in.k.data(), kWidth, in.v.data(), kWidth, kPositions, kKvHeads, kDim, 0);
  std::vector<float> out(static_cast<std::size_t>(kHeads * kDim));
  cpu::attention(ctx, in.q.data(), kHeads * kDim, 1, kPositions - 1, cache.view, shape(), out.data(), kHeads * kDim);
  return out;
}

// Softmax attention of the original keys and values in double.
std::vector<double> reference(const Inputs& in) {
  std::vector<double> out(static_cast<std::size_t>(kHeads * kDim), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  for (std::int64_t h = 0; h < kHeads; ++h) {
    const std::int64_t g = h / (kHeads / kKvHeads);
    std::vector<double> s(static_cast<std::size_t>(kPositions));
    double top = -1e300, sum = 0.0;
    for (std::int64_t p = 0; p < kPositions; ++p) {
      double dot = 0.0;
      for (std::int64_t e = 0; e < kDim; ++e) {
        dot += static_cast<double>(in.q[static_cast<std::size_t>(h * kDim + e)]) *
               in.k[static_cast<std::size_t>(p * kWidth + g * kDim + e)];
      }
      s[static_cast<std::size_t>(p)] = dot * scale;
      top = std::max(top, dot * scale);
    }
    for (double& x : s) sum += (x = std::exp(x - top));
    for (std::int64_t p = 0; p < kPositions; ++p) {
      for (std::int64_t e = 0; e < kDim; ++e) {
        out[static_cast<std::size_t>(h * kDim + e)] +=
            s[static_cast<std::size_t>(p)] / sum * in.v[static_cast<std::size_t>(p * kWidth + g * kDim + e)];
      }
    }
  }
  return out;
}

double relative_rms(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(err / norm);
}

}  // namespace

TEST_CASE("centered f32 K rows hold k - offset and attention is unchanged", "[kv][centering]") {
  const Inputs in(101);
  Cache plain(KvType::kF32, false, nullptr), centered(KvType::kF32, false, in.mean.data());
  const std::vector<float> a = attend(in, plain), b = attend(in, centered);
  for (std::int64_t p : {0L, 1L, kPositions - 1}) {
    for (std::int64_t e = 0; e < kWidth; ++e) {
      float stored;
      std::memcpy(&stored, centered.k.data() + (p * kWidth + e) * 4, 4);
      REQUIRE(stored == in.k[static_cast<std::size_t>(p * kWidth + e)] - in.mean[static_cast<std::size_t>(e)]);
    }
  }
  // Scores shift by q.offset per query head; the float scores differ by rounding of terms of
  // size |q| |k| and |q| |offset| (~ 1e-6 relative), the outputs by as much.
  const std::vector<double> ref = reference(in);
  CHECK(relative_rms(a, ref) < 1e-5);
  CHECK(relative_rms(b, ref) < 1e-5);

  // Channel scales too: rows hold (k - offset) / scale, q is scaled instead, with and without
  // the rotation.
  test::Rng rng(7);
  std::vector<float> scale(static_cast<std::size_t>(kWidth));
  for (float& s : scale) s = rng.uniform(0.25f, 4.0f);
  for (bool rotated : {false, true}) {
    Cache scaled(KvType::kF32, rotated, in.mean.data(), scale.data());
    const std::vector<float> c = attend(in, scaled);
    if (!rotated) {
      float stored;
      std::memcpy(&stored, scaled.k.data() + (5 * kWidth + 3) * 4, 4);
      CHECK(stored == (in.k[static_cast<std::size_t>(5 * kWidth + 3)] - in.mean[3]) / scale[3]);
    }
    CAPTURE(rotated);
    CHECK(relative_rms(c, ref) < 1e-5);
  }
}

TEST_CASE("centering lowers the error of int8 and int4 K with large channel means", "[kv][centering]") {
  const Inputs in(202);
  const std::vector<double> ref = reference(in);
  for (KvType type : {KvType::kInt8, KvType::kInt4}) {
    for (bool rotated : {false, true}) {
      Cache plain(type, rotated, nullptr), centered(type, rotated, in.mean.data());
      const double off = relative_rms(attend(in, plain), ref), on = relative_rms(attend(in, centered), ref);
      std::printf("  K %s%s: relative RMS error of the output uncentered %.3e, centered %.3e\n",
                  type == KvType::kInt8 ? "int8" : "int4", rotated ? " rotated" : "", off, on);
      CAPTURE(type == KvType::kInt8, rotated, off, on);
      CHECK(on < 0.7 * off);
    }
  }
}

TEST_CASE("the rope rule centers the channels that turn by at most pi/3 over the context", "[kv][centering]") {
  ModelSpec spec;
  spec.n_layer = 2;
  spec.n_head_kv = 2;
  spec.head_dim = 64;
  spec.rope_dims = 48;  // channels 48..63 are not rotated
  spec.rope_freq_base = 10000.0f;
  spec.rope_local_freq_base = 100.0f;
  spec.sliding_window = 128;
  spec.windowed_layers = {false, true};
  const std::int64_t ctx = 4096;
  for (bool neox : {false, true}) {
    const std::vector<bool> mask = kv_centering_mask(spec, neox, ctx);
    REQUIRE(mask.size() == 2u * 128u);
    for (std::int64_t l = 0; l < 2; ++l) {
      const double base = l == 1 ? 100.0 : 10000.0;
      for (std::int64_t h = 0; h < 2; ++h) {
        for (std::int64_t j = 0; j < 64; ++j) {
          bool want = true;
          if (j < 48) {
            const double i = neox ? static_cast<double>(j % 24) : static_cast<double>(j / 2);
            want = 4095.0 * std::pow(base, -i / 24.0) <= std::numbers::pi / 3;
          }
          CAPTURE(neox, l, h, j);
          CHECK(mask[static_cast<std::size_t>(l * 128 + h * 64 + j)] == want);
        }
      }
    }
    // Layer 0 centers its slowest pairs; the windowed layer's fast local rope leaves only the
    // unrotated channels.
    CHECK(mask[static_cast<std::size_t>(neox ? 23 : 47)]);
    CHECK_FALSE(mask[0]);
    CHECK_FALSE(mask[128 + static_cast<std::size_t>(neox ? 23 : 47)]);
    CHECK(mask[128 + 50]);
  }
  // A context of one position turns nothing: every channel may be centered.
  for (bool c : kv_centering_mask(spec, false, 1)) CHECK(c);
}

TEST_CASE("rope mates pair channels as the rope style does; unrotated channels are their own", "[kv][centering]") {
  ModelSpec spec;
  spec.n_head_kv = 2;
  spec.head_dim = 8;
  spec.rope_dims = 6;
  const std::vector<std::int32_t> normal = kv_rope_mates(spec, false), neox = kv_rope_mates(spec, true);
  CHECK(normal == std::vector<std::int32_t>{1, 0, 3, 2, 5, 4, 6, 7, 9, 8, 11, 10, 13, 12, 14, 15});
  CHECK(neox == std::vector<std::int32_t>{3, 4, 5, 0, 1, 2, 6, 7, 11, 12, 13, 8, 9, 10, 14, 15});
}

TEST_CASE("measured offsets and scales: masked mean keys after position 0, cube roots of pair rms, f16",
          "[kv][centering]") {
  RandomModelOptions mo = test::tiny_options(DType::kF32);
  const gguf::File file = gguf::File::open(test::random_model(mo, "kv-centering"));
  const ModelSpec spec = read_model_spec(file);
  const graph::Graph graph = build_model_graph(spec, file, {DType::kF32, std::nullopt});
  CpuBackendOptions bo;
  bo.threads = 2;
  bo.isa = test::kFloatPrefillIsa;  // float prefill: the reference below is float keys, not bf16 tiles
  CpuBackend backend(bo);
  GgufWeightSource weights{file};
  (void)backend.bind_weights(graph, weights, {});
  std::mutex step_mutex;
  ExecutionPlan plan;
  plan.graph = &graph;
  plan.memory = graph::plan_memory(graph, 16, 16);  // several steps for the tokens below
  plan.backend = &backend;
  plan.n_layers = spec.n_layer;
  plan.kv_width = spec.n_head_kv * spec.head_dim;
  plan.kv_layout = {spec.n_head_kv, spec.head_dim, ops::KvType::kInt4, ops::KvType::kInt8, true, true};
  plan.context_length = 64;
  plan.n_vocab = spec.n_vocab;
  plan.step_mutex = &step_mutex;
  backend.prepare(graph, plan.memory, plan.context_length);

  test::Rng rng(303);
  std::vector<std::int32_t> tokens(40);
  for (auto& t : tokens) t = rng.uniform_int(0, static_cast<int>(spec.n_vocab) - 1);
  std::vector<bool> mask(static_cast<std::size_t>(plan.n_layers * plan.kv_width));
  for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = i % 3 != 0;
  const std::vector<std::int32_t> mates = kv_rope_mates(spec, spec.rope_neox);
  const KCentering measured = measure_k_centering(plan, tokens, mask, mates);
  const std::vector<float>& offsets = measured.offsets;
  REQUIRE(offsets.size() == mask.size());
  REQUIRE(measured.scales.size() == mask.size());

  // Reference keys: the tokens one decode step at a time into a float cache.
  KvCacheLayout f32{spec.n_head_kv, spec.head_dim, ops::KvType::kF32, ops::KvType::kF32};
  ContiguousKvCache cache(backend, plan.n_layers, 64, f32);
  StepRunner runner(plan);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const SequenceWork work{&cache, std::span(tokens).subspan(i, 1), 0};
    (void)runner.step({&work, 1});
  }
  const auto w = static_cast<std::size_t>(plan.kv_width);
  for (std::int64_t l = 0; l < plan.n_layers; ++l) {
    const auto* keys = reinterpret_cast<const float*>(cache.layer(l).k);
    // Scales from the measured offsets (the f16 values the rows are centered with).
    std::vector<double> rms(w), pair(w);
    double mean = 0.0;
    for (std::size_t c = 0; c < w; ++c) {
      double sq = 0.0;
      for (std::size_t p = 1; p < tokens.size(); ++p) {
        const double x = keys[p * w + c] - offsets[static_cast<std::size_t>(l) * w + c];
        sq += x * x;
      }
      rms[c] = sq / static_cast<double>(tokens.size() - 1);
    }
    for (std::size_t c = 0; c < w; ++c) {
      pair[c] = std::sqrt((rms[c] + rms[static_cast<std::size_t>(mates[c])]) / 2);
      mean += pair[c] / static_cast<double>(w);
    }
    for (std::size_t c = 0; c < w; ++c) {
      const float s = measured.scales[static_cast<std::size_t>(l) * w + c];
      const double want = std::cbrt(std::max(pair[c], 1e-3 * mean) / mean);
      CAPTURE(l, c);
      CHECK(s == measured.scales[static_cast<std::size_t>(l) * w + static_cast<std::size_t>(mates[c])]);
      CHECK(fp16_to_fp32(fp32_to_fp16(s)) == s);
      CHECK(std::fabs(s - want) <= std::ldexp(want, -10) + 1e-3 * want);
    }
    for (std::size_t c = 0; c < w; ++c) {
      const std::size_t at = static_cast<std::size_t>(l) * w + c;
      const float got = offsets[at];
      CAPTURE(l, c);
      if (!mask[at]) {
        CHECK(got == 0.0f);
        continue;
      }
      double sum = 0.0;
      for (std::size_t p = 1; p < tokens.size(); ++p) sum += keys[p * w + c];
      const double want = sum / static_cast<double>(tokens.size() - 1);
      CHECK(fp16_to_fp32(fp32_to_fp16(got)) == got);  // an f16 value
      CHECK(std::fabs(got - want) <= std::ldexp(std::fabs(want), -10) + 1e-4);
    }
  }
  CHECK_THROWS_AS(measure_k_centering(plan, std::span(tokens).first(1), mask, mates), Error);
}

TEST_CASE("engines center int8/int4 K by default, record it, and stay deterministic", "[kv][centering]") {
  EngineOptions o;
  o.model_path = test::random_model(test::tiny_options(DType::kQ8_0), "kv-centering-engine");
  o.threads = 2;
  o.context_length = 256;
  o.deterministic = true;
  o.k_cache_type = KvCacheType::kInt4;
  o.v_cache_type = KvCacheType::kF16;
  const Engine centered(o);
  CHECK(centered.model_info().kv_cache_type == "k=int4+hadamard+centered,v=f16,recent=32");
  EngineOptions plain_options = o;
  plain_options.kv_k_centering = false;
  CHECK(Engine(plain_options).model_info().kv_cache_type == "k=int4+hadamard,v=f16,recent=32");
  plain_options.kv_recent_window = 0;
  CHECK(Engine(plain_options).model_info().kv_cache_type == "k=int4+hadamard,v=f16");
  EngineOptions f16 = o;
  f16.k_cache_type = KvCacheType::kF16;
  CHECK(Engine(f16).model_info().kv_cache_type == "f16");  // float K is never centered

  // The offsets come from a deterministic run: another engine, with another thread count,
  // gives the same tokens and logprobs bit for bit.
  EngineOptions one_thread = o;
  one_thread.threads = 1;
  const Engine again(one_thread);
  GenerationConfig c;
  c.max_new_tokens = 16;
  c.temperature = 0.8f;
  c.seed = 5;
  c.stop_at_end_of_sequence = false;
  std::vector<float> a, b;
  const GenerationResult ra = centered.generate("alpha beta gamma", c, [&](const TokenEvent& e) {
    a.push_back(e.logprob);
    return true;
  });
  const GenerationResult rb = again.generate("alpha beta gamma", c, [&](const TokenEvent& e) {
    b.push_back(e.logprob);
    return true;
  });
  CHECK(ra.tokens == rb.tokens);
  CHECK(a == b);
}
