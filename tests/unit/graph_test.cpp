// Graph construction, costs and the liveness-based memory plan.
#include "formats/gguf.hpp"
#include "graph/graph_printer.hpp"
#include "graph/memory_plan.hpp"
#include "model/model_graph.hpp"
#include "model/model_spec.hpp"
#include "support/model_files.hpp"

#include <sitsrt/error.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

using namespace sitsrt;

namespace {

graph::Graph tiny_graph(DType kv = DType::kF16) {
  const auto file = gguf::File::open(test::random_model(test::tiny_options(DType::kQ4_0), "graph"));
  return build_model_graph(read_model_spec(file), file, {kv, std::nullopt});
}

}  // namespace

TEST_CASE("llama graph has the expected structure and costs", "[graph]") {
  const graph::Graph g = tiny_graph();
  const auto o = test::tiny_options(DType::kQ4_0);
  // embed + 15 nodes per block (norm, q, k, v, 2 rope, attention, out, add, norm, gate, up,
  // swiglu, down, add) + take_last, output_norm, logits
  CHECK(g.nodes().size() == static_cast<std::size_t>(1 + 15 * o.layers + 3));
  CHECK(g.n_layers() == o.layers);
  std::uint64_t matmul_flops = 0, kv_bytes = 0;
  for (const auto& node : g.nodes()) {
    if (node.op == graph::OpKind::kMatMul) matmul_flops += node.cost.flops;
    kv_bytes += node.cost.kv_bytes;
  }
  const std::int64_t kv_width = o.kv_heads * (o.dim / o.heads);
  const std::int64_t per_layer = 2 * o.dim * o.dim + 2 * o.dim * kv_width + 3 * o.dim * o.ffn;
  CHECK(matmul_flops == static_cast<std::uint64_t>(2 * (o.layers * per_layer + o.dim * o.vocab)));
  CHECK(kv_bytes == static_cast<std::uint64_t>(o.layers * 2 * kv_width * 2));  // f16 K and V per token
  CHECK(tiny_graph(DType::kF32).nodes()[5].cost.kv_bytes == 0);                // only attention nodes carry KV bytes
}

TEST_CASE("memory plan never overlaps values that are live at the same time", "[graph]") {
  const graph::Graph g = tiny_graph();
  const std::int64_t max_tokens = GENERATE(1, 7, 64);
  const graph::MemoryPlan plan = graph::plan_memory(g, max_tokens, 1);
  CHECK(plan.arena_bytes < plan.naive_bytes);
  // Live ranges per storage root.
  const auto& nodes = g.nodes();
  std::vector<std::pair<std::size_t, std::size_t>> live(g.values().size(), {SIZE_MAX, 0});
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    auto touch = [&](graph::ValueId v) {
      auto& r = live[static_cast<std::size_t>(g.storage_of(v))];
      r.first = std::min(r.first, i);
      r.second = std::max(r.second, i);
    };
    touch(nodes[i].output);
    for (auto v : nodes[i].inputs) touch(v);
  }
  live[static_cast<std::size_t>(g.storage_of(g.output()))].second = nodes.size();
  for (std::size_t a = 0; a < live.size(); ++a) {
    if (live[a].first == SIZE_MAX || g.storage_of(static_cast<graph::ValueId>(a)) != static_cast<graph::ValueId>(a))
      continue;
    REQUIRE(plan.offsets[a] % 64 == 0);
    REQUIRE(plan.offsets[a] + plan.sizes[a] <= plan.arena_bytes);
    for (std::size_t b = a + 1; b < live.size(); ++b) {
      if (live[b].first == SIZE_MAX || g.storage_of(static_cast<graph::ValueId>(b)) != static_cast<graph::ValueId>(b))
        continue;
      const bool time_overlap = live[a].first <= live[b].second && live[b].first <= live[a].second;
      const bool space_overlap =
          plan.offsets[a] < plan.offsets[b] + plan.sizes[b] && plan.offsets[b] < plan.offsets[a] + plan.sizes[a];
      INFO(g.values()[a].name << " vs " << g.values()[b].name);
      REQUIRE_FALSE((time_overlap && space_overlap));
    }
  }
  // In-place values share their root's bytes.
  for (std::size_t v = 0; v < g.values().size(); ++v) {
    if (g.values()[v].alias_of != graph::kNoValue) {
      CHECK(plan.offsets[v] == plan.offsets[static_cast<std::size_t>(g.values()[v].alias_of)]);
    }
  }
}

