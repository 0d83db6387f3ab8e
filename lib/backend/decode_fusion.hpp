// Decode fusions: runs of graph nodes that a backend may execute as one unit in decode steps (the
// CPU: one parallel region for a one-row step, cpu/matmul/matvec_group.hpp; CUDA: one kernel,
// cuda/kernels/planar_matmul.cu). Found once per graph; the nodes keep their own outputs, so every
// value the graph defines is still written, bit for bit as unfused.
#pragma once

#include "graph/graph.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sitsrt {

enum class FusionKind : std::uint8_t {
  kMatvecs,   // consecutive MatMuls reading the same input (Q, K, V)
  kSwiGlu,    // gate MatMul, up MatMul (same input), SwiGlu(gate, up)
  kGeGlu,     // gate MatMul, up MatMul (same input), GeGlu(gate, up) (Gemma)
  kAddInto,   // MatMul, then Add of its output and a residual (attention output, FFN down)
  kRopePair,  // two Rope nodes of one setting on different values (Q, K): one launch on CUDA
};

struct Fusion {
  FusionKind kind;
  std::vector<std::size_t> nodes;  // node indices in execution order; nodes[0] leads
};

struct DecodeFusions {
  std::vector<Fusion> fusions;
  std::vector<std::int32_t> fusion_of;  // per node: its index in `fusions`, or -1
};

DecodeFusions find_decode_fusions(const graph::Graph& graph);

}  // namespace sitsrt
