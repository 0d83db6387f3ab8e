// Batched steps: several sequences' tokens in one pass over the weights, each attending over its
// own cache. A sequence's logits in a batch equal its logits stepped alone (the matmuls of a
// batch run as a GEMM, one row alone as a matrix-vector product: equal within float rounding),
// and they do not depend on which sequences share the batch (bit for bit: each row's
// arithmetic is the same whatever the other rows).
#include "backend/kv_cache.hpp"
#include "cpu_backend/cpu_backend.hpp"
#include "formats/gguf.hpp"
#include "graph/memory_plan.hpp"
#include "model/gguf_weights.hpp"
#include "model/model_graph.hpp"
#include "model/model_spec.hpp"
#include "runtime/executor.hpp"
#include "support/model_files.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

using namespace sitsrt;

namespace {

struct Harness {
  gguf::File file;
  ModelSpec spec;
  graph::Graph graph;
  CpuBackend backend;
  GgufWeightSource weights{file};
  std::mutex step_mutex;
  ExecutionPlan plan;

  Harness(DType type, const std::string& isa, bool int8_activations)
      : file(gguf::File::open(test::random_model(options(type), std::string("batched-") + std::string(name(type))))),
        spec(read_model_spec(file)),
        graph(build_model_graph(spec, file, {DType::kF32, std::nullopt})),
        backend(backend_options(isa, int8_activations)) {
    (void)backend.bind_weights(graph, weights, {});
    plan.graph = &graph;
    plan.memory = graph::plan_memory(graph, 64, 64);
    plan.backend = &backend;
    plan.n_layers = spec.n_layer;
    plan.kv_width = spec.n_head_kv * spec.head_dim;
    plan.kv_layout = {spec.n_head_kv, spec.head_dim, ops::KvType::kF32, ops::KvType::kF32};
    plan.context_length = 128;
    plan.n_vocab = spec.n_vocab;
    plan.step_mutex = &step_mutex;
    backend.prepare(graph, plan.memory, plan.context_length);
  }
  static RandomModelOptions options(DType type) {
    RandomModelOptions o;
    o.dim = 128;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.ffn = 256;
    o.vocab = 512;
    o.context = 256;
    o.type = type;
    return o;
  }
  static CpuBackendOptions backend_options(const std::string& isa, bool int8_activations) {
    CpuBackendOptions o;
    o.threads = 2;
    o.isa = isa;
    o.int8_activations = int8_activations;
    return o;
  }
  std::unique_ptr<KvCache> cache() {
    return std::make_unique<ContiguousKvCache>(backend, plan.n_layers, plan.context_length, plan.kv_width, DType::kF32);
  }
};

const std::vector<std::vector<std::int32_t>> kPrompts{
    {5, 17, 300, 42, 8}, {9, 9, 100, 200, 300, 400, 1, 2, 3}, {77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89}, {4, 5, 6}};

// Prefills every prompt alone into a fresh cache each.
std::vector<std::unique_ptr<KvCache>> prefilled(Harness& h, StepRunner& runner) {
  std::vector<std::unique_ptr<KvCache>> caches;
  for (const auto& p : kPrompts) {
    caches.push_back(h.cache());
    const SequenceWork w{caches.back().get(), p, 1};
    (void)runner.step({&w, 1});
  }
  return caches;
}

double max_abs(std::span<const float> v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

}  // namespace

TEST_CASE("a batched decode step gives each sequence its own logits, whatever shares the batch", "[batch]") {
  const auto type = GENERATE(DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0);
  const bool int8 = GENERATE(false, true);
  if (int8 && (type == DType::kF32 || type == DType::kF16)) return;  // int8 rows serve the quantized formats
  CAPTURE(name(type), int8);
  Harness h(type, "auto", int8);
  StepRunner runner(h.plan);
  auto alone = prefilled(h, runner);
  auto together = prefilled(h, runner);
  auto pair = prefilled(h, runner);
  const std::size_t vocab = static_cast<std::size_t>(h.spec.n_vocab);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::int32_t> next(kPrompts.size());
    for (std::size_t s = 0; s < next.size(); ++s) next[s] = static_cast<std::int32_t>(10 + 37 * s + 11 * round);
    // Alone: one step per sequence.
    std::vector<float> expected;
    for (std::size_t s = 0; s < next.size(); ++s) {
      const SequenceWork w{alone[s].get(), {&next[s], 1}, 1};
      const auto rows = runner.step({&w, 1});
      expected.insert(expected.end(), rows.begin(), rows.end());
    }
    // Together: all four in one step.
    std::vector<SequenceWork> all;
    for (std::size_t s = 0; s < next.size(); ++s) all.push_back({together[s].get(), {&next[s], 1}, 1});
    const auto batched = runner.step(all);
    REQUIRE(batched.size() == expected.size());
    const std::vector<float> batched_copy(batched.begin(), batched.end());
    // Sequences 0 and 2 only: their rows must be bit-identical to theirs in the batch of four,
    // except where int8 batches of 4+ rows take the AMX-INT8 tiles (amx level, outside
    // batch-invariant mode: float rounding apart, checked against alone below).
    const bool amx_int8 = int8 && h.backend.info().isa == "amx";
    const SequenceWork two[] = {{pair[0].get(), {&next[0], 1}, 1}, {pair[2].get(), {&next[2], 1}, 1}};
    const auto paired = runner.step(two);
    for (std::size_t i = 0; i < vocab && !amx_int8; ++i) {
      REQUIRE(paired[i] == batched_copy[i]);
      REQUIRE(paired[vocab + i] == batched_copy[2 * vocab + i]);
    }
    // Sequences 1 and 3 of the pair set catch up alone, so all three sets stay at one position.
    for (std::size_t s : {std::size_t{1}, std::size_t{3}}) {
      const SequenceWork w{pair[s].get(), {&next[s], 1}, 1};
      (void)runner.step({&w, 1});
    }
    // Batched (GEMM) against alone (matrix-vector): float rounding apart; with int8 rows both
    // quantize the same activations, and the two paths' sums differ by rounding only. At the amx
    // level float batches run on bf16 tiles (2^-7 relative per operand): the AMX prefill test's
    // bound (model_reference_test).
    const bool bf16 = !int8 && h.backend.info().isa == "amx";
    double diff = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(expected[i] - batched_copy[i])));
    }
    const double scale = max_abs(expected);
    INFO("round " << round << ": max |batched - alone| " << diff << " of logits up to " << scale);
    CHECK(diff <= (int8 || bf16 ? 2e-2 : 1e-4) * scale);
    CHECK(together[0]->size() == alone[0]->size());
  }
}

