// The narrow interface every compute backend implements (CPU now; CUDA later). Coarse
// operations only: bind weights, allocate budgeted buffers, run one graph node, synchronise,
// report memory. The executor never touches kernels directly.
#pragma once

#include "graph/graph.hpp"
#include "graph/memory_plan.hpp"
#include "graph/weight_source.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace sitsrt {

class KvCache;

// A buffer owned by a backend (host memory for the CPU backend, device memory later).
class BackendBuffer {
 public:
  virtual ~BackendBuffer() = default;
  [[nodiscard]] virtual std::byte* data() noexcept = 0;
  [[nodiscard]] virtual std::size_t size() const noexcept = 0;
};

// Everything a node needs about the current step, besides the graph.
struct StepContext {
  std::int64_t n_tokens = 0;    // rows of kTokens values
  std::int64_t n_outputs = 0;   // rows of kOutputs values
  std::int64_t pos0 = 0;        // position of the first token of the step
  std::span<const std::int32_t> token_ids;
  std::span<const std::int32_t> positions;  // pos0, pos0 + 1, ...
  std::byte* arena = nullptr;   // activation arena laid out by `plan`
  const graph::MemoryPlan* plan = nullptr;
  KvCache* kv = nullptr;
};

struct MemoryUsage {
  std::uint64_t weight_bytes = 0;      // weights resident (mapped or uploaded)
  std::uint64_t allocated_bytes = 0;   // live buffers from allocate()
  std::uint64_t high_water_bytes = 0;  // most ever live at once
  std::uint64_t budget_bytes = 0;      // 0: unlimited
};

class Backend {
 public:
  virtual ~Backend() = default;
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;

  // Makes the graph's weights usable by run(). Called once, before any step.
  virtual void bind_weights(const graph::Graph& graph, const graph::WeightSource& source) = 0;

  // Sizes per-thread scratch for steps of up to plan.max_tokens tokens and `kv_capacity` positions.
  virtual void prepare(const graph::Graph& graph, const graph::MemoryPlan& plan, std::int64_t kv_capacity) = 0;

  // Allocates against the budget; throws sitsrt::Error(kOutOfMemory) naming `what` and the deficit.
  [[nodiscard]] virtual std::unique_ptr<BackendBuffer> allocate(std::size_t bytes, std::string_view what) = 0;

  // Runs node `index` of `graph` for the step. Thread-safe with respect to other steps.
  virtual void run(const graph::Graph& graph, std::size_t index, const StepContext& step) = 0;

  virtual void synchronize() = 0;
  [[nodiscard]] virtual MemoryUsage memory() const = 0;
};

}  // namespace sitsrt
