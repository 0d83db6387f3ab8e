// Human (table) and machine (JSON) renderings of a graph and its memory plan.
#pragma once

#include "graph/graph.hpp"
#include "graph/memory_plan.hpp"

#include <string>

namespace sitsrt::graph {

std::string to_table(const Graph& graph, const MemoryPlan& plan);
std::string to_json(const Graph& graph, const MemoryPlan& plan, int indent = 2);

}  // namespace sitsrt::graph