TEST_CASE("a step mixing a prompt chunk with decodes equals each part stepped alone", "[batch]") {
  Harness h(DType::kQ8_0, "auto", false);
  StepRunner runner(h.plan);
  auto alone = prefilled(h, runner);
  auto mixed = prefilled(h, runner);
  const std::vector<std::int32_t> chunk{400, 401, 402, 403, 404, 405, 406};  // sequence 1 continues its prompt
  const std::int32_t next0 = 33, next3 = 44;
  std::vector<float> expected;
  const SequenceWork a0{alone[0].get(), {&next0, 1}, 1};
  const auto r0 = runner.step({&a0, 1});
  expected.insert(expected.end(), r0.begin(), r0.end());
  const SequenceWork a1{alone[1].get(), chunk, 2};  // the last two rows' logits
  const auto r1 = runner.step({&a1, 1});
  expected.insert(expected.end(), r1.begin(), r1.end());
  const SequenceWork a3{alone[3].get(), {&next3, 1}, 1};
  const auto r3 = runner.step({&a3, 1});
  expected.insert(expected.end(), r3.begin(), r3.end());

  const SequenceWork batch[] = {{mixed[0].get(), {&next0, 1}, 1}, {mixed[1].get(), chunk, 2}, {mixed[3].get(), {&next3, 1}, 1}};
  const auto got = runner.step(batch);
  REQUIRE(got.size() == expected.size());
  double diff = 0;
  for (std::size_t i = 0; i < got.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(got[i] - expected[i])));
  INFO("max |mixed - alone| " << diff);
  const bool bf16 = h.backend.info().isa == "amx";  // float rows of 2+ on bf16 tiles, as above
  CHECK(diff <= (bf16 ? 2e-2 : 1e-4) * max_abs(expected));
  CHECK(mixed[1]->size() == static_cast<std::int64_t>(kPrompts[1].size() + chunk.size()));
  CHECK(mixed[2]->size() == static_cast<std::int64_t>(kPrompts[2].size()));  // not in the step
}

