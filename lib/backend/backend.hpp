// The interface every compute backend implements (CPU now; CUDA next). Coarse operations only:
// bind weights, allocate budgeted buffers, run a node or a range of nodes of a step, read and
// copy values, synchronise, report memory. The engine and the executor hold backends through
// this interface only (runtime/backend_registry.hpp makes them); kernels, weight layouts and
// scratch stay inside each backend. The contract is in docs/architecture.md ("Backend contract").
#pragma once

#include "core/device.hpp"
#include "core/function_ref.hpp"
#include "core/logit_summary.hpp"
#include "graph/graph.hpp"
#include "graph/memory_plan.hpp"
#include "graph/weight_source.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace sitsrt {

class KvCache;

// A buffer owned by a backend. data() is an address in the backend's device memory: host
// memory for the CPU backend, device memory for CUDA; code outside the backend never
// dereferences it (it reads through Backend::read / host_view).
class BackendBuffer {
 public:
  virtual ~BackendBuffer() = default;
  [[nodiscard]] virtual std::byte* data() noexcept = 0;
  [[nodiscard]] virtual std::size_t size() const noexcept = 0;
  [[nodiscard]] virtual Device device() const noexcept = 0;
};

// One sequence's share of a step: token rows [row_begin, row_begin + n_rows) are its tokens at
// positions pos0, pos0 + 1, ... of its own KV cache.
struct StepSequence {
  std::int64_t row_begin = 0;
  std::int64_t n_rows = 0;
  std::int64_t pos0 = 0;
  KvCache* kv = nullptr;
};

// Everything a node needs about the current step, besides the graph: a batch of sequences
// whose rows are stacked (one pass over the weights serves them all; attention runs per
// sequence over its own cache). Token ids, positions and indices are host memory; a device
// backend uploads what its kernels read.
struct StepContext {
  std::int64_t n_tokens = 0;    // rows of kTokens values
  std::int64_t n_outputs = 0;   // rows of kOutputs values
  std::span<const std::int32_t> token_ids;
  std::span<const std::int32_t> positions;     // per token row: its position in its sequence
  std::span<const StepSequence> sequences;     // in row order, together covering [0, n_tokens)
  std::span<const std::int32_t> output_rows;   // the token rows the head computes, increasing (n_outputs)
  BackendBuffer* arena = nullptr;              // activation arena (this backend's), laid out by `plan`
  const graph::MemoryPlan* plan = nullptr;
};

// Decode steps a GPU backend ran as graphs (CudaBackend: decode_graphs.hpp).
struct GraphCounters {
  std::uint64_t captures = 0;
  std::uint64_t replays = 0;  // captures included
};

// Which kernels a GPU backend's matmuls and long attentions took, counted per launch as it is
// queued from the host (a replayed graph's once, when captured; a step whose capture failed and
// ran eagerly, twice): the prefill GEMM FP8 x FP8 or in BF16, or the decode kernels on the tensor
// cores or the CUDA cores (these also run prompt chunks under batch invariance or where the
// prefill GEMM is unavailable); attentions of steps longer than flash-decoding takes on the
// tiled tensor-core kernel or a block per row.
struct KernelPathCounters {
  std::uint64_t prefill_fp8 = 0;
  std::uint64_t prefill_bf16 = 0;
  std::uint64_t decode_tensor_cores = 0;
  std::uint64_t decode_cuda_cores = 0;
  std::uint64_t prefill_attention_tiled = 0;
  std::uint64_t prefill_attention_rows = 0;
  // FP8 x FP8 GEMMs that found their activations' E4M3 rows in place (written by the RMSNorm in
  // front of them, or by an earlier GEMM over the same rows) instead of quantizing them.
  std::uint64_t prefill_fp8_activation_reuses = 0;
  // Of prefill_fp8: GEMMs with 128 x 128 block-scaled weights (the rest per channel).
  std::uint64_t prefill_fp8_blocks = 0;
};

struct MemoryUsage {
  std::uint64_t weight_bytes = 0;      // weights resident (mapped or uploaded)
  std::uint64_t allocated_bytes = 0;   // live buffers from allocate()
  std::uint64_t high_water_bytes = 0;  // most ever live at once
  std::uint64_t budget_bytes = 0;      // 0: unlimited
};

// What a backend is, as the engine reports it (ModelInfo, audit digest, CLI): fixed once made.
struct BackendInfo {
  std::string name;           // registry name: "cpu", "cuda"
  Device device;
  std::string description;    // e.g. the CPU model, or the GPU name
  std::string isa;            // CPU: the instruction-set level dispatched to ("avx512vnni")
  std::string weight_prefetch;  // CPU: how decode requests weights ahead ("l2, 4096 B ahead"; cpu/decode_prefetch.hpp)
  int threads = 0;            // CPU: worker threads
  int multiprocessors = 0;    // GPU: SMs
  bool int8_activations = false;  // decode matmuls quantize their input rows to int8
  bool decode_fusion = false;     // one-row steps run fused matmul groups
  bool head_major_kv = false;     // its KV pools store blocks head by head (ops::KvLayerRef)
  bool exact_recent_window = false;  // attends int8/int4 KV's f16 recent window (ops::KvLayerRef::recent_window)
  std::int64_t logit_summary_k = 0;  // most best ids summarize_logits gives a row; 0: it gives none
  std::uint64_t memory_bytes = 0;  // device memory (CPU: physical RAM); 0: unknown
};

