#include "backend/decode_fusion.hpp"

namespace sitsrt {
namespace {

constexpr std::size_t kMaxGroup = 8;  // cpu::matvec_group's and the CUDA grouped kernel's limit

bool is_matmul_reading(const graph::Node& node, graph::ValueId input) {
  return node.op == graph::OpKind::kMatMul && node.inputs.size() == 1 && node.inputs[0] == input;
}

}  // namespace

DecodeFusions find_decode_fusions(const graph::Graph& graph) {
  const auto& nodes = graph.nodes();
  const auto width = [&](graph::ValueId v) { return graph.values()[static_cast<std::size_t>(v)].width; };
  DecodeFusions out;
  out.fusion_of.assign(nodes.size(), -1);
  const auto add = [&](FusionKind kind, std::vector<std::size_t> members) {
    for (const std::size_t i : members) out.fusion_of[i] = static_cast<std::int32_t>(out.fusions.size());
    out.fusions.push_back({kind, std::move(members)});
  };
  for (std::size_t i = 0; i < nodes.size();) {
    const graph::Node& lead = nodes[i];
    if (lead.op == graph::OpKind::kRope && i + 1 < nodes.size()) {
      const graph::Node& next = nodes[i + 1];
      if (next.op == graph::OpKind::kRope && next.attrs.rope == lead.attrs.rope && next.weights == lead.weights &&
          next.output != lead.output) {
        add(FusionKind::kRopePair, {i, i + 1});
        i += 2;
        continue;
      }
    }
    if (lead.op != graph::OpKind::kMatMul || lead.inputs.size() != 1) {
      ++i;
      continue;
    }
    std::size_t end = i + 1;
    while (end < nodes.size() && end - i < kMaxGroup && is_matmul_reading(nodes[end], lead.inputs[0])) ++end;
    const std::size_t count = end - i;
    if (count == 2 && end < nodes.size()) {
      const graph::Node& act = nodes[end];
      const graph::ValueId gate = nodes[i].output, up = nodes[i + 1].output;
      const bool gated = act.op == graph::OpKind::kSwiGlu || act.op == graph::OpKind::kGeGlu;
      if (gated && act.inputs.size() == 2 && act.inputs[0] == gate && act.inputs[1] == up && width(gate) == width(up) &&
          width(act.output) == width(gate)) {
        add(act.op == graph::OpKind::kSwiGlu ? FusionKind::kSwiGlu : FusionKind::kGeGlu, {i, i + 1, end});
        i = end + 1;
        continue;
      }
    }
    if (count >= 2) {
      std::vector<std::size_t> members;
      for (std::size_t k = i; k < end; ++k) members.push_back(k);
      add(FusionKind::kMatvecs, std::move(members));
      i = end;
      continue;
    }
    if (end < nodes.size()) {
      const graph::Node& sum = nodes[end];
      const graph::ValueId y = lead.output;
      if (sum.op == graph::OpKind::kAdd && sum.inputs.size() == 2 && (sum.inputs[0] == y) != (sum.inputs[1] == y) &&
          width(sum.inputs[0]) == width(y) && width(sum.inputs[1]) == width(y) && width(sum.output) == width(y)) {
        add(FusionKind::kAddInto, {i, end});
        i = end + 1;
        continue;
      }
    }
    ++i;
  }
  return out;
}

}  // namespace sitsrt