TEST_CASE("a step refuses more tokens than the arena or a sequence's cache holds", "[batch]") {
  Harness h(DType::kQ8_0, "auto", false);
  StepRunner runner(h.plan);
  auto caches = prefilled(h, runner);
  const std::vector<std::int32_t> many(40, 7);
  const SequenceWork two[] = {{caches[0].get(), many, 1}, {caches[1].get(), many, 1}};  // 80 > 64 rows
  CHECK_THROWS_WITH(runner.step(two), Catch::Contains("80 tokens"));
  const SequenceWork empty{caches[0].get(), {}, 0};
  CHECK_THROWS(runner.step({&empty, 1}));
  const SequenceWork bad_outputs{caches[0].get(), many, 41};
  CHECK_THROWS(runner.step({&bad_outputs, 1}));
  CHECK(caches[0]->size() == static_cast<std::int64_t>(kPrompts[0].size()));  // nothing was run
}

TEST_CASE("the CPU backend's host tasks run each index once, on its threads", "[batch]") {
  CpuBackendOptions o;
  o.threads = 3;
  o.isa = "generic";
  CpuBackend backend(o);
  for (const std::int64_t n : {0, 1, 2, 3, 17}) {
    CAPTURE(n);
    std::vector<std::atomic<int>> runs(static_cast<std::size_t>(n));
    backend.run_host_tasks(n, [&](std::int64_t i) {
      REQUIRE((i >= 0 && i < n));
      runs[static_cast<std::size_t>(i)].fetch_add(1);
    });
    for (const auto& r : runs) CHECK(r.load() == 1);
  }
  // The interface's default: in order, on the caller.
  struct Serial final : Backend {
    const BackendInfo& info() const noexcept override { std::abort(); }
    WeightBindReport bind_weights(const graph::Graph&, const graph::WeightSource&,
                                  const std::function<void(double)>&) override {
      return {};
    }
    void prepare(const graph::Graph&, const graph::MemoryPlan&, std::int64_t) override {}
    std::unique_ptr<BackendBuffer> allocate(std::size_t, std::string_view) override { return nullptr; }
    void run(const graph::Graph&, std::size_t, const StepContext&) override {}
    void read(const BackendBuffer&, std::size_t, std::span<std::byte>) override {}
    void write(BackendBuffer&, std::size_t, std::span<const std::byte>) override {}
    void copy(const BackendBuffer&, std::size_t, BackendBuffer&, std::size_t, std::size_t) override {}
    std::span<const std::byte> host_view(const BackendBuffer&, std::size_t, std::size_t) override { return {}; }
    void synchronize() override {}
    MemoryUsage memory() const override { return {}; }
  } serial;
  std::vector<std::int64_t> order;
  const auto caller = std::this_thread::get_id();
  serial.run_host_tasks(4, [&](std::int64_t i) {
    CHECK(std::this_thread::get_id() == caller);
    order.push_back(i);
  });
  CHECK(order == std::vector<std::int64_t>{0, 1, 2, 3});
}
