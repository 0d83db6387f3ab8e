#include "graph/graph_printer.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace sitsrt::graph {
namespace {

std::string shape_of(const Value& v) {
  return fmt::format("[{} x {}]", v.rows == RowSpace::kTokens ? "T" : "O", v.width);
}

std::string weight_summary(const Graph& graph, const Node& node) {
  std::string s;
  for (WeightId w : node.weights) {
    const Weight& weight = graph.weights()[static_cast<std::size_t>(w)];
    if (!s.empty()) s += ", ";
    s += fmt::format("{} {}", name(weight.type), weight.dims.size() == 2
                                                     ? fmt::format("[{}x{}]", weight.dims[0], weight.dims[1])
                                                     : fmt::format("[{}]", weight.dims[0]));
  }
  return s;
}

std::string human_bytes(std::uint64_t bytes) {
  if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1ull << 30));
  if (bytes >= (1ull << 20)) return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1ull << 20));
  if (bytes >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(bytes) / (1ull << 10));
  return fmt::format("{} B", bytes);
}

// The attributes that distinguish one architecture's nodes from another's (window, rope base
// and scaling, scale factors); empty for nodes whose behaviour their op name says in full.
std::string attribute_summary(const Node& node) {
  const NodeAttrs& a = node.attrs;
  switch (node.op) {
    case OpKind::kRope: {
      std::string s = fmt::format("base={:g}{}", a.rope.freq_base, a.rope.neox ? " neox" : "");
      if (a.rope.scaling != RopeScaling::kNone) s += fmt::format(" {}", name(a.rope.scaling));
      if (a.rope.freq_scale != 1.0f) s += fmt::format(" freq_scale={:g}", a.rope.freq_scale);
      if (!node.weights.empty()) s += " factors";
      return s;
    }
    case OpKind::kAttention:
      return a.window > 0 ? fmt::format("window={} scale={:g}", a.window, a.attn_scale)
                          : fmt::format("scale={:g}", a.attn_scale);
    case OpKind::kScale: return fmt::format("x{:g}", a.scalar);
    case OpKind::kSoftCap: return fmt::format("cap={:g}", a.scalar);
    default: return {};
  }
}

}  // namespace

std::string to_table(const Graph& graph, const MemoryPlan& plan) {
  std::string out = fmt::format("{:>4}  {:>5}  {:<13} {:<26} {:<14} {:<26} {:>12} {:>12}\n", "node", "layer", "op",
                                "name", "output", "weights", "weight bytes", "MFLOP/token");
  for (std::size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& node = graph.nodes()[i];
    const Value& v = graph.values()[static_cast<std::size_t>(node.output)];
    const std::string layer = node.layer < 0 ? "-" : std::to_string(node.layer);
    std::string flops = fmt::format("{:.3f}", static_cast<double>(node.cost.flops) / 1e6);
    if (node.cost.flops_per_context != 0) {
      flops = fmt::format("{:.4f}/ctx", static_cast<double>(node.cost.flops_per_context) / 1e6);
    }
    const std::string attrs = attribute_summary(node);
    out += fmt::format("{:>4}  {:>5}  {:<13} {:<26} {:<14} {:<26} {:>12} {:>12}{}{}\n", i, layer, name(node.op),
                       node.name, shape_of(v), weight_summary(graph, node),
                       node.cost.weight_bytes ? human_bytes(node.cost.weight_bytes) : "", flops,
                       v.alias_of != kNoValue ? "  (in place)" : "", attrs.empty() ? "" : "  " + attrs);
  }
  std::uint64_t kv_per_token = 0;
  for (const Node& node : graph.nodes()) kv_per_token += node.cost.kv_bytes;
  out += fmt::format(
      "\n{} nodes, {} layers; weights {} ({} tensors); KV cache {} per token\n"
      "activation arena {} for {} tokens per step (without reuse: {})\n",
      graph.nodes().size(), graph.n_layers(), human_bytes(graph.total_weight_bytes()), graph.weights().size(),
      human_bytes(kv_per_token), human_bytes(plan.arena_bytes), plan.max_tokens, human_bytes(plan.naive_bytes));
  return out;
}

std::string to_json(const Graph& graph, const MemoryPlan& plan, int indent) {
  using nlohmann::json;
  json nodes = json::array();
  for (std::size_t i = 0; i < graph.nodes().size(); ++i) {
    const Node& node = graph.nodes()[i];
    json inputs = json::array();
    for (ValueId v : node.inputs) inputs.push_back(graph.values()[static_cast<std::size_t>(v)].name);
    json weights = json::array();
    for (WeightId w : node.weights) {
      const Weight& weight = graph.weights()[static_cast<std::size_t>(w)];
      weights.push_back({{"name", weight.name}, {"type", name(weight.type)}, {"dims", weight.dims},
                         {"bytes", weight.bytes}});
    }
    const Value& out = graph.values()[static_cast<std::size_t>(node.output)];
    nodes.push_back({
        {"index", i},
        {"op", name(node.op)},
        {"name", node.name},
        {"layer", node.layer},
        {"attributes", attribute_summary(node)},
        {"inputs", inputs},
        {"weights", weights},
        {"output", {{"name", out.name}, {"width", out.width},
                    {"rows", out.rows == RowSpace::kTokens ? "tokens" : "outputs"},
                    {"in_place", out.alias_of != kNoValue},
                    {"arena_offset", plan.offsets[static_cast<std::size_t>(node.output)]}}},
        {"cost", {{"weight_bytes", node.cost.weight_bytes},
                  {"activation_bytes_per_token", node.cost.activation_bytes},
                  {"kv_bytes_per_token", node.cost.kv_bytes},
                  {"flops_per_token", node.cost.flops},
                  {"flops_per_token_per_context_position", node.cost.flops_per_context}}},
    });
  }
  std::uint64_t kv_per_token = 0;
  for (const Node& node : graph.nodes()) kv_per_token += node.cost.kv_bytes;
  json doc = {
      {"nodes", nodes},
      {"n_layers", graph.n_layers()},
      {"weight_bytes", graph.total_weight_bytes()},
      {"kv_bytes_per_token", kv_per_token},
      {"memory_plan", {{"max_tokens", plan.max_tokens}, {"max_outputs", plan.max_outputs},
                       {"arena_bytes", plan.arena_bytes}, {"without_reuse_bytes", plan.naive_bytes}}},
  };
  return doc.dump(indent);
}

}  // namespace sitsrt::graph
