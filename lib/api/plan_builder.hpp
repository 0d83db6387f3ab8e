// Internal: builds the DevicePlan of a loaded graph (one CPU device until the partitioner).
#pragma once

#include "graph/graph.hpp"

#include <sitsrt/model_info.hpp>
#include <sitsrt/plan.hpp>

namespace sitsrt {

// weight_bytes: what the backend holds for the graph's weights (resident copies may pad rows).
DevicePlan build_single_device_plan(const graph::Graph& graph, const ModelInfo& info, std::uint64_t budget_bytes,
                                    std::uint64_t weight_bytes);

}  // namespace sitsrt
