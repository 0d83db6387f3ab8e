// The CPU backend: weights are either copied at load into one huge-page host buffer, in the
// layouts the kernels read fastest (resident, the default), or read in place from the mmapped
// file; activations and KV caches live in 64-byte aligned host buffers counted against an
// optional budget. Made through the backend registry (runtime/backend_registry.hpp); only tests
// and the registry name this class.
#pragma once

#include "backend/backend.hpp"
#include "backend/decode_fusion.hpp"
#include "core/aligned_buffer.hpp"
#include "cpu/cpu_context.hpp"
#include "cpu/matmul/matmul.hpp"
#include "cpu_backend/cpu_kernels.hpp"

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace sitsrt {

struct CpuBackendOptions {
  int threads = 0;                 // <= 0: all hardware threads
  std::string isa = "auto";        // auto, amx, avx512vnni, avx512, avx2, generic (clamped to the CPU)
  std::uint64_t budget_bytes = 0;  // weights + buffers; 0: unlimited
  bool int8_activations = false;   // decode matmuls quantize their input row to int8
  bool resident_weights = false;   // copy (and repack) the weights at bind time
  bool decode_fusion = true;       // one-row steps run the fused matmul groups (decode_fusion.hpp)
  bool batch_invariant = false;    // one-row matmuls run the many-row kernels (deterministic serving)
};

// The instruction-set level an EngineOptions::cpu_isa / --isa name selects; throws
// kInvalidArgument naming the valid names.
cpu::Isa parse_cpu_isa(std::string_view name);

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options);

  [[nodiscard]] const BackendInfo& info() const noexcept override { return info_; }
  WeightBindReport bind_weights(const graph::Graph& graph, const graph::WeightSource& source,
                                const std::function<void(double)>& progress) override;
  void prepare(const graph::Graph& graph, const graph::MemoryPlan& plan, std::int64_t kv_capacity) override;
  [[nodiscard]] std::unique_ptr<BackendBuffer> allocate(std::size_t bytes, std::string_view what) override;
  void run(const graph::Graph& graph, std::size_t index, const StepContext& step) override;
  void read(const BackendBuffer& buffer, std::size_t offset, std::span<std::byte> dst) override;
  void write(BackendBuffer& buffer, std::size_t offset, std::span<const std::byte> src) override;
  void copy(const BackendBuffer& src, std::size_t src_offset, BackendBuffer& dst, std::size_t dst_offset,
            std::size_t bytes) override;
  [[nodiscard]] std::span<const std::byte> host_view(const BackendBuffer& buffer, std::size_t offset,
                                                     std::size_t bytes) override;
  void summarize_logits(const BackendBuffer& buffer, std::size_t offset, std::int64_t n_rows, std::int64_t vocab,
                        std::span<const std::int64_t> rows, std::int64_t k, std::span<LogitSummary> out) override;
  void synchronize() override {}
  // Tasks i, i + parts, ... on each of the context's threads.
  void run_host_tasks(std::int64_t n, FunctionRef<void(std::int64_t)> task) override;
  [[nodiscard]] MemoryUsage memory() const override;

 private:
  friend class CpuBuffer;
  void release(std::size_t bytes) noexcept;
  // Host bytes [offset, offset + bytes) of one of this backend's buffers; kInternal otherwise.
  [[nodiscard]] const std::byte* checked_range(const BackendBuffer& buffer, std::size_t offset, std::size_t bytes,
                                               const char* what) const;
  // True when node `index` belongs to a decode fusion that applies to this step (one row); the
  // fusion runs when its first node comes, and the others are then done.
  bool run_fused(const graph::Graph& graph, std::size_t index, const StepContext& step);

  // The layout and row stride each weight is bound in (by WeightId).
  struct Placement {
    cpu::WeightLayout layout;
    std::size_t row_stride;
    std::size_t offset;  // in resident_ (resident weights only)
  };
  [[nodiscard]] std::vector<Placement> place_weights(const graph::Graph& graph, std::size_t* total) const;

  CpuBackendOptions options_;
  cpu::CpuContext ctx_;
  BackendInfo info_;
  AlignedBuffer resident_;  // every weight, when options_.resident_weights
  std::uint64_t weight_bytes_ = 0;
  std::atomic<std::uint64_t> allocated_{0};
  std::atomic<std::uint64_t> high_water_{0};
  std::vector<cpu::WeightMatrix> weights_;  // by graph WeightId; norm vectors are 1 x n
  CpuKernels kernels_{ctx_, weights_};
  std::vector<ops::AttentionSequenceRef> attention_sequences_;  // the current attention node's, reused
  DecodeFusions fusions_;                   // of the prepared graph (none without options_.decode_fusion)
};

}  // namespace sitsrt
