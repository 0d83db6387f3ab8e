// The CPU backend: weights are either copied at load into one huge-page host buffer, in the
// layouts the kernels read fastest (resident, the default), or read in place from the mmapped
// file; activations and KV caches live in 64-byte aligned host buffers counted against an
// optional budget.
#pragma once

#include "core/aligned_buffer.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/matmul.hpp"
#include "runtime/backend.hpp"
#include "runtime/decode_fusion.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace sitsrt {

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, cpu::Isa isa, std::uint64_t budget_bytes, bool int8_activations = false,
             bool resident_weights = false);

  [[nodiscard]] std::string_view name() const noexcept override { return "cpu"; }
  void bind_weights(const graph::Graph& graph, const graph::WeightSource& source) override;
  void prepare(const graph::Graph& graph, const graph::MemoryPlan& plan, std::int64_t kv_capacity) override;
  [[nodiscard]] std::unique_ptr<BackendBuffer> allocate(std::size_t bytes, std::string_view what) override;
  void run(const graph::Graph& graph, std::size_t index, const StepContext& step) override;
  void synchronize() override {}
  [[nodiscard]] MemoryUsage memory() const override;

  [[nodiscard]] cpu::CpuContext& context() noexcept { return ctx_; }

  // Bytes bind_weights will hold for `graph`'s weights (resident: with row padding).
  [[nodiscard]] std::uint64_t weight_bytes_for(const graph::Graph& graph) const;
  // Wall time bind_weights took to copy (and repack) resident weights; 0 when mapped.
  [[nodiscard]] double weight_copy_seconds() const noexcept { return copy_seconds_; }
  // Called by bind_weights with the fraction of resident weight bytes copied (null: none).
  void set_progress(std::function<void(double)> progress) { progress_ = std::move(progress); }
  // Matmul weights bind_weights repacked into another layout (cpu/weight_layout.hpp).
  [[nodiscard]] int repacked_weights() const noexcept { return repacked_; }

 private:
  friend class CpuBuffer;
  void release(std::size_t bytes) noexcept;
  // True when node `index` belongs to a decode fusion that applies to this step (one row); the
  // fusion runs when its first node comes, and the others are then done.
  bool run_fused(const graph::Graph& graph, std::size_t index, const StepContext& step);

  // The layout and row stride each weight is bound in (by WeightId).
  struct Placement {
    DType layout;
    std::size_t row_stride;
    std::size_t offset;  // in resident_ (resident weights only)
  };
  [[nodiscard]] std::vector<Placement> place_weights(const graph::Graph& graph, std::size_t* total) const;

  cpu::CpuContext ctx_;
  std::uint64_t budget_bytes_;
  bool resident_weights_;
  AlignedBuffer resident_;  // every weight, when resident_weights_
  double copy_seconds_ = 0.0;
  std::function<void(double)> progress_;
  int repacked_ = 0;
  std::uint64_t weight_bytes_ = 0;
  std::atomic<std::uint64_t> allocated_{0};
  std::atomic<std::uint64_t> high_water_{0};
  std::vector<cpu::WeightMatrix> weights_;  // by graph WeightId; norm vectors are 1 x n
  DecodeFusions fusions_;                   // of the prepared graph (none when SITSRT_FUSE=0)
};

}  // namespace sitsrt
