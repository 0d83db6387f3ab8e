// CUDA graphs for decode steps. A decode step of an 8B model is ~500 small kernels (a 4096 x
// 4096 INT4 matmul streams its 8 MiB in ~2 us); launched one by one from the host they take
// longer to queue than to run. So a decode step (every sequence feeding one token) is captured
// once per shape (batch size, node range, arena and memory plan) and replayed:
//   - the first step of a shape runs eagerly (it also copies the device constants it needs);
//   - the second is captured: its nodes run through CudaKernels in kCapture mode, their inputs
//     laid out in the GraphInputImage, and the graph is instantiated;
//   - later steps run the nodes in kFillInputs mode (host work only: validation, descriptors,
//     block tables into the image), copy the image up once and launch the graph.
// A replay whose inputs no longer fit the captured layout (a block table past its size class),
// or whose device constants moved, is captured again; what cannot be captured runs eagerly.
// Bit for bit the same kernels as the eager path, so results do not depend on graphs.
#pragma once

#include "cuda_backend/cuda_kernels.hpp"
#include "cuda_backend/graph_input_image.hpp"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

namespace sitsrt::cuda {

// What a captured graph holds fixed: the nodes, the rows, and the activation addresses.
struct DecodeGraphKey {
  const void* graph = nullptr;
  std::size_t first = 0, last = 0;
  std::int64_t n_tokens = 0, n_outputs = 0;
  const void* arena = nullptr;
  std::uint64_t plan_hash = 0;  // of the memory plan's offsets
  bool operator==(const DecodeGraphKey&) const = default;
};

struct DecodeGraphKeyHash {
  std::size_t operator()(const DecodeGraphKey& k) const noexcept;
};

struct DecodeGraphStats {
  std::uint64_t captures = 0;  // graphs instantiated
  std::uint64_t replays = 0;   // steps run from a graph (captures included)
  std::uint64_t eager = 0;     // decode steps run launch by launch
};

// The counters as the stepping thread updates them and other threads read them (queue_stats).
struct AtomicDecodeGraphStats {
  std::atomic<std::uint64_t> captures{0};
  std::atomic<std::uint64_t> replays{0};
  std::atomic<std::uint64_t> eager{0};
};

class DecodeGraphs {
 public:
  // At most this many graphs are kept (one per batch size in practice).
  static constexpr std::size_t kMaxGraphs = 64;

  DecodeGraphs(const CudaContext& context, DeviceAllocator& allocator);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // Runs the step (run_nodes issues its nodes through `kernels`) from a graph and returns true,
  // or returns false when the caller must run it eagerly.
  // fill_nodes issues only the nodes that take per-step host inputs (token ids, positions, block
  // tables, output rows), in the same order: a replay's host pass needs no others.
  bool run(const DecodeGraphKey& key, CudaKernels& kernels, const std::function<void()>& run_nodes,
           const std::function<void()>& fill_nodes);
  // Safe to call from any thread.
  [[nodiscard]] DecodeGraphStats stats() const noexcept {
    return {stats_.captures.load(std::memory_order_relaxed), stats_.replays.load(std::memory_order_relaxed),
            stats_.eager.load(std::memory_order_relaxed)};
  }

 private:
  struct Entry {
    cudaGraphExec_t exec = nullptr;
    std::vector<std::size_t> layout;  // the input image's slot classes at capture
    std::uint64_t image_generation = 0;
    std::uint64_t constants_generation = 0;
    int failed_captures = 0;    // captures that threw (a node that cannot be captured, or bad input)
    bool uncapturable = false;  // its capture failed for good: eager from then on
  };
  bool replay(Entry& entry, CudaKernels& kernels, const std::function<void()>& fill_nodes);
  bool capture(Entry& entry, CudaKernels& kernels, const std::function<void()>& run_nodes);
  void launch(const Entry& entry);
  static void destroy(Entry& entry) noexcept;

  const CudaContext& context_;
  GraphInputImage image_;
  std::unordered_map<DecodeGraphKey, Entry, DecodeGraphKeyHash> graphs_;
  std::size_t live_ = 0;
  AtomicDecodeGraphStats stats_;
};

}  // namespace sitsrt::cuda
