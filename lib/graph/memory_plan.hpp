// Liveness-based placement of activation values in one arena. Values whose lifetimes do not
// overlap share bytes; the arena is sized once for the largest step, so nothing is allocated
// while tokens are generated.
#pragma once

#include "graph/graph.hpp"

#include <cstdint>
#include <vector>

namespace sitsrt::graph {

struct MemoryPlan {
  std::int64_t max_tokens = 0;      // rows a kTokens value is sized for
  std::int64_t max_outputs = 0;     // rows a kOutputs value is sized for
  std::vector<std::uint64_t> offsets;  // per value (aliases share their root's offset)
  std::vector<std::uint64_t> sizes;    // per value, bytes at the maximum row count
  std::uint64_t arena_bytes = 0;
  std::uint64_t naive_bytes = 0;       // sum of all roots' sizes, for comparison
};

// Values are float32 rows. Offsets are 64-byte aligned.
MemoryPlan plan_memory(const Graph& graph, std::int64_t max_tokens, std::int64_t max_outputs);

}  // namespace sitsrt::graph