// What bind_weights did.
struct WeightBindReport {
  std::uint64_t bytes = 0;       // held by the backend (resident copies or mapped)
  int repacked_tensors = 0;      // weights held in a layout private to the backend
  double copy_seconds = 0.0;     // copying / uploading / repacking; 0 when read in place
};

// The checks every summarize_logits makes: kInternal for k outside [1, limit], a row outside
// [0, n_rows), fewer than n_rows outputs, or a vocabulary < 1.
void check_logit_summary_request(std::int64_t n_rows, std::int64_t vocab, std::span<const std::int64_t> rows,
                                 std::int64_t k, std::int64_t limit, std::span<const LogitSummary> out);

class Backend {
 public:
  virtual ~Backend() = default;
  [[nodiscard]] virtual const BackendInfo& info() const noexcept = 0;

  // Makes the graph's weights usable by run(). Called once, before any step; progress (may be
  // empty) receives the fraction of weight bytes done.
  virtual WeightBindReport bind_weights(const graph::Graph& graph, const graph::WeightSource& source,
                                        const std::function<void(double)>& progress) = 0;

  // Sizes scratch for steps of up to plan.max_tokens tokens and `kv_capacity` positions.
  virtual void prepare(const graph::Graph& graph, const graph::MemoryPlan& plan, std::int64_t kv_capacity) = 0;

  // Allocates against the budget; throws sitsrt::Error(kOutOfMemory) naming `what` and the deficit.
  [[nodiscard]] virtual std::unique_ptr<BackendBuffer> allocate(std::size_t bytes, std::string_view what) = 0;

  // Runs node `index` of `graph` for the step (its inputs were computed by earlier calls).
  virtual void run(const graph::Graph& graph, std::size_t index, const StepContext& step) = 0;
  // Runs nodes [first, last) in order; a backend may execute the range as one unit (fuse nodes,
  // capture it as a device graph). Results equal running each node with run().
  virtual void compute(const graph::Graph& graph, std::size_t first, std::size_t last, const StepContext& step) {
    for (std::size_t i = first; i < last; ++i) run(graph, i, step);
  }

  // Copies bytes [offset, offset + dst.size()) of `buffer` to host memory, after the work
  // queued so far; throws kInternal for a range outside the buffer or another backend's buffer.
  virtual void read(const BackendBuffer& buffer, std::size_t offset, std::span<std::byte> dst) = 0;
  // Summaries (core/logit_summary.hpp, the CPU's definitions) of rows `rows` of the float logits
  // [n_rows x vocab] at `offset` of `buffer`, each with its k best (1 <= k <=
  // info().logit_summary_k), into out[r] for each r in `rows`, after the work queued so far; the
  // same row gives the same summary whatever else is asked. Backends without summaries
  // (logit_summary_k 0) throw kInternal.
  virtual void summarize_logits(const BackendBuffer& buffer, std::size_t offset, std::int64_t n_rows,
                                std::int64_t vocab, std::span<const std::int64_t> rows, std::int64_t k,
                                std::span<LogitSummary> out);
  // Copies host bytes into [offset, offset + src.size()) of `buffer`, ordered with the queued
  // work (swapped-out KV blocks coming back); same range checks as read().
  virtual void write(BackendBuffer& buffer, std::size_t offset, std::span<const std::byte> src) = 0;
  // Copies `bytes` between two of this backend's buffers, ordered with the queued work.
  virtual void copy(const BackendBuffer& src, std::size_t src_offset, BackendBuffer& dst, std::size_t dst_offset,
                    std::size_t bytes) = 0;
  // The bytes in place when the buffer is host memory (valid until the next step on it), so
  // callers skip the copy; empty when they must read().
  [[nodiscard]] virtual std::span<const std::byte> host_view(const BackendBuffer& buffer, std::size_t offset,
                                                             std::size_t bytes) = 0;

  // Runs task(0) .. task(n - 1), independent host work between steps (sampling each sequence's
  // token from its logits), on the backend's host threads where it has them; returns when all
  // are done. Tasks must not throw. The default runs them in order on the caller.
  virtual void run_host_tasks(std::int64_t n, FunctionRef<void(std::int64_t)> task) {
    for (std::int64_t i = 0; i < n; ++i) task(i);
  }

  // Waits for the queued work.
  virtual void synchronize() = 0;
  [[nodiscard]] virtual MemoryUsage memory() const = 0;
  [[nodiscard]] virtual GraphCounters graph_counters() const { return {}; }
  [[nodiscard]] virtual KernelPathCounters kernel_paths() const { return {}; }
};

}  // namespace sitsrt
