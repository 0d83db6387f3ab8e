// One graph node of a step run through a backend's OpKernels: the node's values as views into
// the step's arena, its weights as WeightRefs, attention's sequences from their KV caches, and
// the ops:: entry point (shape, type and device checks) for its kind. Every backend whose nodes
// map one-to-one onto OpKernels calls this; fusions and device graphs are the backend's own.
#pragma once

#include "backend/backend.hpp"
#include "ops/op_kernels.hpp"

#include <cstddef>
#include <vector>

namespace sitsrt {

// `attention_sequences` is the caller's reused list (cleared and filled for attention nodes).
void run_node_through_kernels(ops::OpKernels& kernels, const graph::Graph& graph, std::size_t index,
                              const StepContext& step, std::vector<ops::AttentionSequenceRef>& attention_sequences);

}  // namespace sitsrt
