// Wall time per kind of graph node, split into decode steps (one token) and prefill steps, for
// finding what a step spends beside the weight-streaming matmuls (EngineOptions::profile_ops).
// Steps run one at a time (ExecutionPlan::step_mutex), which is what makes the plain counters safe.
#pragma once

#include "graph/graph.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace sitsrt {

class StepProfile {
 public:
  explicit StepProfile(const graph::Graph& graph) {
    for (const graph::Node& node : graph.nodes()) {
      std::string label(graph::name(node.op));
      const auto& out = graph.values()[static_cast<std::size_t>(node.output)];
      if (node.op == graph::OpKind::kMatMul && out.rows == graph::RowSpace::kOutputs) label = "matmul (output head)";
      std::size_t id = 0;
      while (id < labels_.size() && labels_[id] != label) ++id;
      if (id == labels_.size()) labels_.push_back(label);
      label_of_node_.push_back(id);
    }
    for (auto& side : sides_) side.entries.assign(labels_.size(), {});
  }

  struct Entry {
    std::uint64_t calls = 0;
    double seconds = 0.0;
  };
  struct Side {
    std::uint64_t steps = 0, tokens = 0;
    double seconds = 0.0;  // whole steps, the per-node times plus what lies between them
    std::vector<Entry> entries;
  };

  void add_node(std::size_t node, bool decode, double seconds) {
    Entry& e = sides_[decode].entries[label_of_node_[node]];
    ++e.calls;
    e.seconds += seconds;
  }
  void add_step(bool decode, std::int64_t tokens, double seconds) {
    Side& s = sides_[decode];
    ++s.steps;
    s.tokens += static_cast<std::uint64_t>(tokens);
    s.seconds += seconds;
  }
  [[nodiscard]] const std::vector<std::string>& labels() const noexcept { return labels_; }
  [[nodiscard]] const Side& side(bool decode) const noexcept { return sides_[decode]; }
  void reset() {
    for (auto& side : sides_) side = Side{0, 0, 0.0, std::vector<Entry>(labels_.size())};
  }

 private:
  std::vector<std::string> labels_;
  std::vector<std::size_t> label_of_node_;
  Side sides_[2];  // [0] prefill, [1] decode
};

}  // namespace sitsrt
