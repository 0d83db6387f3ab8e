// The CUDA backend: weights uploaded once into one device allocation (in their stored formats, or
// planar for FP8 / INT4 g128 / Q8_0 / Q4_0 / Q4_K / Q6_K / F16 / BF16), activations, KV blocks and scratch from the
// budgeted caching allocator, every kernel and copy ordered on the context's one stream. Nodes
// run through ops:: (the same validation as the CPU backend) into CudaKernels, decode fusions as
// one launch each; decode steps replay CUDA graphs (decode_graphs.hpp). Made through
// cuda_backend_factory.hpp.
#pragma once

#include "backend/backend.hpp"
#include "backend/decode_fusion.hpp"
#include "cuda_backend/cuda_backend_factory.hpp"
#include "cuda_backend/cuda_context.hpp"
#include "cuda_backend/cuda_kernels.hpp"
#include "cuda_backend/decode_graphs.hpp"
#include "cuda_backend/device_allocator.hpp"
#include "cuda_backend/mirrored_buffer.hpp"
#include "cuda_backend/staging_ring.hpp"

#include <memory>
#include <vector>

namespace sitsrt::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options);
  ~CudaBackend() override;

  [[nodiscard]] const BackendInfo& info() const noexcept override { return info_; }
  WeightBindReport bind_weights(const graph::Graph& graph, const graph::WeightSource& source,
                                const std::function<void(double)>& progress) override;
  void prepare(const graph::Graph& graph, const graph::MemoryPlan& plan, std::int64_t kv_capacity) override;
  [[nodiscard]] std::unique_ptr<BackendBuffer> allocate(std::size_t bytes, std::string_view what) override;
  void run(const graph::Graph& graph, std::size_t index, const StepContext& step) override;
  void compute(const graph::Graph& graph, std::size_t first, std::size_t last, const StepContext& step) override;
  void read(const BackendBuffer& buffer, std::size_t offset, std::span<std::byte> dst) override;
  void summarize_logits(const BackendBuffer& buffer, std::size_t offset, std::int64_t n_rows, std::int64_t vocab,
                        std::span<const std::int64_t> rows, std::int64_t k, std::span<LogitSummary> out) override;
  void write(BackendBuffer& buffer, std::size_t offset, std::span<const std::byte> src) override;
  void copy(const BackendBuffer& src, std::size_t src_offset, BackendBuffer& dst, std::size_t dst_offset,
            std::size_t bytes) override;
  [[nodiscard]] std::span<const std::byte> host_view(const BackendBuffer&, std::size_t, std::size_t) override {
    return {};  // device memory: callers read()
  }
  void synchronize() override;
  [[nodiscard]] MemoryUsage memory() const override;
  [[nodiscard]] GraphCounters graph_counters() const override;
  [[nodiscard]] KernelPathCounters kernel_paths() const override;

 private:
  // Device bytes [offset, offset + bytes) of one of this backend's buffers; kInternal otherwise.
  [[nodiscard]] std::byte* checked_range(const BackendBuffer& buffer, std::size_t offset, std::size_t bytes,
                                         const char* what) const;
  void run_node(const graph::Graph& graph, std::size_t index, const StepContext& step);
  // Makes the summary buffers hold kSummaryRows rows of `vocab` logits (stream mutex held, or
  // before any step).
  void reserve_summaries(std::int64_t vocab);
  // Output rows summarised per launch (a step with more takes them in groups).
  static constexpr std::int64_t kSummaryRows = 64;
  // The node's decode fusion, when it has one that applies to this step: true when handled (the
  // lead runs the fused kernel, the other members nothing).
  bool run_fused(const graph::Graph& graph, std::size_t index, const StepContext& step);
  // Value `id` of the step's arena as the kernels see it (rows by its row space).
  [[nodiscard]] ops::TensorRef value_view(const graph::Graph& graph, graph::ValueId id, const StepContext& step) const;

  CudaContext context_;
  DeviceAllocator allocator_;
  BackendInfo info_;
  std::byte* weights_memory_ = nullptr;
  std::size_t weights_bytes_ = 0;
  std::vector<DeviceWeight> weights_;
  std::unique_ptr<StagingRing> staging_;
  std::unique_ptr<MirroredBuffer> summaries_;  // logit summary records (device) and their host copy
  std::byte* summary_chunks_ = nullptr;        // the chunk records they are merged from (device)
  std::size_t summary_chunks_bytes_ = 0;
  std::unique_ptr<CudaKernels> kernels_;
  std::unique_ptr<DecodeGraphs> graphs_;                        // null with CudaBackendOptions::graphs off
  std::vector<ops::AttentionSequenceRef> attention_sequences_;  // the current attention node's, reused
  CudaBackendOptions options_;
  DecodeFusions fusions_;                  // those whose matmuls are all planar, of one format and width
  std::vector<bool> step_input_nodes_;     // per node of the prepared graph: takes per-step host inputs
  std::vector<bool> rope_into_attention_;  // per rope pair lead: its attention's store kernel rotates Q and K
  std::vector<bool> norm_feeds_fp8_;       // per RMSNorm node: a matmul reading its output takes FP8 x FP8
};

}  // namespace sitsrt::cuda
