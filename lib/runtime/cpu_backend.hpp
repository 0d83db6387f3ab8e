// The CPU backend: weights are read in place from the mmapped file, activations and KV caches
// live in 64-byte aligned host buffers counted against an optional budget.
#pragma once

#include "cpu/cpu_context.hpp"
#include "cpu/matmul.hpp"
#include "runtime/backend.hpp"
#include "runtime/decode_fusion.hpp"

#include <atomic>
#include <memory>
#include <span>
#include <vector>

namespace sitsrt {

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, cpu::Isa isa, std::uint64_t budget_bytes, bool int8_activations = false);

  [[nodiscard]] std::string_view name() const noexcept override { return "cpu"; }
  void bind_weights(const graph::Graph& graph, const graph::WeightSource& source) override;
  void prepare(const graph::Graph& graph, const graph::MemoryPlan& plan, std::int64_t kv_capacity) override;
  [[nodiscard]] std::unique_ptr<BackendBuffer> allocate(std::size_t bytes, std::string_view what) override;
  void run(const graph::Graph& graph, std::size_t index, const StepContext& step) override;
  void synchronize() override {}
  [[nodiscard]] MemoryUsage memory() const override;

  [[nodiscard]] cpu::CpuContext& context() noexcept { return ctx_; }

 private:
  friend class CpuBuffer;
  void release(std::size_t bytes) noexcept;
  // True when node `index` belongs to a decode fusion that applies to this step (one row); the
  // fusion runs when its first node comes, and the others are then done.
  bool run_fused(const graph::Graph& graph, std::size_t index, const StepContext& step);

  cpu::CpuContext ctx_;
  std::uint64_t budget_bytes_;
  std::uint64_t weight_bytes_ = 0;
  std::atomic<std::uint64_t> allocated_{0};
  std::atomic<std::uint64_t> high_water_{0};
  std::vector<cpu::WeightMatrix> weights_;  // by graph WeightId; norm vectors are 1 x n
  DecodeFusions fusions_;                   // of the prepared graph (none when SITSRT_FUSE=0)
};

}  // namespace sitsrt
