#include "graph/graph.hpp"

#include "core/check.hpp"

#include <algorithm>

namespace sitsrt::graph {

std::string_view name(OpKind op) noexcept {
  switch (op) {
    case OpKind::kEmbed: return "embed";
    case OpKind::kRmsNorm: return "rms_norm";
    case OpKind::kHeadRmsNorm: return "head_rms_norm";
    case OpKind::kGeGlu: return "geglu_tanh";
    case OpKind::kAddBias: return "add_bias";
    case OpKind::kScale: return "scale";
    case OpKind::kSoftCap: return "soft_cap";
    case OpKind::kMatMul: return "matmul";
    case OpKind::kRope: return "rope";
    case OpKind::kAttention: return "attention";
    case OpKind::kSwiGlu: return "swiglu";
    case OpKind::kAdd: return "add";
    case OpKind::kGatherRows: return "gather_rows";
  }
  return "unknown";
}

std::string_view name(RopeScaling scaling) noexcept {
  switch (scaling) {
    case RopeScaling::kNone: return "none";
    case RopeScaling::kLinear: return "linear";
    case RopeScaling::kYarn: return "yarn";
    case RopeScaling::kLlama3: return "llama3";
  }
  return "unknown";
}

WeightId Graph::add_weight(Weight weight) {
  weights_.push_back(std::move(weight));
  return static_cast<WeightId>(weights_.size() - 1);
}

void Graph::set_weight_type(WeightId id, DType type) {
  Weight& w = weights_.at(static_cast<std::size_t>(id));
  std::uint64_t rows = 1;
  for (std::size_t i = 1; i < w.dims.size(); ++i) rows *= static_cast<std::uint64_t>(w.dims[i]);
  w.type = type;
  w.bytes = row_bytes(type, w.dims[0]) * rows;
  for (Node& node : nodes_) {
    if (std::find(node.weights.begin(), node.weights.end(), id) != node.weights.end()) fill_cost(node);
  }
}

ValueId Graph::add_node(OpKind op, std::string node_name, std::int32_t layer, std::vector<ValueId> inputs,
                        std::vector<WeightId> weights, NodeAttrs attrs, std::int64_t out_width, RowSpace rows,
                        bool in_place) {
  Value value{node_name, out_width, rows, kNoValue};
  if (in_place) {
    SITSRT_ASSERT(!inputs.empty());
    value.alias_of = storage_of(inputs[0]);
  }
  values_.push_back(std::move(value));
  const auto out = static_cast<ValueId>(values_.size() - 1);
  Node node{op, std::move(node_name), layer, std::move(inputs), std::move(weights), out, attrs, {}};
  fill_cost(node);
  nodes_.push_back(std::move(node));
  return out;
}

ValueId Graph::storage_of(ValueId value) const noexcept {
  while (value != kNoValue && values_[static_cast<std::size_t>(value)].alias_of != kNoValue) {
    value = values_[static_cast<std::size_t>(value)].alias_of;
  }
  return value;
}

std::int32_t Graph::n_layers() const noexcept {
  std::int32_t n = 0;
  for (const auto& node : nodes_) n = std::max(n, node.layer + 1);
  return n;
}

std::uint64_t Graph::total_weight_bytes() const noexcept {
  std::uint64_t total = 0;
  for (const auto& w : weights_) total += w.bytes;
  return total;
}

void Graph::fill_cost(Node& node) const {
  NodeCost& c = node.cost;
  const auto width = [&](ValueId v) { return static_cast<std::uint64_t>(values_[static_cast<std::size_t>(v)].width); };
  const std::uint64_t out = width(node.output);
  std::uint64_t in = 0;
  for (ValueId v : node.inputs) in += width(v);
  c.activation_bytes = (in + out) * sizeof(float);
  for (WeightId w : node.weights) c.weight_bytes += weights_[static_cast<std::size_t>(w)].bytes;
  switch (node.op) {
    case OpKind::kMatMul:
      c.flops = 2 * out * width(node.inputs[0]);
      break;
    case OpKind::kRmsNorm:
    case OpKind::kHeadRmsNorm:
      c.flops = 3 * out;
      break;
    case OpKind::kGeGlu:
      c.flops = 10 * out;
      break;
    case OpKind::kAddBias:
    case OpKind::kScale:
      c.flops = out;
      break;
    case OpKind::kSoftCap:
      c.flops = 4 * out;
      break;
    case OpKind::kRope:
      c.flops = 3 * out;
      break;
    case OpKind::kSwiGlu:
      c.flops = 6 * out;
      break;
    case OpKind::kAdd:
      c.flops = out;
      break;
    case OpKind::kAttention:
      // QK^T and PV: 2 FLOPs each per head dim per attended position.
      c.flops_per_context = 4 * static_cast<std::uint64_t>(node.attrs.n_heads * node.attrs.head_dim);
      c.kv_bytes = 2 * static_cast<std::uint64_t>(node.attrs.n_kv_heads * node.attrs.head_dim) *
                   node.attrs.kv_element_bytes;
      break;
    case OpKind::kEmbed:
    case OpKind::kGatherRows:
      break;
  }
}

void Graph::validate() const {
  const auto n_values = static_cast<ValueId>(values_.size());
  std::vector<bool> defined(values_.size(), false);
  for (const auto& node : nodes_) {
    for (ValueId v : node.inputs) {
      if (v < 0 || v >= n_values || !defined[static_cast<std::size_t>(v)]) {
        raise(ErrorCode::kInternal, "graph: node '{}' reads value {} before it is defined", node.name, v);
      }
    }
    for (WeightId w : node.weights) {
      if (w < 0 || static_cast<std::size_t>(w) >= weights_.size()) {
        raise(ErrorCode::kInternal, "graph: node '{}' uses unknown weight {}", node.name, w);
      }
    }
    if (node.output < 0 || node.output >= n_values) {
      raise(ErrorCode::kInternal, "graph: node '{}' has no output", node.name);
    }
    const Value& out = values_[static_cast<std::size_t>(node.output)];
    if (out.alias_of != kNoValue) {
      const Value& root = values_[static_cast<std::size_t>(out.alias_of)];
      if (root.width != out.width || root.rows != out.rows) {
        raise(ErrorCode::kInternal, "graph: in-place node '{}' changes the shape of '{}'", node.name, root.name);
      }
    }
    defined[static_cast<std::size_t>(node.output)] = true;
  }
  if (output_ == kNoValue || !defined[static_cast<std::size_t>(output_)]) {
    raise(ErrorCode::kInternal, "graph: output value is not produced by any node");
  }
}

}  // namespace sitsrt::graph
