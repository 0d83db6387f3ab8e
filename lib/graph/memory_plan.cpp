#include "graph/memory_plan.hpp"

#include "core/check.hpp"

#include <algorithm>
#include <numeric>

namespace sitsrt::graph {
namespace {

constexpr std::uint64_t kAlign = 64;

std::uint64_t align_up(std::uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

struct Interval {
  ValueId root;
  std::size_t first;  // node index that defines the storage
  std::size_t last;   // last node index that reads or writes it
  std::uint64_t size;
};

}  // namespace

MemoryPlan plan_memory(const Graph& graph, std::int64_t max_tokens, std::int64_t max_outputs) {
  if (max_tokens < 1 || max_outputs < 1 || max_outputs > max_tokens) {
    raise(ErrorCode::kInvalidArgument, "memory plan: max_tokens {} / max_outputs {} out of range", max_tokens,
          max_outputs);
  }
  const auto& values = graph.values();
  const auto& nodes = graph.nodes();
  MemoryPlan plan;
  plan.max_tokens = max_tokens;
  plan.max_outputs = max_outputs;
  plan.offsets.assign(values.size(), 0);
  plan.sizes.assign(values.size(), 0);

  // Lifetime of each storage root: from its defining node to the last node touching it.
  // The graph output stays live to the end (the caller reads it after the step).
  std::vector<Interval> intervals;
  std::vector<std::ptrdiff_t> slot(values.size(), -1);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto touch = [&](ValueId v) {
      const ValueId root = graph.storage_of(v);
      auto& s = slot[static_cast<std::size_t>(root)];
      if (s < 0) {
        const Value& value = values[static_cast<std::size_t>(root)];
        const std::int64_t rows = value.rows == RowSpace::kTokens ? max_tokens : max_outputs;
        const std::uint64_t bytes = static_cast<std::uint64_t>(value.width * rows) * sizeof(float);
        intervals.push_back({root, i, i, align_up(bytes)});
        s = static_cast<std::ptrdiff_t>(intervals.size() - 1);
      }
      intervals[static_cast<std::size_t>(s)].last = i;
    };
    touch(nodes[i].output);
    for (ValueId v : nodes[i].inputs) touch(v);
  }
  if (graph.output() != kNoValue) {
    const auto s = slot[static_cast<std::size_t>(graph.storage_of(graph.output()))];
    if (s >= 0) intervals[static_cast<std::size_t>(s)].last = nodes.size();
  }

  // Greedy placement, largest first: each buffer goes to the lowest offset that does not
  // overlap a placed buffer whose lifetime intersects its own.
  std::vector<std::size_t> order(intervals.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return intervals[a].size > intervals[b].size; });
  std::vector<std::uint64_t> root_offset(values.size(), 0);
  std::vector<std::size_t> placed;
  for (std::size_t idx : order) {
    const Interval& cur = intervals[idx];
    std::vector<std::pair<std::uint64_t, std::uint64_t>> busy;  // [begin, end) byte ranges
    for (std::size_t p : placed) {
      const Interval& other = intervals[p];
      if (other.first <= cur.last && cur.first <= other.last) {
        const std::uint64_t off = root_offset[static_cast<std::size_t>(other.root)];
        busy.emplace_back(off, off + other.size);
      }
    }
    std::sort(busy.begin(), busy.end());
    std::uint64_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + cur.size <= begin) break;
      offset = std::max(offset, end);
    }
    root_offset[static_cast<std::size_t>(cur.root)] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + cur.size);
    plan.naive_bytes += cur.size;
    placed.push_back(idx);
  }

  for (std::size_t v = 0; v < values.size(); ++v) {
    const ValueId root = graph.storage_of(static_cast<ValueId>(v));
    plan.offsets[v] = root_offset[static_cast<std::size_t>(root)];
    const Value& value = values[v];
    const std::int64_t rows = value.rows == RowSpace::kTokens ? max_tokens : max_outputs;
    plan.sizes[v] = static_cast<std::uint64_t>(value.width * rows) * sizeof(float);
  }
  return plan;
}

}  // namespace sitsrt::graph