TEST_CASE("graph printers render every node", "[graph]") {
  const graph::Graph g = tiny_graph();
  const graph::MemoryPlan plan = graph::plan_memory(g, 16, 1);
  const std::string table = graph::to_table(g, plan);
  CHECK(table.find("blk.1.ffn_down") != std::string::npos);
  CHECK(table.find("attention") != std::string::npos);
  const auto doc = nlohmann::json::parse(graph::to_json(g, plan));
  CHECK(doc["nodes"].size() == g.nodes().size());
  CHECK(doc["memory_plan"]["arena_bytes"] == plan.arena_bytes);
  CHECK(doc["nodes"][1]["op"] == "rms_norm");
}

TEST_CASE("memory plan rejects impossible sizes", "[graph]") {
  const graph::Graph g = tiny_graph();
  CHECK_THROWS_AS(graph::plan_memory(g, 0, 1), Error);
  CHECK_THROWS_AS(graph::plan_memory(g, 4, 5), Error);
}

TEST_CASE("each architecture's graph has its own structure", "[graph][arch]") {
  const auto count = [](const graph::Graph& g, graph::OpKind op) {
    return std::count_if(g.nodes().begin(), g.nodes().end(), [&](const graph::Node& n) { return n.op == op; });
  };
  const auto build = [](RandomModelOptions o, const std::string& tag) {
    const auto file = gguf::File::open(test::random_model(o, tag));
    return build_model_graph(read_model_spec(file), file, {DType::kF16, std::nullopt});
  };
  RandomModelOptions o = test::tiny_options(DType::kF32);
  o.layers = 7;
  o.architecture = "gemma3";
  o.head_dim = 32;
  o.sliding_window = 16;
  o.rope_freq_base = 1000000.0f;
  o.rope_scaling = "linear";
  o.final_logit_softcap = 30.0f;
  const graph::Graph gemma = build(o, "graph-gemma3");
  CHECK(count(gemma, graph::OpKind::kScale) == 1);
  CHECK(count(gemma, graph::OpKind::kSoftCap) == 1);
  CHECK(count(gemma, graph::OpKind::kGeGlu) == 7);
  CHECK(count(gemma, graph::OpKind::kSwiGlu) == 0);
  CHECK(count(gemma, graph::OpKind::kHeadRmsNorm) == 14);
  CHECK(count(gemma, graph::OpKind::kRmsNorm) == 4 * 7 + 1);  // pre and post norms, output norm
  for (const auto& node : gemma.nodes()) {
    const bool global = node.layer == 5;  // layers 0-4 and 6 are local
    if (node.op == graph::OpKind::kAttention) {
      CHECK(node.attrs.window == (global ? 0 : 16));
      CHECK(node.attrs.attn_scale == Approx(1.0 / std::sqrt(32.0)));
    }
    if (node.op == graph::OpKind::kRope) {
      CHECK(node.attrs.rope.neox);
      CHECK(node.attrs.rope.freq_base == (global ? 1000000.0f : 10000.0f));
      CHECK(node.attrs.rope.scaling == (global ? graph::RopeScaling::kLinear : graph::RopeScaling::kNone));
      CHECK(node.attrs.rope.freq_scale == (global ? 0.25f : 1.0f));
    }
  }
  o = test::tiny_options(DType::kF32);
  o.architecture = "qwen2";
  const graph::Graph qwen2 = build(o, "graph-qwen2");
  CHECK(count(qwen2, graph::OpKind::kAddBias) == 3 * o.layers);
  CHECK(count(qwen2, graph::OpKind::kHeadRmsNorm) == 0);
  o.architecture = "qwen3";
  const graph::Graph qwen3 = build(o, "graph-qwen3");
  CHECK(count(qwen3, graph::OpKind::kAddBias) == 0);
  CHECK(count(qwen3, graph::OpKind::kHeadRmsNorm) == 2 * o.layers);
  o.architecture = "llama";
  o.rope_scaling = "llama3";
  const graph::Graph llama3 = build(o, "graph-llama3");
  for (const auto& node : llama3.nodes()) {
    if (node.op == graph::OpKind::kRope) {
      REQUIRE(node.weights.size() == 1);  // rope_freqs.weight
      CHECK(llama3.weights()[static_cast<std::size_t>(node.weights[0])].name == "rope_freqs.weight");
      CHECK_FALSE(node.attrs.rope.neox);
    }
  }
}
